#pragma once
// A model's stages as the trainer sees them: a hook called before and after
// each stage of forward and backward (to read counters per layer, to gather
// a stage's parameters just in time under ZeRO-3 and to start reducing its
// gradients as soon as backward has made them), and `staged`, which runs
// one stage's work between the two calls.
//
//   stage_tracer trace;
//   auto y = trace.staged(s, [&] { return name(s); }, forward_phase, [&] { return block.forward(x, exec); });

#include <cstddef>
#include <functional>
#include <string_view>
#include <type_traits>
#include <utility>

namespace shardmesh::parallel {

inline constexpr std::string_view forward_phase = "forward", backward_phase = "backward";

struct stage_event {
  std::size_t stage;       // the model's stage, numbered in forward order over the whole model
  std::string_view name;   // the model's name for it ("embedding", "h0", ...)
  std::string_view phase;  // forward_phase or backward_phase
  bool before;             // called before the stage's work (else after)
};

using trace_hook = std::function<void(stage_event const&)>;

class stage_tracer {
 public:
  void set(trace_hook hook) { hook_ = std::move(hook); }
  // run()'s result, with the hook called before and after it; name() is
  // called only when a hook is set.
  template <class Name, class Run>
  auto staged(std::size_t stage, Name&& name, std::string_view phase, Run&& run) const {
    if (!hook_) return run();
    auto const n = name();
    hook_({stage, n, phase, true});
    if constexpr (std::is_void_v<decltype(run())>) {
      run();
      hook_({stage, n, phase, false});
    } else {
      auto out = run();
      hook_({stage, n, phase, false});
      return out;
    }
  }

 private:
  trace_hook hook_;
};

}  // namespace shardmesh::parallel
