// shardmesh-calibrate: measures this machine once for the training planner
// and writes the hardware file (JSON): each rank's GEMM rate by shape with
// every rank computing, the bandwidth of an elementwise kernel, the time
// of each of the library's elementwise and row kernels by size, every
// collective's alpha + beta x bytes per group size on the ranks it runs on,
// through shardmesh's own collectives, as training calls them, and the
// library's own cost per GPT stage (on a GPT of extents 1 and 2, less its
// arithmetic as priced) and per redistribution (beyond its collective).
//
//   mpirun -n 2 --map-by core --bind-to core shardmesh-calibrate --quick --out hardware-2.json
//
// Products and kernels are measured with at most one rank per core
// computing, so they are a core's figures, and the planner shares each
// core among the ranks bound to it (hardware_model::core_of: bind the
// ranks as above, in blocks; it warns where ranks share cores unbound).
// Collectives are measured with every
// rank taking part: ranks sharing cores communicate more slowly, so
// calibrate at the rank count you plan for.
// Every figure is measured in 3 passes (quick: 2), one after the other,
// each part of a pass between two measurements of the machine's pace
// (train/machine_pace.hpp), and each figure's fastest kept over the
// passes measured with the machine left alone (pace near the fastest seen):
// on a machine shared with others, the speed it has when they leave it
// alone. The hardware file keeps that fastest pace, for measurements to be
// compared with it. --pace only prints the machine's pace now.
#include "measure.hpp"
#include "planner_files.hpp"

#include <shardmesh/comm/communicator.hpp>
#include <shardmesh/plan/hardware_model.hpp>
#include <shardmesh/plan/time_model.hpp>
#include <shardmesh/runtime_info.hpp>
#include <shardmesh/train/machine_pace.hpp>

#include <mpi.h>
#include <CLI/CLI.hpp>
#include <Kokkos_Core.hpp>

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <exception>
#include <fstream>
#include <iostream>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace {

// "host: CPU model", from the kernel.
std::string machine_name() {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line, model = "unknown CPU";
  while (std::getline(cpuinfo, line))
    if (line.starts_with("model name")) {
      model = line.substr(line.find(':') + 2);
      break;
    }
  return std::string(host) + ": " + model;
}

// A measurement and the machine's pace around it (train/machine_pace.hpp): the slower of before and after.
template <class T>
struct paced {
  T value;
  double pace = 0;
};
template <class Measure>
auto measure_paced(shardmesh::communicator const& world, Measure&& measure) {
  double const before = shardmesh::parallel::machine_pace(world);
  auto value = measure();
  return paced<decltype(value)>{std::move(value), std::max(before, shardmesh::parallel::machine_pace(world))};
}

// The passes measured on the machine left alone (their pace within
// quiet_pace of `floor`), or else the quietest one, merged into each
// figure's fastest. The pace is the same on every rank, and so the passes.
template <class T, class Merge>
T quiet_fastest(std::vector<paced<T>> passes, double floor, Merge merge) {
  std::ranges::sort(passes, {}, &paced<T>::pace);
  T best = passes.front().value;
  for (std::size_t i = 1; i < passes.size() && passes[i].pace <= shardmesh::parallel::quiet_pace * floor; ++i)
    merge(best, passes[i].value);
  return best;
}

struct kernel_figures {
  double elementwise = 0;  // bytes per second
  std::vector<planner_tool::kernel_series> kernels;
};
struct overhead_figures {
  std::vector<shardmesh::parallel::stage_overhead> stages;  // by stage_kind
  double redistribution = 0, sync = 0;
};

// Physical memory divided among the ranks that share it.
std::size_t memory_per_rank(std::size_t ranks_here) {
  long const pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<std::size_t>(pages) * static_cast<std::size_t>(page) / ranks_here : 0;
}

// Whether every rank on this node is bound to one core, the ranks that
// share one being those hardware_model::core_of puts together.
bool bound_as_planned(shardmesh::communicator const& world, shardmesh::parallel::hardware_model const& h,
                      std::size_t local_rank, std::size_t on_node) {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  int cpu = -1;  // the one CPU this rank may run on; -1: several
  if (sched_getaffinity(0, sizeof mask, &mask) == 0 && CPU_COUNT(&mask) == 1)
    for (int c = 0; c < CPU_SETSIZE && cpu < 0; ++c)
      if (CPU_ISSET(c, &mask)) cpu = c;
  std::vector<int> cpus(static_cast<std::size_t>(world.size()));
  MPI_Allgather(&cpu, 1, MPI_INT, cpus.data(), 1, MPI_INT, world.get());
  std::size_t const first = static_cast<std::size_t>(world.rank()) - local_rank;  // ranks numbered node by node
  bool planned = true;
  for (std::size_t i = 0; i < on_node; ++i)
    for (std::size_t j = 0; j < on_node; ++j)
      planned = planned && cpus[first + i] >= 0 &&
                (cpus[first + i] == cpus[first + j]) == (h.core_of(i, on_node) == h.core_of(j, on_node));
  int all = planned ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &all, 1, MPI_INT, MPI_MIN, world.get());
  return all == 1;
}

struct calibrate_options {
  bool quick = false, pace_only = false;
  std::string out = "hardware.json", earlier_file;
};

// The command line into o; an exit status when the command is done (help, or a parse error).
std::optional<int> parse_options(int argc, char** argv, bool speaks, calibrate_options& o) {
  CLI::App app{
      "Measures this machine for shardmesh-plan-training: GEMM rates, elementwise bandwidth, kernel times and each "
      "collective's alpha + beta x bytes on the ranks it runs on. Run it under mpirun at the rank count "
      "you plan for.",
      "shardmesh-calibrate"};
  app.add_flag("--quick", o.quick, "fewer shapes and sizes: under a minute");
  app.add_option("--out", o.out, "the hardware file to write")->capture_default_str()->type_name("FILE");
  app.add_option("--faster-than", o.earlier_file,
                 "a hardware file measured earlier on this machine and ranks: keep each figure's faster of the two "
                 "(calibrations spread over time meet more of a shared machine's quiet spells)")
      ->type_name("FILE");
  app.add_flag("--pace", o.pace_only,
               "only print the machine's pace: seconds of a fixed work on the slowest rank, the median of 5");
  try {
    app.parse(argc, argv);
  } catch (CLI::ParseError const& e) {
    return speaks ? app.exit(e) : (e.get_exit_code() == 0 ? 0 : 1);
  }
  return std::nullopt;
}

// The earlier calibration to keep the faster figures of, read by every rank
// before anything is measured: a bad file fails everywhere alike.
std::optional<shardmesh::parallel::hardware_model> read_earlier(std::string const& file, std::size_t ranks) {
  if (file.empty()) return std::nullopt;
  shardmesh::parallel::hardware_model earlier = planner_tool::read_hardware(file);
  if (!earlier.measured || earlier.ranks != ranks)
    throw shardmesh::invalid_option_error("--faster-than " + file + ": not measured on " + std::to_string(ranks) +
                                          " ranks");
  return earlier;
}

// What the machine is, before measuring it; `computes`: whether this rank
// is the first on its core (one rank per core computes, the others wait:
// the figures are a core's).
shardmesh::parallel::hardware_model describe_machine(shardmesh::communicator const& world, bool& computes) {
  MPI_Comm shared = MPI_COMM_NULL;
  MPI_Comm_split_type(world.get(), MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &shared);
  int ranks_here = 1;
  int local_rank = 0;
  MPI_Comm_size(shared, &ranks_here);
  MPI_Comm_rank(shared, &local_rank);
  MPI_Comm_free(&shared);
  shardmesh::parallel::hardware_model h;
  h.machine = machine_name() + ", " + to_string(shardmesh::query_runtime_info());
  h.measured = true;
  h.ranks = static_cast<std::size_t>(world.size());
  h.cores = std::max(1U, std::thread::hardware_concurrency());
  h.ranks_per_node = ranks_here < world.size() ? static_cast<std::size_t>(ranks_here) : 0;  // 0: one node
  auto const here = static_cast<std::size_t>(local_rank), on_node = static_cast<std::size_t>(ranks_here);
  computes = here == 0 || h.core_of(here, on_node) != h.core_of(here - 1, on_node);
  if (on_node > h.cores && !bound_as_planned(world, h, here, on_node) && world.rank() == 0)
    std::cerr << "shardmesh-calibrate: warning: " << on_node << " ranks share " << h.cores
              << " cores without being bound to them in blocks of consecutive ranks, as the planner assumes: "
                 "launch with tools/mpirun --bind (Open MPI: --map-by core --bind-to core)\n";
  h.memory_per_rank = memory_per_rank(on_node);
  return h;
}

// Every part of every pass, each between two paces.
struct paced_passes {
  std::vector<paced<std::vector<shardmesh::parallel::gemm_rate>>> gemm;
  std::vector<paced<kernel_figures>> kernel;
  std::vector<paced<std::vector<planner_tool::collective_series>>> collective;
  std::vector<paced<overhead_figures>> overhead;
};

template <class Say>
paced_passes measure_passes(shardmesh::communicator const& world, planner_tool::calibration_sizes const& sizes,
                            std::size_t ranks, bool computes, std::size_t passes, Say const& say) {
  paced_passes m;
  for (std::size_t pass = 0; pass < passes; ++pass) {
    std::string const of = " (pass " + std::to_string(pass + 1) + " of " + std::to_string(passes) + ")";
    say("GEMM rates of " + std::to_string(sizes.gemm_shapes.size()) + " shapes" + of);
    m.gemm.push_back(measure_paced(world, [&] { return planner_tool::measure_gemm(world, sizes, computes); }));
    say("elementwise bandwidth, and " + std::to_string(std::size(shardmesh::parallel::kernel_kinds)) +
        " of the library's kernels" + of);
    m.kernel.push_back(measure_paced(world, [&] {
      return kernel_figures{planner_tool::measure_elementwise(world, sizes, computes),
                            planner_tool::measure_kernels(world, sizes, computes)};
    }));
    say("collectives on groups of 2 to " + std::to_string(ranks) + " ranks" + of);
    m.collective.push_back(measure_paced(world, [&] { return planner_tool::measure_collectives(world, sizes); }));
    say("the library's own cost per stage and per redistribution, and a collective's wait among computing ranks" + of);
    m.overhead.push_back(measure_paced(world, [&] {
      return overhead_figures{planner_tool::measure_stage_seconds(world, sizes, computes),
                              planner_tool::measure_redistribution_overhead(world, sizes),
                              planner_tool::measure_sync_overhead(world, sizes)};
    }));
  }
  return m;
}

// Each figure into h from the passes at the machine's quietest pace (and the
// earlier calibration's, where faster).
void keep_quiet_figures(shardmesh::parallel::hardware_model& h, paced_passes const& m,
                        std::optional<shardmesh::parallel::hardware_model> const& earlier) {
  // The fastest pace seen, here or by the earlier calibration: the machine left alone.
  h.pace = earlier && earlier->pace > 0 ? earlier->pace : std::numeric_limits<double>::infinity();
  auto const saw = [&](auto const& parts) {
    for (auto const& part : parts) h.pace = std::min(h.pace, part.pace);
  };
  saw(m.gemm), saw(m.kernel), saw(m.collective), saw(m.overhead);
  h.gemm = quiet_fastest(m.gemm, h.pace, [](auto& best, auto const& pass) { planner_tool::keep_faster(best, pass); });
  auto [elementwise, kernels] = quiet_fastest(m.kernel, h.pace, [](kernel_figures& best, kernel_figures const& pass) {
    best.elementwise = std::max(best.elementwise, pass.elementwise);
    planner_tool::keep_faster(best.kernels, pass.kernels);
  });
  h.elementwise_bytes_per_second = elementwise;
  auto collectives =
      quiet_fastest(m.collective, h.pace, [](auto& best, auto const& pass) { planner_tool::keep_faster(best, pass); });
  auto const [stages, redistribution, sync] =
      quiet_fastest(m.overhead, h.pace, [](overhead_figures& best, overhead_figures const& pass) {
        for (std::size_t i = 0; i < best.stages.size(); ++i)
          best.stages[i] = planner_tool::faster(best.stages[i], pass.stages[i]);
        best.redistribution = std::min(best.redistribution, pass.redistribution);
        best.sync = std::min(best.sync, pass.sync);
      });
  h.redistribution_overhead = redistribution, h.sync_overhead = sync;
  if (earlier) planner_tool::keep_faster(*earlier, h, kernels, collectives);
  for (auto const& k : kernels)
    h.kernels.push_back({k.kind, shardmesh::parallel::fit_link_cost(k.elements, k.seconds)});
  for (auto const& c : collectives)
    h.collectives.push_back(
        {c.kind, c.group, shardmesh::parallel::fit_link_cost(c.bytes, c.seconds), false, c.deferred});
  // A stage's overhead: what the tiny GPT's stage took beyond its arithmetic as the planner prices it.
  shardmesh::mesh_shape const alone{{"dp", 1}, {"tp", 1}};
  std::size_t const layers = planner_tool::tiny_gpt.layers;
  auto const described = shardmesh::parallel::gpt_description(planner_tool::tiny_gpt).stages(alone, 1);
  for (std::size_t s : {std::size_t{0}, std::size_t{1}, layers + 1, layers + 2}) {  // one stage of each kind
    auto const kind = shardmesh::parallel::decoder_stage_kind(planner_tool::tiny_gpt.layers, s);
    auto const a = shardmesh::parallel::stage_arithmetic(h, described[s].work);
    auto const& measured = stages[static_cast<std::size_t>(kind)];
    shardmesh::parallel::stage_overhead& o = h.overheads[static_cast<std::size_t>(kind)];
    o = {std::max(0.0, measured.forward - a.forward), std::max(0.0, measured.backward - a.input - a.weight)};
    if (earlier) o = planner_tool::faster(o, earlier->overhead(kind));
  }
}

int run(int argc, char** argv, shardmesh::communicator const& world) {
  bool const speaks = world.rank() == 0;
  calibrate_options o;
  if (std::optional<int> const done = parse_options(argc, argv, speaks, o)) return *done;
  if (o.pace_only) {
    std::vector<double> paces;
    for (int i = 0; i < 5; ++i) paces.push_back(shardmesh::parallel::machine_pace(world));
    std::nth_element(paces.begin(), paces.begin() + 2, paces.end());
    if (speaks) std::cout << paces[2] << std::endl;
    return 0;
  }
  std::optional<shardmesh::parallel::hardware_model> earlier;
  try {
    earlier = read_earlier(o.earlier_file, static_cast<std::size_t>(world.size()));
  } catch (std::exception const& e) {
    if (speaks) std::cerr << "shardmesh-calibrate: " << e.what() << std::endl;
    return 1;
  }
  auto const say = [&](std::string const& what) {
    if (speaks) std::cerr << "[calibrate] " << what << std::endl;
  };
  bool computes = false;
  shardmesh::parallel::hardware_model h = describe_machine(world, computes);
  keep_quiet_figures(
      h, measure_passes(world, planner_tool::sizes_for(o.quick), h.ranks, computes, o.quick ? 2 : 3, say), earlier);
  if (speaks) {
    std::ofstream file(o.out);
    file << planner_tool::hardware_json(h);
    if (!file) {
      std::cerr << "shardmesh-calibrate: cannot write " << o.out << std::endl;
      return 1;
    }
    say("wrote " + o.out);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int status = 0;
  {
    Kokkos::ScopeGuard kokkos(argc, argv);
    shardmesh::communicator const world = shardmesh::communicator::borrow(MPI_COMM_WORLD);
    status = run(argc, argv, world);
  }
  MPI_Finalize();
  return status;
}
