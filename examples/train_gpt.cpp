// Trains the small GPT, or with --model llama the Llama-style model (RMS
// norms, rotary embeddings, --kv-heads key/value heads, SwiGLU), on a
// generated task with data, tensor, pipeline and state parallelism chosen
// on the command line, on 1 to 8 ranks:
//
//   mpiexec -n 4 build/release/examples/train_gpt --dp 2 --tp 2 --zero 3 --micro-batch 4 --accumulation 2
//   mpiexec -n 4 build/release/examples/train_gpt --model llama --kv-heads 1 --tp 4
//   mpiexec -n 2 build/release/examples/train_gpt --pp 2 --schedule 1f1b --microbatches 8 --timeline 1f1b.svg
//   mpiexec -n 2 build/release/examples/train_gpt --dp 2 --precision bf16 --recompute selective
//   mpiexec -n 4 build/release/examples/train_gpt --model llama --cp 2 --cp-form all-to-all --dp 2
//   mpiexec -n 4 build/release/examples/train_gpt --model llama --experts 4 --top-k 2 --ep 2 --dp 2
//
// With --pp, the layers are cut into pp x --virtual chunks balanced by
// their flops (the embedding on the first, the head on the last), and each
// step's micro-batches (--microbatches, the same as --accumulation) run
// through the pipeline by --schedule. --timeline FILE.svg draws the last
// step's actions per stage as measured, next to the schedule simulated with
// the measured mean action times, prints both idle shares, and writes
// FILE.png too where rsvg-convert is installed.
//
// The task needs no download and has a pattern to learn: each sequence
// counts up from a random start by a stride drawn from a few, modulo the
// vocabulary (7, 10, 13, ... with stride 3), and the target of each token is
// the next one. A model that has seen two tokens can predict the rest, so
// the loss falls from log(vocabulary) towards 0. With --padded, sequences
// have random lengths and the positions after the end are padding. Samples
// come from a counter-based hash of (seed, step, sample index), so every
// layout and rank count sees the same data.
//
// The Llama-style model also takes context parallelism, --cp N (each
// sequence split over N ranks in the balanced order, attention by --cp-form
// ring or all-to-all), and experts, --experts E (a mixture of E experts in
// every other block, each token to --top-k of them, dropless or with a
// --capacity factor, the experts split over --ep ranks, which also split
// the batch as data parallelism does).
//
// --precision bf16 or fp16 computes in that type (parameters and
// activations), with float gradients (or, --gradient-type, in the model's
// type), master weights and optimizer state; fp16 scales its loss and
// skips a step that overflows. --recompute
// selective or full recomputes activations in backward (the same
// gradients, less memory kept).
//
// Each step prints a progress line (unless --quiet): the loss, the global
// gradient norm, tokens per second, the step's time, the time left at the
// mean step time so far and the peak memory per rank; the memory per phase
// and category (the mesh's ledger) is printed after the first and the last
// step. --check
// trains the same model on one rank (dp = tp = 1, ZeRO-0) alongside and
// reports the largest difference of the two loss curves; the exit status
// says whether it stayed within the tolerance. --report FILE writes the
// run's plan, each step's seconds, the machine's pace around it, per memory
// category the largest peak over the ranks and phases, rank 0's peaks per
// phase and the last step's action-by-action timeline (JSON), for comparing
// runs with the planner's predictions (shardmesh-plan-training --html FILE
// --report FILE shows them beside the plan).
//
// --save DIR writes the training state to DIR/state.h5 after the last step
// (and every --every K steps): parameters and optimizer state in whatever
// layouts this run keeps them, the step, the samples consumed, the seed and
// the options that define the run. --resume DIR continues from there under
// any dp, cp, ep, tp, pp, ZeRO stage and rank count: the run's options come from
// the checkpoint (giving one that differs is an error), the state is read
// into this run's layouts and checked bit for bit against the saved one,
// and the steps go on from the saved step to --steps. --save-initial also
// writes the state before the first step to DIR/initial.h5. Every flag is
// checked before any work, and the folders before the first step; a job
// holds its folders (DIR/lock, run_folder.hpp) and saves nothing once its
// launcher is gone.
#include <shardmesh/io/training_state.hpp>
#include <shardmesh/shardmesh.hpp>
#include <shardmesh/train/machine_pace.hpp>
#include <shardmesh/train/memory_report.hpp>
#include <shardmesh/train/pipeline_timeline.hpp>

#include "run_folder.hpp"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <numeric>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

using namespace shardmesh;

namespace {

template <class T>
using gpt_type = parallel::gpt<T, Kokkos::HostSpace>;
template <class T>
using llama_type = parallel::llama<T, Kokkos::HostSpace>;

// The two loss curves of --check may differ by this fraction of the loss: the
// same float model, its sums taken in other orders (about 1e-6 relative per
// step), through a few dozen AdamW steps. A wrong reduction or a lost
// sample moves the loss by far more. In bf16 and fp16 tensor parallelism
// rounds partial sums that one rank does not: a few units of the format's
// roundoff (2^-9, 2^-12) apart (tests/parallel/precision_test.cpp).
double check_tolerance(std::string const& precision) {
  return precision == "bf16" ? 1e-2 : precision == "fp16" ? 2e-3 : 1e-3;
}

struct options {
  std::size_t dp = 1, tp = 1, pp = 1, chunks = 1, zero = 0, micro = 4, accumulation = 1, global = 0, steps = 20;
  std::size_t cp = 1, ep = 1;  // context and expert parallelism (llama)
  std::string cp_form = "ring";
  std::size_t experts = 0, top_k = 2;  // a mixture of experts in every other block (llama; 0: none)
  double capacity = 0;                 // the experts' capacity factor (0: dropless)
  std::string schedule = "1f1b", timeline, report, save, resume;
  std::size_t every = 0;
  std::string model = "gpt";
  std::string precision = "fp32", recompute = "none";  // not run options: a checkpoint resumes in any
  std::string gradient_type = "fp32", gradient_reduction = "fp32";
  std::size_t vocabulary = 32, sequence = 16, hidden = 32, heads = 4, head_size = 8, ffn = 128, layers = 2;
  std::size_t kv_heads = 0;  // 0: as many as the heads
  double rope_base = 10000;
  std::string method = "adamw";
  double lr = 3e-3, clip = 1.0, weight_decay = 0.01, lr_floor = 0.1;
  std::size_t warmup = 0, decay_steps = 0;  // decay_steps 0: a constant learning rate after the warm-up
  std::size_t bucket_kib = 64;
  std::uint64_t seed = 1;
  bool save_initial = false;
  pid_t launcher = 0;  // this rank's parent when the run started: its launcher
  bool micro_given = false, sequence_parallel = false, padded = false, check = false, quiet = false;
  std::vector<std::string> given;  // the run options given on the command line
};

// The options that define a run (model, data, optimizer): saved with its
// state, and taken from there by a resumed run. f(name, value) with the
// command-line name.
template <class Options, class F>
void for_each_run_option(Options& o, F&& f) {
  f("model", o.model);
  f("vocabulary", o.vocabulary);
  f("sequence", o.sequence);
  f("hidden", o.hidden);
  f("heads", o.heads);
  f("head-size", o.head_size);
  f("ffn", o.ffn);
  f("layers", o.layers);
  f("kv-heads", o.kv_heads);
  f("rope-base", o.rope_base);
  f("experts", o.experts);
  f("top-k", o.top_k);
  f("capacity", o.capacity);
  f("optimizer", o.method);
  f("lr", o.lr);
  f("warmup", o.warmup);
  f("decay-steps", o.decay_steps);
  f("lr-floor", o.lr_floor);
  f("clip", o.clip);
  f("weight-decay", o.weight_decay);
  f("seed", o.seed);
  f("global-batch", o.global);
  f("padded", o.padded);
}

template <class T>
std::string option_text(T const& value) {
  std::ostringstream out;
  out.precision(17);
  out << value;
  return out.str();
}

// "name=value" lines; the global batch as the run uses it.
std::string run_configuration(options o, std::size_t global_batch) {
  o.global = global_batch;
  std::string text;
  for_each_run_option(o,
                      [&](char const* name, auto const& value) { text += name + ("=" + option_text(value)) + "\n"; });
  return text;
}

// The checkpoint's run options into o; one given on the command line must agree.
void take_run_options(options& o, std::string const& saved) {
  std::map<std::string, std::string> values;
  std::istringstream lines(saved);
  for (std::string line; std::getline(lines, line);)
    if (auto const eq = line.find('='); eq != std::string::npos) values[line.substr(0, eq)] = line.substr(eq + 1);
  for_each_run_option(o, [&](char const* name, auto& value) {
    auto const at = values.find(name);
    if (at == values.end()) throw checkpoint_error(std::string("the checkpoint has no option ") + name);
    if (std::find(o.given.begin(), o.given.end(), name) != o.given.end()) {
      if (option_text(value) != at->second)
        throw invalid_option_error(std::string("--") + name + " " + option_text(value) +
                                   " differs from the checkpoint's " + at->second);
      return;
    }
    std::istringstream in(at->second);
    in >> value;
  });
}

// The model's config, description and parameters, by its type.
template <class T>
parallel::gpt_config config_of(options const& o, gpt_type<T> const*) {
  return {o.vocabulary,
          o.sequence,
          o.hidden,
          o.heads,
          o.head_size,
          o.ffn,
          o.layers,
          1e-5,
          o.sequence_parallel,
          *parallel::parse_recompute_mode(o.recompute)};
}
template <class T>
parallel::llama_config config_of(options const& o, llama_type<T> const*) {
  return {o.vocabulary,
          o.sequence,
          o.hidden,
          o.heads,
          o.kv_heads == 0 ? o.heads : o.kv_heads,
          o.head_size,
          o.ffn,
          o.layers,
          1e-5,
          o.rope_base,
          o.sequence_parallel,
          *parallel::parse_recompute_mode(o.recompute),
          o.cp_form == "all-to-all" ? context_form::all_to_all : context_form::ring,
          {.count = o.experts, .top_k = o.top_k, .capacity = o.capacity}};
}
parallel::gpt_description describe(parallel::gpt_config const& c) { return parallel::gpt_description(c); }
parallel::llama_description describe(parallel::llama_config const& c) { return parallel::llama_description(c); }

// Norms' gains 1 and biases 0; the rest uniform with variance 1/(3 fan-in),
// made shard by shard on each rank's device (no rank builds a whole tensor).
parallel::parameter_initializer initial_values(std::uint64_t seed) {
  return [seed](parallel::parameter_spec const& p) {
    if (p.name.ends_with("_g")) return parallel::initializer::constant(1);
    if (p.name.ends_with("_b")) return parallel::initializer::constant(0);
    std::vector<std::size_t> const& e = p.extents;
    double const scale = 1 / std::sqrt(static_cast<double>(e[0] * (e.size() == 3 ? e[1] : 1)));
    std::uint64_t stream = 14695981039346656037ULL;  // FNV-1a of the name
    for (char ch : p.name) stream = (stream ^ static_cast<unsigned char>(ch)) * 1099511628211ULL;
    return parallel::initializer::uniform(scale, seed, stream);
  };
}

// The samples [first, first + count) of a step: tokens and targets, row-major [count][sequence].
struct samples {
  std::vector<int> tokens, targets;
};
samples make_samples(options const& o, std::size_t step, std::size_t first, std::size_t count) {
  samples s{std::vector<int>(count * o.sequence), std::vector<int>(count * o.sequence)};
  for (std::size_t i = 0; i < count; ++i) {
    std::uint64_t const id = step * 1000003 + first + i;
    auto const v = static_cast<std::uint64_t>(o.vocabulary);
    parallel::counter_random const random{o.seed};
    std::uint64_t const start = random.bits(id, 0) % v, stride = 1 + random.bits(id, 1) % 4;
    std::size_t const length = o.padded ? 2 + random.bits(id, 2) % (o.sequence - 1) : o.sequence;
    for (std::size_t t = 0; t < o.sequence; ++t) {
      s.tokens[i * o.sequence + t] = static_cast<int>((start + stride * t) % v);
      s.targets[i * o.sequence + t] = t + 1 < length ? static_cast<int>((start + stride * (t + 1)) % v) : -1;
    }
  }
  return s;
}

parallel::schedule_kind schedule_of(std::string const& name) {
  for (auto k : {parallel::schedule_kind::gpipe, parallel::schedule_kind::one_f_one_b,
                 parallel::schedule_kind::interleaved, parallel::schedule_kind::zero_bubble})
    if (parallel::to_string(k) == name) return k;
  throw invalid_option_error("no schedule " + name);
}

// The axes a run is split over besides the batch's data parallelism.
struct run_axes {
  std::size_t cp = 1, ep = 1, pp = 1, tp = 1;
  bool experts = false;  // an "ep" axis (of extent 1 for none) for the experts
};

// dp, cp (if above 1), ep (with experts), pp, tp.
mesh_shape mesh_of(std::size_t dp, run_axes const& a) {
  mesh_shape out{{"dp", dp}};
  if (a.cp > 1) out.axes[out.ndim++] = {"cp", a.cp};
  if (a.experts) out.axes[out.ndim++] = {"ep", a.ep};
  out.axes[out.ndim++] = {"pp", a.pp};
  out.axes[out.ndim++] = {"tp", a.tp};
  return out;
}

// One training run on its own mesh: dp x cp x ep x pp x tp over `comm`, this rank's
// pipeline stage holding its chunks of the model.
template <class Model>
class run {
 public:
  using trainer_type = parallel::trainer<Model>;

  // batch.data_parallel(): the replicas the batch is split over, dp x ep.
  run(MPI_Comm comm, options const& o, parallel::batch_accounting const& batch, run_axes const& axes,
      parallel::zero_stage stage)
      : o_(o),
        axes_(axes),
        batch_(batch),
        mesh_(comm, mesh_of(batch.data_parallel() / axes.ep, axes)),
        stage_(mesh_.submesh(axis_set::all(mesh_.shape().ndim) - axis_set::of(mesh_.shape().find("pp")))),
        config_(config_of(o, static_cast<Model const*>(nullptr))),
        chunks_(make_chunks(axes.pp, axes.pp > 1 ? o.chunks : 1)),
        trainer_(pointers(), mesh_,
                 {.stage = stage,
                  .method = method(o),
                  .lr_schedule = lr_schedule(o),
                  .clip_norm = o.clip,
                  .bucket_bytes = o.bucket_kib * 1024,
                  .schedule = axes.pp > 1 ? schedule_of(o.schedule) : parallel::schedule_kind::one_f_one_b,
                  .timeline = !o.timeline.empty() || !o.report.empty(),
                  .gradient_type = *parallel::parse_precision(o.gradient_type),
                  .gradient_reduction = *parallel::parse_precision(o.gradient_reduction)}) {}

  [[nodiscard]] typename trainer_type::step_result step(std::size_t s) {
    std::vector<typename trainer_type::micro_batch> micro;
    for (std::size_t a = 0; a < batch_.accumulation(); ++a) {
      interval const part = batch_.micro_step(a);
      samples const d = make_samples(o_, s, part.begin, part.size());
      micro.push_back({tensor_of(d.tokens, part.size()), tensor_of(d.targets, part.size())});
    }
    return trainer_.step(micro);
  }
  // The training state into file, replacing the checkpoint there once complete.
  void save(std::filesystem::path const& file, std::size_t samples, std::string const& configuration, pid_t launcher) {
    io::checkpoint_writer out(mesh_, file, {.abandon = [launcher] { return train_gpt::launcher_gone(launcher); }});
    io::save_training_state(
        out, trainer_,
        {.samples = static_cast<std::int64_t>(samples), .seed = o_.seed, .configuration = configuration});
    out.write_value("state_digest", io::training_state_digest(trainer_, mesh_));
    out.commit();
  }
  // The training state from file, checked bit for bit against the saved; the step to go on from.
  std::size_t resume(std::filesystem::path const& file) {
    io::checkpoint_reader const in(mesh_, file);
    io::run_position const at = io::load_training_state(in, trainer_);
    if (io::training_state_digest(trainer_, mesh_) != in.value<std::uint64_t>("state_digest"))
      throw corrupt_checkpoint_error("the state read from " + file.string() + " differs from the saved");
    return static_cast<std::size_t>(at.step);
  }

  [[nodiscard]] device_mesh const& mesh() const { return mesh_; }
  [[nodiscard]] parallel::batch_accounting const& batch() const { return batch_; }
  // The last micro-batch's auxiliary losses (the experts') over every stage (collective).
  [[nodiscard]] double auxiliary_loss() const {
    double mine = 0;
    for (Model const& m : chunks_) mine += m.auxiliary_loss();
    // Each stage's sum is the same on each of its ranks: the world's sum counts it once per rank of the stage.
    return all_reduce_value(mesh_.comm(), mine, reduce_op::sum) / static_cast<double>(stage_.size());
  }
  [[nodiscard]] trainer_type const& trainer() const { return trainer_; }

 private:
  // Chunk c of this stage is virtual stage c x pp + s of the balanced partition.
  std::deque<Model> make_chunks(std::size_t pp, std::size_t v) {
    auto const parts = parallel::partition_layers(config_.layers, pp * v, parallel::partition_costs(describe(config_)));
    std::deque<Model> chunks;
    for (std::size_t c = 0; c < v; ++c)
      chunks.emplace_back(stage_, config_, initial_values(o_.seed),
                          parts[c * pp + mesh_.coordinates()[mesh_.shape().find("pp")]]);
    return chunks;
  }
  std::vector<Model*> pointers() {
    std::vector<Model*> out;
    for (Model& m : chunks_) out.push_back(&m);
    return out;
  }

  static parallel::optimizer method(options const& o) {
    if (o.method == "sgd") return parallel::sgd{.lr = o.lr, .momentum = 0.9, .weight_decay = o.weight_decay};
    return parallel::adamw{.lr = o.lr, .weight_decay = o.weight_decay};
  }
  // Warm-up then cosine with --decay-steps; warm-up alone, then the full rate, without.
  static parallel::learning_rate_schedule lr_schedule(options const& o) {
    if (o.decay_steps > 0) return parallel::warmup_cosine(o.warmup, o.decay_steps, o.lr_floor);
    if (o.warmup == 0) return {};
    return [w = o.warmup](std::size_t t) { return t < w ? static_cast<double>(t) / static_cast<double>(w) : 1.0; };
  }
  // The samples' tokens, each sequence in the order the cp ranks store it (algebra/sequence_chunks.hpp).
  dynamic_dtensor<int, 2, Kokkos::HostSpace> tensor_of(std::vector<int> const& values, std::size_t rows) {
    Kokkos::View<int**, Kokkos::LayoutRight, Kokkos::HostSpace> global("samples", rows, o_.sequence);
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t s = 0; s < o_.sequence; ++s)
        global(r, s) = values[r * o_.sequence + ring_position(s, o_.sequence, axes_.cp, sequence_order::balanced)];
    return distribute<Kokkos::HostSpace>(stage_, chunks_.front().layouts().ids, global);
  }

  options o_;
  run_axes axes_;
  parallel::batch_accounting batch_;
  device_mesh mesh_, stage_;
  typename Model::config_type config_;
  std::deque<Model> chunks_;
  trainer_type trainer_;
};

// B_global = B_micro x N_acc x N_dp when the micro-batch is given (checked
// against --global-batch if that is given too), else --global-batch split
// unevenly; N_dp counts the expert ranks, which split the batch too.
parallel::batch_accounting accounting(options const& o) {
  std::size_t const replicas = o.dp * o.ep;
  if (o.global > 0 && !o.micro_given) return parallel::batch_accounting::uneven(o.global, o.accumulation, replicas);
  return o.global > 0 ? parallel::batch_accounting(o.global, o.micro, o.accumulation, replicas)
                      : parallel::batch_accounting(o.micro, o.accumulation, replicas);
}

template <class Model>
void print_memory(run<Model> const& r, char const* when) {
  if (r.mesh().rank() != 0) return;
  std::printf("\nmemory per rank (rank 0), peak in each phase of the %s step:\n%s\n", when,
              parallel::to_string(r.trainer().memory()).c_str());
}

// The last step's timeline as measured and as simulated with its mean
// action times: the idle shares printed, the picture written (SVG, and PNG
// through rsvg-convert where it is installed).
template <class Model>
void draw_timeline(run<Model> const& r, std::string const& file) {
  auto const measured = parallel::gather_timeline(r.trainer(), r.mesh());
  if (!measured) return;
  parallel::pipeline_simulation const predicted = simulate(measured->schedule, measured->mean_costs());
  std::ofstream(file) << parallel::timeline_svg(*measured, predicted);
  std::printf("\ntimeline of the last step: idle share measured %.3f, predicted from the mean action times %.3f; %s\n",
              measured->idle_share(), predicted.idle_share(), file.c_str());
  std::string const png = file.substr(0, file.rfind('.')) + ".png";
  std::string const convert =
      "command -v rsvg-convert >/dev/null && rsvg-convert -b white -o '" + png + "' '" + file + "'";
  if (std::system(convert.c_str()) == 0) std::printf("and %s\n", png.c_str());
}

// The run's plan, each step's seconds and pace, per memory category the largest peak of any phase on any
// rank, rank 0's peaks per phase and the last step's timeline (collective: every rank calls it; rank 0 writes).
template <class Model>
void write_report(run<Model> const& r, options const& o, std::size_t first_step, std::vector<double> const& seconds,
                  std::vector<double> const& paces, std::vector<double> const& losses, std::string const& file) {
  constexpr std::size_t n = memory_category_count;
  std::array<unsigned long long, n> peak{};
  for (auto const& phase : r.trainer().memory().phases)
    for (std::size_t c = 0; c < n; ++c) peak[c] = std::max<unsigned long long>(peak[c], phase.peak[c]);
  MPI_Allreduce(MPI_IN_PLACE, peak.data(), static_cast<int>(n), MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
  auto const timeline = parallel::gather_timeline(r.trainer(), r.mesh());
  if (r.mesh().rank() != 0) return;
  std::printf(
      "\nreport %s: largest over the ranks: parameters %llu B, gradients %llu B, optimizer state %llu B, "
      "activations %llu B\n",
      file.c_str(), peak[0], peak[1], peak[2], peak[3]);
  std::ofstream out(file);
  out.precision(17);
  out << "{\"first_step\": " << first_step << ",\n";
  // The plan as the planner names it (shardmesh-plan-training --report finds it among its plans).
  parallel::batch_accounting const& b = r.batch();
  out << " \"plan\": {\"dp\": " << o.dp << ", \"cp\": " << o.cp << ", \"ep\": " << o.ep << ", \"tp\": " << o.tp
      << ", \"pp\": " << o.pp << ", \"zero\": " << o.zero << ", \"micro_batch\": " << b.micro()
      << ", \"micro_batches\": " << b.accumulation() << ", \"schedule\": \"" << (o.pp > 1 ? o.schedule : "1f1b")
      << "\", \"virtual_stages\": " << (o.pp > 1 ? o.chunks : 1) << ", \"precision\": \"" << o.precision
      << "\", \"recompute\": \"" << o.recompute << "\", \"gradients\": \"" << o.gradient_type << "\"},\n";
  for (auto const& [key, list] :
       {std::pair{"step_seconds", &seconds}, std::pair{"pace_seconds", &paces}, std::pair{"losses", &losses}}) {
    out << " \"" << key << "\": [";
    for (std::size_t i = 0; i < list->size(); ++i) out << (i > 0 ? ", " : "") << (*list)[i];
    out << "],\n";
  }
  auto const category = [](std::size_t c) {
    std::string key(to_string(static_cast<memory_category>(c)));
    std::replace(key.begin(), key.end(), ' ', '_');  // "optimizer_state"
    return '"' + key + '"';
  };
  out << " \"peak_bytes\": {";
  for (std::size_t c = 0; c < n; ++c) out << (c > 0 ? ", " : "") << category(c) << ": " << peak[c];
  out << "},\n \"memory_phases\": [";
  for (std::size_t i = 0; i < r.trainer().memory().phases.size(); ++i) {
    auto const& phase = r.trainer().memory().phases[i];
    out << (i > 0 ? ", " : "") << "{\"phase\": \"" << phase.phase << "\"";
    for (std::size_t c = 0; c < n; ++c) out << ", " << category(c) << ": " << phase.peak[c];
    out << "}";
  }
  out << "],\n \"timeline\": {\"makespan\": " << (timeline ? timeline->makespan() : 0) << ", \"stages\": [";
  for (std::size_t st = 0; timeline && st < timeline->stages.size(); ++st) {
    out << (st > 0 ? ", " : "") << "[";
    for (std::size_t i = 0; i < timeline->stages[st].size(); ++i) {
      parallel::timed_action const& a = timeline->stages[st][i];
      out << (i > 0 ? ", " : "") << "{\"op\": \"" << parallel::letter(a.action.op)
          << "\", \"micro\": " << a.action.micro << ", \"chunk\": " << a.action.chunk << ", \"start\": " << a.start
          << ", \"end\": " << a.end << "}";
    }
    out << "]";
  }
  out << "]}}\n";
  if (!out) throw invalid_option_error("cannot write " + file);
}

template <class Model>
int train(options const& o, std::size_t ranks, std::filesystem::path const& saved) {
  using run = ::run<Model>;
  parallel::batch_accounting const batch = accounting(o);
  bool const experts = o.experts > 0;
  run distributed(MPI_COMM_WORLD, o, batch, {o.cp, o.ep, o.pp, o.tp, experts},
                  parallel::to_zero_stage(static_cast<long long>(o.zero)));
  std::optional<run> serial;  // the same global batch on one rank
  if (o.check)
    serial.emplace(MPI_COMM_SELF, o, parallel::batch_accounting::uneven(batch.global(), batch.accumulation(), 1),
                   run_axes{.experts = experts}, parallel::zero_stage::none);
  bool const root = distributed.mesh().rank() == 0;
  parallel::batch_accounting const& b = distributed.batch();
  std::size_t first = 0;
  if (!o.resume.empty()) {
    first = distributed.resume(saved);
    if (serial) serial->resume(saved);
    if (root)
      std::printf("train_gpt: resumed from %s after step %zu, the state equal bit for bit to the saved one\n",
                  saved.c_str(), first);
  }
  std::filesystem::path const to_save = o.save.empty() ? "" : std::filesystem::path(o.save) / "state.h5";
  // A save, unless the job is being torn down: then this rank stops without starting one.
  auto const save = [&](std::filesystem::path const& file, std::size_t step) {
    if (train_gpt::launcher_gone(o.launcher)) {
      std::fprintf(stderr, "train_gpt: the launcher is gone; stopping without saving step %zu\n", step);
      std::_Exit(1);
    }
    distributed.save(file, step * b.global(), run_configuration(o, b.global()), o.launcher);
    if (root && !o.quiet) std::printf("saved the state after step %zu to %s\n", step, file.c_str());
  };
  if (o.save_initial && o.resume.empty()) save(std::filesystem::path(o.save) / "initial.h5", 0);
  if (root)
    std::printf(
        "train_gpt: %zu ranks, dp=%zu x cp=%zu x ep=%zu x pp=%zu x tp=%zu, ZeRO-%zu, global batch %zu = %s%zu x %zu "
        "micro-steps x %zu replicas, %zu buckets%s\n",
        ranks, o.dp, o.cp, o.ep, o.pp, o.tp, o.zero, b.global(), b.even() ? "" : "up to ", b.micro(), b.accumulation(),
        b.data_parallel(), distributed.trainer().bucket_count(),
        o.pp > 1 ? (", schedule " + o.schedule + " with " + std::to_string(o.chunks) + " chunk(s) per stage").c_str()
                 : "");
  double worst = 0;
  std::vector<double> step_seconds, paces, losses;
  // The machine's pace around each step (train/machine_pace.hpp), outside its time: a shared
  // machine's slow spells told apart.
  auto const pace = [world = communicator::borrow(MPI_COMM_WORLD)] { return parallel::machine_pace(world); };
  for (std::size_t s = first; s < o.steps; ++s) {
    double const pace_before = o.report.empty() ? 0 : pace();
    MPI_Barrier(MPI_COMM_WORLD);
    double const start = MPI_Wtime();
    auto const r = distributed.step(s);
    double const seconds = MPI_Wtime() - start;
    step_seconds.push_back(seconds);
    if (!o.report.empty()) paces.push_back(std::max(pace_before, pace()));
    losses.push_back(r.loss);
    double const tokens = static_cast<double>(b.global() * o.sequence);
    std::optional<double> difference;
    if (serial) {
      double const want = serial->step(s).loss;
      difference = std::abs(r.loss - want) / std::abs(want);
      worst = std::max(worst, *difference);
    }
    std::size_t peak = 0;
    for (auto const& phase : distributed.trainer().memory().phases) peak = std::max(peak, phase.peak_total);
    double const auxiliary = experts ? distributed.auxiliary_loss() : 0;
    if (root && !o.quiet) {
      std::size_t const done = (s + 1) * 20 / o.steps;
      double const mean =
          std::accumulate(step_seconds.begin(), step_seconds.end(), 0.0) / static_cast<double>(step_seconds.size());
      auto const left = static_cast<long>(std::lround(mean * static_cast<double>(o.steps - s - 1)));
      std::printf(
          "[%s%s] step %3zu/%zu  loss %.4f  grad norm %.3f  %8.0f tokens/s  %.2f ms/step  left %ld:%02ld  peak %s",
          std::string(done, '#').c_str(), std::string(20 - done, '.').c_str(), s + 1, o.steps, r.loss, r.grad_norm,
          tokens / seconds, 1e3 * seconds, left / 60, left % 60, parallel::format_bytes(peak).c_str());
      if (experts) std::printf("  experts' aux %.4f", auxiliary);
      if (difference) std::printf("  vs 1 rank %.1e", *difference);
      std::printf("\n");
    }
    if (s == first) print_memory(distributed, "first");
    if (!o.save.empty() && (s + 1 == o.steps || (o.every > 0 && (s + 1) % o.every == 0))) save(to_save, s + 1);
  }
  print_memory(distributed, "last");
  if (!o.timeline.empty()) draw_timeline(distributed, o.timeline);
  if (!o.report.empty()) write_report(distributed, o, first, step_seconds, paces, losses, o.report);
  if (!o.check) return 0;
  bool const ok = worst <= check_tolerance(o.precision);
  if (root)
    std::printf("check: largest relative difference of the loss curve from 1 rank: %.2e (tolerance %.0e): %s\n", worst,
                check_tolerance(o.precision), ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}

// train<Model<T>> for the precision the run computes in.
template <template <class> class Model>
int train_in(options const& o, std::size_t ranks, std::filesystem::path const& saved) {
  if (o.precision == "bf16") return train<Model<bf16>>(o, ranks, saved);
  if (o.precision == "fp16") return train<Model<fp16>>(o, ranks, saved);
  return train<Model<float>>(o, ranks, saved);
}

// Why the options cannot make a run on `ranks` ranks, naming the flag; empty when they can.
std::string options_error(options const& o, std::size_t ranks) {
  std::pair<char const*, std::size_t> const counts[] = {{"--dp", o.dp},
                                                        {"--cp", o.cp},
                                                        {"--ep", o.ep},
                                                        {"--tp", o.tp},
                                                        {"--pp", o.pp},
                                                        {"--virtual", o.chunks},
                                                        {"--micro-batch", o.micro},
                                                        {"--accumulation", o.accumulation},
                                                        {"--vocabulary", o.vocabulary},
                                                        {"--hidden", o.hidden},
                                                        {"--heads", o.heads},
                                                        {"--head-size", o.head_size},
                                                        {"--ffn", o.ffn},
                                                        {"--layers", o.layers},
                                                        {"--bucket-kib", o.bucket_kib}};
  for (auto const& [flag, value] : counts)
    if (value == 0) return std::string(flag) + " is 0; it must be at least 1";
  if (std::size_t const product = o.dp * o.cp * o.ep * o.pp * o.tp; product != ranks)
    return "--dp x --cp x --ep x --pp x --tp = " + std::to_string(o.dp) + " x " + std::to_string(o.cp) + " x " +
           std::to_string(o.ep) + " x " + std::to_string(o.pp) + " x " + std::to_string(o.tp) + " = " +
           std::to_string(product) + " but there are " + std::to_string(ranks) + " ranks";
  if (o.model != "gpt" && o.model != "llama") return "--model " + o.model + " is neither gpt nor llama";
  if (o.model != "llama" && (o.cp > 1 || o.experts > 0))
    return "--cp and --experts need --model llama (the GPT reads learned positions by index and has no experts)";
  if (o.cp > 1 && o.sequence % (2 * o.cp) != 0)
    return "--sequence " + std::to_string(o.sequence) + " does not cut into 2 x --cp = " + std::to_string(2 * o.cp) +
           " equal chunks (the balanced order)";
  if (o.cp_form != "ring" && o.cp_form != "all-to-all")
    return "--cp-form " + o.cp_form + " is neither ring nor all-to-all";
  if (o.experts == 0 && o.ep > 1) return "--ep " + std::to_string(o.ep) + " needs --experts";
  if (o.experts > 0 && o.experts % o.ep != 0)
    return "--ep " + std::to_string(o.ep) + " does not divide --experts " + std::to_string(o.experts);
  if (o.experts > 0 && (o.top_k == 0 || o.top_k > 2 || o.top_k > o.experts))
    return "--top-k " + std::to_string(o.top_k) + " is not 1 or 2 of the --experts " + std::to_string(o.experts);
  if (o.kv_heads > 0 && o.heads % o.kv_heads != 0)
    return "--kv-heads " + std::to_string(o.kv_heads) + " does not divide --heads " + std::to_string(o.heads);
  auto const bad = [](char const* flag, double value, char const* range) {
    return std::string(flag) + " is " + option_text(value) + ", which is not " + range;
  };
  if (!std::isfinite(o.lr) || o.lr <= 0) return bad("--lr", o.lr, "positive");
  if (!std::isfinite(o.clip) || o.clip < 0) return bad("--clip", o.clip, "0 (none) or positive");
  if (!std::isfinite(o.weight_decay) || o.weight_decay < 0) return bad("--weight-decay", o.weight_decay, "0 or more");
  if (!(o.lr_floor >= 0 && o.lr_floor <= 1)) return bad("--lr-floor", o.lr_floor, "in [0, 1]");
  if (!(o.rope_base > 1) || !std::isfinite(o.rope_base)) return bad("--rope-base", o.rope_base, "above 1");
  if (!(o.capacity >= 0) || !std::isfinite(o.capacity)) return bad("--capacity", o.capacity, "0 (dropless) or more");
  if (o.save_initial && o.save.empty()) return "--save-initial needs --save";
  return {};
}

// The run's options (from the checkpoint when resuming: they make the model), then the model's run.
int train(options o) {
  auto const ranks = static_cast<std::size_t>([] {
    int n = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    return n;
  }());
  if (std::string const why = options_error(o, ranks); !why.empty()) throw invalid_option_error(why);
  std::filesystem::path const saved = o.resume.empty() ? "" : std::filesystem::path(o.resume) / "state.h5";
  // The folders: held by this job (a live job's folder is refused), checked before any work.
  train_gpt::folder_lock resume_lock, save_lock;
  if (!o.resume.empty()) resume_lock = train_gpt::folder_lock(o.resume);
  if (!o.save.empty()) {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    std::string const why = train_gpt::from_rank_zero(rank == 0 ? train_gpt::save_folder_error(o.save) : "");
    if (!why.empty()) throw checkpoint_error(why);
    if (std::filesystem::weakly_canonical(o.save) !=
        std::filesystem::weakly_canonical(o.resume.empty() ? "" : o.resume))
      save_lock = train_gpt::folder_lock(o.save);
  }
  if (!o.resume.empty()) {
    take_run_options(
        o,
        io::checkpoint_reader(device_mesh(MPI_COMM_WORLD, mesh_shape{{"ranks", ranks}}), saved).text("configuration"));
    if (std::string const why = options_error(o, ranks); !why.empty()) throw invalid_option_error(why);
  }
  if (o.model == "gpt") return train_in<gpt_type>(o, ranks, saved);
  return train_in<llama_type>(o, ranks, saved);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  options o;
  o.launcher = ::getppid();
  CLI::App app("Trains a small GPT with data, tensor and state (ZeRO) parallelism on a generated task.");
  app.add_option("--dp", o.dp, "data-parallel replicas")->capture_default_str();
  app.add_option("--tp", o.tp, "tensor-parallel degree")->capture_default_str();
  app.add_option("--pp", o.pp, "pipeline stages")->capture_default_str();
  app.add_option("--cp", o.cp, "llama: context-parallel degree (each sequence split over this many ranks)")
      ->capture_default_str();
  app.add_option("--cp-form", o.cp_form, "llama: context-parallel attention, ring or all-to-all")
      ->capture_default_str();
  app.add_option("--experts", o.experts, "llama: a mixture of this many experts in every other block (0: none)")
      ->capture_default_str();
  app.add_option("--top-k", o.top_k, "llama: the experts each token goes to, 1 or 2")->capture_default_str();
  app.add_option("--ep", o.ep, "llama: expert-parallel degree (dividing --experts; also splits the batch)")
      ->capture_default_str();
  app.add_option("--capacity", o.capacity, "llama: the experts' capacity factor (0: dropless)")->capture_default_str();
  app.add_option("--schedule", o.schedule, "pipeline schedule: gpipe, 1f1b, interleaved or zb-h1")
      ->check(CLI::IsMember({"gpipe", "1f1b", "interleaved", "zb-h1"}))
      ->capture_default_str();
  app.add_option("--virtual", o.chunks, "model chunks per stage (interleaved)")->capture_default_str();
  app.add_option("--timeline", o.timeline, "draw the last step's pipeline timeline into this SVG file");
  app.add_option("--zero", o.zero, "ZeRO stage, 0 to 3")->capture_default_str();
  app.add_option("--micro-batch", o.micro, "samples per replica per micro-step")->capture_default_str();
  app.add_option("--accumulation,--microbatches", o.accumulation, "micro-steps per step (a pipeline's micro-batches)")
      ->capture_default_str();
  app.add_option("--global-batch", o.global, "samples per step, split as evenly as it goes (0: from the others)");
  app.add_option("--steps", o.steps, "training steps")->capture_default_str();
  app.add_option("--optimizer", o.method, "adamw or sgd")
      ->check(CLI::IsMember({"adamw", "sgd"}))
      ->capture_default_str();
  app.add_option("--lr", o.lr, "learning rate")->capture_default_str();
  app.add_option("--warmup", o.warmup, "updates of linear learning-rate warm-up")->capture_default_str();
  app.add_option("--decay-steps", o.decay_steps, "the update at which the cosine decay reaches --lr-floor (0: none)")
      ->capture_default_str();
  app.add_option("--lr-floor", o.lr_floor, "the learning rate's factor after the cosine decay")->capture_default_str();
  app.add_option("--clip", o.clip, "largest global gradient norm (0: none)")->capture_default_str();
  app.add_option("--weight-decay", o.weight_decay)->capture_default_str();
  app.add_option("--bucket-kib", o.bucket_kib, "gradient bucket size in KiB")->capture_default_str();
  app.add_option("--model", o.model, "gpt, or llama (RMS norms, rotary embeddings, grouped-query attention, SwiGLU)")
      ->capture_default_str();
  app.add_option("--vocabulary", o.vocabulary)->capture_default_str();
  app.add_option("--sequence", o.sequence)->check(CLI::Range(2, 4096))->capture_default_str();
  app.add_option("--hidden", o.hidden)->capture_default_str();
  app.add_option("--heads", o.heads)->capture_default_str();
  app.add_option("--head-size", o.head_size)->capture_default_str();
  app.add_option("--ffn", o.ffn)->capture_default_str();
  app.add_option("--layers", o.layers)->capture_default_str();
  app.add_option("--kv-heads", o.kv_heads, "llama: key/value heads, dividing --heads (0: as many)")
      ->capture_default_str();
  app.add_option("--rope-base", o.rope_base, "llama: the rotary embeddings' base")->capture_default_str();
  app.add_option("--seed", o.seed)->capture_default_str();
  app.add_flag("--sequence-parallel", o.sequence_parallel, "shard activations on the sequence between blocks");
  app.add_flag("--padded", o.padded, "sequences of random length, padded");
  app.add_option("--precision", o.precision,
                 "what the model computes in: fp32, or bf16 or fp16 (float master weights, optimizer state and "
                 "gradients; fp16 with dynamic loss scaling)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}))
      ->capture_default_str();
  app.add_option("--recompute", o.recompute,
                 "activation recomputation per block: none, selective (the attention core) or full (keep only each "
                 "block's input)")
      ->check(CLI::IsMember({"none", "selective", "full"}))
      ->capture_default_str();
  app.add_option("--gradient-type", o.gradient_type,
                 "what gradients are kept in: fp32, or the model's own bf16 or fp16 (half the bytes)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}))
      ->capture_default_str();
  app.add_option("--gradient-reduction", o.gradient_reduction,
                 "what gradients are summed in over dp: fp32, or bf16 (half the bytes, each message's sums rounded)")
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->capture_default_str();
  app.add_flag("--check", o.check, "train on 1 rank alongside and compare the loss curves");
  app.add_flag("--quiet", o.quiet, "no per-step lines");
  app.add_option("--report", o.report,
                 "write step times, the machine's pace, losses and peak memory per category (JSON) to this file");
  app.add_option("--save", o.save, "write the training state to DIR/state.h5 after the last step");
  app.add_option("--every", o.every, "and after every K steps")->needs("--save");
  app.add_flag("--save-initial", o.save_initial, "also write the state before the first step to DIR/initial.h5");
  app.add_option("--resume", o.resume, "continue from DIR/state.h5 (the run's options come from there)");
  try {
    app.parse(argc, argv);
  } catch (CLI::ParseError const& e) {  // a usage error, or --help: printed once
    std::ostringstream elsewhere;
    int const code = rank == 0 ? app.exit(e) : app.exit(e, elsewhere, elsewhere);
    MPI_Finalize();
    return code;
  }
  o.micro_given = app.count("--micro-batch") > 0;
  for_each_run_option(o, [&](char const* name, auto const&) {
    if (app.count(std::string("--") + name) > 0) o.given.push_back(name);
  });

  int status = 0;
  {
    Kokkos::ScopeGuard kokkos(argc, argv);
    try {
      status = train(o);
    } catch (shardmesh::error const& e) {  // raised alike on every rank
      if (rank == 0) std::fprintf(stderr, "train_gpt: %s\n", e.what());
      status = 1;
    }
  }
  MPI_Finalize();
  return status;
}
