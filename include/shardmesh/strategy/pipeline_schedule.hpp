#pragma once
// A pipeline schedule as data: for p stages and m micro-batches, per stage
// the ordered list of what it does. The model is cut into p x v chunks
// ("virtual stages"); stage s holds chunks c = 0..v-1, virtual stage c*p + s,
// so activations go s -> s+1 and from the last stage back to the first with
// the next chunk (interleaving), gradients the other way.
//
//   forward(i, c)          F: chunk c of micro-batch i
//   backward(i, c)         B: its input and weight gradients together
//   backward_input(i, c)   the input gradient alone (zero-bubble's B) ...
//   backward_weight(i, c)  ... and the weight gradient later (its W)
//   send_/receive_activation(i, c), send_/receive_gradient(i, c): the
//     transfers of chunk c's input and of its input gradient; a receive
//     waits, a send does not (the executor posts receives early).
//
// Generators (each rejects what it cannot schedule, with the reason):
//   gpipe(p, m)                 all forwards, then all backwards
//   one_f_one_b(p, m)           stage s warms up with p-s-1 forwards, then alternates
//   interleaved_1f1b(p, m, v)   Megatron's interleaving of v chunks; m a multiple of p when v > 1
//   zero_bubble_h1(p, m)        1F1B's forwards, B and W split, W filling the bubbles
// Every schedule declares `held_bound`, the most micro-batch chunks whose
// activations a stage may hold (forward done, backward not complete);
// pipeline_simulation.hpp checks any schedule against all of this.
//
// Pure constexpr; no Kokkos or MPI.

#include "shardmesh/algebra/mesh_shape.hpp"
#include "shardmesh/algebra/static_string.hpp"
#include "shardmesh/errors.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace shardmesh::parallel {

enum class pipeline_op : std::uint8_t {
  forward,
  backward,
  backward_input,
  backward_weight,
  send_activation,
  receive_activation,
  send_gradient,
  receive_gradient
};

[[nodiscard]] constexpr std::string_view to_string(pipeline_op op) {
  constexpr std::string_view names[] = {"forward",         "backward",           "input gradient", "weight gradient",
                                        "send activation", "receive activation", "send gradient",  "receive gradient"};
  return names[static_cast<std::size_t>(op)];
}
// The seed's letter: F, B (whole backward), I (input gradient), W (weight gradient).
[[nodiscard]] constexpr char letter(pipeline_op op) {
  constexpr char letters[] = {'F', 'B', 'I', 'W', 's', 'r', 's', 'r'};
  return letters[static_cast<std::size_t>(op)];
}
[[nodiscard]] constexpr bool is_compute(pipeline_op op) { return op <= pipeline_op::backward_weight; }

struct pipeline_action {
  pipeline_op op;
  std::size_t micro = 0, chunk = 0;
  friend constexpr bool operator==(pipeline_action const&, pipeline_action const&) = default;
};

// Whether the action runs the layers (and so reads their parameters): F, B and I; W reuses what B saved.
[[nodiscard]] constexpr bool reads_parameters(pipeline_op op) {
  return op == pipeline_op::forward || op == pipeline_op::backward || op == pipeline_op::backward_input;
}

// The first (or last) of a chunk's model stages `held` (ascending) an
// action passes through, by its direction; npos when it holds none.
[[nodiscard]] constexpr std::size_t stage_reached(pipeline_op op, std::vector<std::size_t> const& held, bool first) {
  if (held.empty()) return npos;
  return (op == pipeline_op::forward) == first ? held.front() : held.back();
}

// actions::forward(i, c), actions::backward(i, c), ...: the action of that
// kind on micro-batch i, chunk c (0 by default). In their own namespace:
// `using namespace shardmesh::parallel::actions;` where schedules are
// written out.
template <pipeline_op Op>
struct action_of {
  constexpr pipeline_action operator()(std::size_t micro, std::size_t chunk = 0) const { return {Op, micro, chunk}; }
};
namespace actions {
inline constexpr action_of<pipeline_op::forward> forward{};
inline constexpr action_of<pipeline_op::backward> backward{};
inline constexpr action_of<pipeline_op::backward_input> backward_input{};
inline constexpr action_of<pipeline_op::backward_weight> backward_weight{};
inline constexpr action_of<pipeline_op::send_activation> send_activation{};
inline constexpr action_of<pipeline_op::receive_activation> receive_activation{};
inline constexpr action_of<pipeline_op::send_gradient> send_gradient{};
inline constexpr action_of<pipeline_op::receive_gradient> receive_gradient{};
}  // namespace actions

// "forward of micro-batch 2, chunk 0"
[[nodiscard]] constexpr fixed_text describe(pipeline_action const& a) {
  fixed_text t;
  return t.append(to_string(a.op)).append(" of micro-batch ").append(a.micro).append(", chunk ").append(a.chunk);
}

struct pipeline_schedule {
  fixed_text name;
  std::size_t stages = 1, micro_batches = 1, chunks = 1;
  std::size_t held_bound = 0;
  std::vector<std::vector<pipeline_action>> actions;  // per stage, in order

  constexpr pipeline_schedule() = default;
  constexpr pipeline_schedule(std::string_view n, std::size_t p, std::size_t m, std::size_t v, std::size_t bound)
      : name(n), stages(p), micro_batches(m), chunks(v), held_bound(bound), actions(p) {}

  [[nodiscard]] constexpr std::size_t virtual_stages() const { return stages * chunks; }
  [[nodiscard]] constexpr std::size_t virtual_stage(std::size_t stage, std::size_t chunk) const {
    return chunk * stages + stage;
  }
};

enum class schedule_kind : std::uint8_t { gpipe, one_f_one_b, interleaved, zero_bubble };

[[nodiscard]] constexpr std::string_view to_string(schedule_kind k) {
  constexpr std::string_view names[] = {"gpipe", "1f1b", "interleaved", "zb-h1"};
  return names[static_cast<std::size_t>(k)];
}

// Why `kind` cannot schedule p stages, m micro-batches and v chunks; empty when it can.
[[nodiscard]] constexpr fixed_text schedule_error(schedule_kind kind, std::size_t p, std::size_t m, std::size_t v) {
  fixed_text e;
  if (p == 0 || m == 0 || v == 0)
    return e.append("pipeline schedule: stages, micro-batches and chunks must be at least 1, not ")
        .append(p)
        .append(", ")
        .append(m)
        .append(" and ")
        .append(v);
  if (v > 1 && kind != schedule_kind::interleaved)
    return e.append("pipeline schedule: ").append(to_string(kind)).append(" has one chunk per stage, not ").append(v);
  if (kind == schedule_kind::interleaved && v > 1 && m % p != 0)
    return e.append("pipeline schedule: interleaved 1F1B runs micro-batches in rounds of p = ")
        .append(p)
        .append(" per chunk, and m = ")
        .append(m)
        .append(" is not a multiple of it");
  return e;
}

namespace detail {

constexpr void check_schedulable(schedule_kind kind, std::size_t p, std::size_t m, std::size_t v) {
  if (fixed_text const e = schedule_error(kind, p, m, v); !e.empty()) throw invalid_option_error(std::string(e.view()));
}

// The transfers around each compute action: a receive just before the
// action that needs it, a send just after the action that made it.
constexpr void add_with_transfers(pipeline_schedule& s, std::size_t stage, pipeline_action a) {
  std::size_t const vs = s.virtual_stage(stage, a.chunk), last = s.virtual_stages() - 1;
  auto& out = s.actions[stage];
  bool const input_gradient = a.op == pipeline_op::backward || a.op == pipeline_op::backward_input;
  if (a.op == pipeline_op::forward && vs > 0) out.push_back(actions::receive_activation(a.micro, a.chunk));
  if (input_gradient && vs < last) out.push_back(actions::receive_gradient(a.micro, a.chunk));
  out.push_back(a);
  if (a.op == pipeline_op::forward && vs < last) out.push_back(actions::send_activation(a.micro, a.chunk));
  if (input_gradient && vs > 0) out.push_back(actions::send_gradient(a.micro, a.chunk));
}

// 1F1B over a sequence of n forward and n backward actions per stage:
// `warmup` forwards, then one forward and one backward in turn, then the
// remaining backwards.
template <class Forward, class Backward>
constexpr void one_forward_one_backward(pipeline_schedule& s, std::size_t stage, std::size_t n, std::size_t warmup,
                                        Forward&& f, Backward&& b) {
  std::size_t forwards = 0;
  for (; forwards < warmup; ++forwards) add_with_transfers(s, stage, f(forwards));
  for (std::size_t backwards = 0; backwards < n; ++backwards) {
    if (forwards < n) add_with_transfers(s, stage, f(forwards++));
    add_with_transfers(s, stage, b(backwards));
  }
}

}  // namespace detail

[[nodiscard]] constexpr pipeline_schedule gpipe(std::size_t p, std::size_t m) {
  detail::check_schedulable(schedule_kind::gpipe, p, m, 1);
  pipeline_schedule s("gpipe", p, m, 1, m);
  for (std::size_t stage = 0; stage < p; ++stage) {
    for (std::size_t i = 0; i < m; ++i) detail::add_with_transfers(s, stage, actions::forward(i));
    for (std::size_t i = 0; i < m; ++i) detail::add_with_transfers(s, stage, actions::backward(i));
  }
  return s;
}

[[nodiscard]] constexpr pipeline_schedule one_f_one_b(std::size_t p, std::size_t m) {
  detail::check_schedulable(schedule_kind::one_f_one_b, p, m, 1);
  pipeline_schedule s("1f1b", p, m, 1, std::min(p, m));
  for (std::size_t stage = 0; stage < p; ++stage)
    detail::one_forward_one_backward(
        s, stage, m, std::min(p - stage - 1, m), [](std::size_t i) { return actions::forward(i); },
        [](std::size_t i) { return actions::backward(i); });
  return s;
}

// Megatron's order: the k-th forward of a stage is micro-batch
// (k / pv) p + k mod p of chunk (k / p) mod v, the backwards take the
// chunks in reverse; stage s warms up with 2(p-s-1) + (v-1)p forwards.
[[nodiscard]] constexpr pipeline_schedule interleaved_1f1b(std::size_t p, std::size_t m, std::size_t v) {
  detail::check_schedulable(schedule_kind::interleaved, p, m, v);
  std::size_t const n = m * v;
  auto const warmup = [&](std::size_t stage) {
    return std::min(v == 1 ? p - stage - 1 : 2 * (p - stage - 1) + (v - 1) * p, n);
  };
  pipeline_schedule s("interleaved", p, m, v, std::min(n, warmup(0) + 1));
  auto const micro = [=](std::size_t k) { return k / (p * v) * p + k % p; };
  for (std::size_t stage = 0; stage < p; ++stage)
    detail::one_forward_one_backward(
        s, stage, n, warmup(stage), [&](std::size_t k) { return actions::forward(micro(k), k / p % v); },
        [&](std::size_t k) { return actions::backward(micro(k), v - 1 - k / p % v); });
  return s;
}

// The zero-bubble schedule ZB-H1 (Qi et al., 2023), made by list
// scheduling with unit costs: a free stage runs an input gradient when its
// gradient has arrived, else a forward when its input has arrived and it
// holds fewer than p-s micro-batches between forward and input gradient
// (1F1B's bound) and fewer than 2p-s-1 between forward and weight
// gradient, else a pending weight gradient. Weight gradients so fill the
// time 1F1B spends waiting; the makespan is 2m + p - 1 + max(m, p) units.
[[nodiscard]] constexpr pipeline_schedule zero_bubble_h1(std::size_t p, std::size_t m) {
  detail::check_schedulable(schedule_kind::zero_bubble, p, m, 1);
  pipeline_schedule s("zb-h1", p, m, 1, std::min(m, 2 * p - 1));
  constexpr std::size_t never = static_cast<std::size_t>(-1);
  // input_at[stage][i], gradient_at[stage][i]: when micro-batch i's input / gradient reaches it.
  std::vector<std::vector<std::size_t>> input_at(p, std::vector<std::size_t>(m, never)), gradient_at = input_at;
  std::vector<std::size_t> free_at(p, 0), f(p, 0), b(p, 0), w(p, 0);
  for (std::size_t t = 0, finished = 0; finished < p; ++t) {
    for (std::size_t stage = 0; stage < p; ++stage) {
      if (free_at[stage] > t || w[stage] == m) continue;
      bool const gradient_ready = b[stage] < f[stage] && (stage + 1 == p || gradient_at[stage][b[stage]] <= t);
      bool const input_ready = f[stage] < m && (stage == 0 || input_at[stage][f[stage]] <= t);
      if (gradient_ready) {
        if (stage > 0) gradient_at[stage - 1][b[stage]] = t + 1;
        detail::add_with_transfers(s, stage, actions::backward_input(b[stage]++));
      } else if (input_ready && f[stage] - b[stage] < p - stage && f[stage] - w[stage] < 2 * p - stage - 1) {
        if (stage + 1 < p) input_at[stage + 1][f[stage]] = t + 1;
        detail::add_with_transfers(s, stage, actions::forward(f[stage]++));
      } else if (w[stage] < b[stage]) {
        detail::add_with_transfers(s, stage, actions::backward_weight(w[stage]++));
        if (w[stage] == m) ++finished;
      } else {
        continue;
      }
      free_at[stage] = t + 1;
    }
  }
  return s;
}

[[nodiscard]] constexpr pipeline_schedule make_schedule(schedule_kind kind, std::size_t p, std::size_t m,
                                                        std::size_t v = 1) {
  detail::check_schedulable(kind, p, m, v);
  switch (kind) {
    case schedule_kind::gpipe: return gpipe(p, m);
    case schedule_kind::one_f_one_b: return one_f_one_b(p, m);
    case schedule_kind::zero_bubble: return zero_bubble_h1(p, m);
    default: return interleaved_1f1b(p, m, v);
  }
}

}  // namespace shardmesh::parallel
