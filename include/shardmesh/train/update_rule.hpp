#pragma once
// What an optimizer's update rule provides (docs/06-data-parallel.md):
//
//   lr, weight_decay   double members: the schedule scales lr at each update,
//                      and weight_decay is set to 0 for the parameters that
//                      do not decay (training_options::decays)
//   name               a constant text: the rule's name ("adamw")
//   state_tensors      a constant: the state tensors it keeps per parameter,
//                      each shaped and sharded like the parameter's state
//   state_names        a constant array of state_tensors texts naming them
//                      ("first_moment"): their names in checkpoints
//   hyperparameters()  every hyperparameter, {name, value} (recorded in
//                      checkpoints and checked on resume)
//   error()            why its hyperparameters are out of range; empty if not
//   at<T>(t)           for update t (from 1), the element step: a copyable
//                      object whose `KOKKOS_FUNCTION void operator()(T& p,
//                      T g, T* state) const` updates one element p given its
//                      gradient g (already scaled by clipping) and its
//                      state_tensors state values; it runs inside a kernel
//
// sgd and adamw (update_rules.hpp) are written this way, as a user's own is.
// `check_update_rule<R>()` fails to compile with a message naming the first
// member R lacks.

#include <cmath>
#include <concepts>
#include <cstddef>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace shardmesh::parallel {

namespace detail {

template <class R>
concept rule_hyperparameters = requires(R r) {
  { r.lr } -> std::same_as<double&>;
  { r.weight_decay } -> std::same_as<double&>;
};

template <class R>
concept rule_state_count = requires { typename std::integral_constant<std::size_t, R::state_tensors>; };

template <class R>
concept rule_names = requires(R const& r) {
  { R::name } -> std::convertible_to<std::string_view>;
  { R::state_names[0] } -> std::convertible_to<std::string_view>;
  requires std::tuple_size_v<std::remove_cvref_t<decltype(R::state_names)>> == R::state_tensors;
  { r.hyperparameters() } -> std::convertible_to<std::vector<std::pair<std::string, double>>>;
};

template <class R>
concept rule_error = requires(R const& r) {
  { r.error() } -> std::convertible_to<std::string>;
};

template <class S, class T>
concept element_step = std::copyable<S> && requires(S const& s, T& p, T g, T* state) { s(p, g, state); };

template <class R, class T>
concept rule_step_in = requires(R const& r, std::size_t t) {
  { r.template at<T>(t) } -> element_step<T>;
};

}  // namespace detail

template <class R>
concept update_rule =
    std::copyable<R> && detail::rule_hyperparameters<R> && detail::rule_state_count<R> && detail::rule_names<R> &&
    detail::rule_error<R> && detail::rule_step_in<R, float> && detail::rule_step_in<R, double>;

template <class R>
consteval void check_update_rule() {
  static_assert(std::copyable<R>, "an update rule must be copyable: the optimizer keeps and adjusts copies");
  static_assert(detail::rule_hyperparameters<R>,
                "an update rule needs `double lr` and `double weight_decay` members (scheduled and masked per "
                "parameter)");
  static_assert(detail::rule_state_count<R>,
                "an update rule needs `static constexpr std::size_t state_tensors`, its state tensors per parameter");
  static_assert(detail::rule_names<R>,
                "an update rule needs `static constexpr` `name` and `state_names` (a std::array of state_tensors "
                "texts), and `hyperparameters()` returning {name, value} pairs");
  static_assert(detail::rule_error<R>,
                "an update rule needs `std::string error() const`, empty when its "
                "hyperparameters are usable");
  static_assert(detail::rule_step_in<R, float> && detail::rule_step_in<R, double>,
                "an update rule needs `template <class T> step at(std::size_t t) const` whose result is callable as "
                "step(T& p, T g, T* state)");
}

// Checks of hyperparameters, for the rules' error().
namespace hyperparameter {

[[nodiscard]] inline bool non_negative(double x) { return std::isfinite(x) && x >= 0; }
[[nodiscard]] inline bool positive(double x) { return non_negative(x) && x > 0; }
[[nodiscard]] inline bool in_unit_interval(double x) { return non_negative(x) && x < 1; }  // [0, 1)

// "optimizer: <what> is <value>, which is not <range>".
[[nodiscard]] inline std::string error(char const* what, double value, char const* range) {
  return std::string("optimizer: ") + what + " is " + std::to_string(value) + ", which is not " + range;
}

}  // namespace hyperparameter

}  // namespace shardmesh::parallel
