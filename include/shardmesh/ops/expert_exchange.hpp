#pragma once
// Expert parallelism's token exchange. E experts are split on a mesh axis
// ("ep") in blocks: the rank at position p of the axis holds experts
// [p E/ep, (p+1) E/ep). Each rank holds N tokens, and each token chose k
// distinct experts; a (token, choice) pair is a slot, s = token k + choice.
// The exchange is planned once from the choices and then moves rows:
//
//   to_experts(x)      a row per kept slot to its expert's rank: x holds a
//                      row per token (each copied to its k slots) or per
//                      slot; what arrives is grouped by local expert, and
//                      within an expert by source rank, token and choice
//   from_experts(y)    the transpose: each expert row back to its slot
//                      ([N k, C], zero where a slot was dropped)
//
// A mixture-of-experts layer dispatches its tokens with to_experts and
// combines the experts' outputs with from_experts (weighting by the
// gates); its backward runs them the other way (from_experts for the
// dispatch's gradient, to_experts for the combine's).
//
// The counts go first: one all-gather over the axis of each rank's rows
// per expert, from which every rank derives every send and receive count
// (and the capacity's drops) alike; then each move is one uneven
// all-to-all, for the rows between ranks: a rank's rows for its own
// experts are copied straight from slot to place, never packed. Dropless by default. With a capacity factor F, each
// expert takes at most ceil(F k N ep / E) rows (N ep: the tokens on the axis), the first in the order (source rank,
// token, choice): the same rule on every rank, so a serial reference can apply it too.
//
// Choices out of range or repeated within a token are found by the rank
// that holds them and refused on every rank after the counts' all-gather,
// before any row moves; a k above E, an axis that is not the mesh's, or an
// E that the axis does not divide, before anything.

#include "shardmesh/comm/all_gather.hpp"
#include "shardmesh/comm/all_to_all.hpp"
#include "shardmesh/errors.hpp"
#include "shardmesh/ops/detail/op_support.hpp"
#include "shardmesh/runtime/device_mesh.hpp"

#include <Kokkos_Core.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace shardmesh::ops {

namespace detail {

// Row maps of copy_rows: i itself, or map(i) / divide.
struct identity_row {
  KOKKOS_FUNCTION std::size_t operator()(std::size_t i) const { return i; }
};
template <class MemorySpace>
struct mapped_row {
  Kokkos::View<std::size_t*, MemorySpace> map;
  std::size_t divide = 1;
  KOKKOS_FUNCTION std::size_t operator()(std::size_t i) const { return map(i) / divide; }
};

// to[to_row(i)] = from[from_row(i)] for the first n rows of C elements: a team per row, its elements in order.
// (A free function: nvcc takes no device lambda in a private member.)
template <class ExecSpace, class T, class FromRow, class ToRow>
void copy_rows(ExecSpace const& exec, std::size_t n, std::size_t C, T const* from, FromRow from_row, T* to,
               ToRow to_row) {
  using policy = Kokkos::TeamPolicy<ExecSpace>;
  Kokkos::parallel_for(
      "shardmesh::expert_exchange::copy_rows", policy(exec, static_cast<int>(n), Kokkos::AUTO),
      KOKKOS_LAMBDA(typename policy::member_type const& team) {
        auto const i = static_cast<std::size_t>(team.league_rank());
        T const* source = from + from_row(i) * C;
        T* target = to + to_row(i) * C;
        Kokkos::parallel_for(Kokkos::TeamVectorRange(team, C), [&](std::size_t c) { target[c] = source[c]; });
      });
}

}  // namespace detail

template <class MemorySpace = Kokkos::DefaultExecutionSpace::memory_space>
class expert_exchange {
 public:
  using exec_type = execution_space_of<MemorySpace>;
  template <class T>
  using rows_view = Kokkos::View<T**, Kokkos::LayoutRight, MemorySpace>;
  using choices_view = Kokkos::View<int const**, Kokkos::LayoutRight, Kokkos::HostSpace>;
  using mapped = detail::mapped_row<MemorySpace>;

  // choices [N, k]: each token's experts. capacity_factor 0: dropless.
  expert_exchange(device_mesh const& mesh, std::string_view axis, std::size_t experts, choices_view choices,
                  double capacity_factor = 0)
      : mesh_(mesh), tokens_(choices.extent(0)), k_(choices.extent(1)), experts_(experts) {
    std::size_t const a = mesh.shape().find(axis);
    if (a == npos) throw invalid_option_error("expert_exchange: the mesh has no axis \"" + std::string(axis) + "\"");
    std::size_t const ep = mesh.shape().extent(a);
    if (experts == 0 || experts % ep != 0)
      throw invalid_option_error("expert_exchange: " + std::to_string(experts) + " experts do not split over " +
                                 std::string(axis) + " = " + std::to_string(ep) + " ranks");
    if (k_ == 0 || k_ > experts)
      throw invalid_option_error("expert_exchange: top-" + std::to_string(k_) + " of " + std::to_string(experts) +
                                 " experts; k must be 1 to the expert count");
    if (!(capacity_factor >= 0))
      throw invalid_option_error("expert_exchange: capacity factor " + std::to_string(capacity_factor) +
                                 " (0 for dropless, else above 0)");
    group_ = &mesh.group(axis_set::of(a));
    local_experts_ = experts / ep;
    plan(choices, capacity_factor);
  }

  // Rows this rank's experts receive, and how many each (in expert order).
  [[nodiscard]] std::size_t rows() const { return rows_; }
  [[nodiscard]] std::vector<std::size_t> const& expert_rows() const { return expert_rows_; }
  // Slots dropped by the capacity on this rank's tokens.
  [[nodiscard]] std::size_t dropped() const { return tokens_ * k_ - sent_; }

  template <class T>
  [[nodiscard]] rows_view<T> to_experts(rows_view<T> const& x, exec_type const& exec = {}) const {
    if (x.extent(0) != tokens_ && x.extent(0) != tokens_ * k_)
      throw mismatched_tensor_error("expert_exchange::to_experts: " + std::to_string(x.extent(0)) +
                                    " rows; a row per token (" + std::to_string(tokens_) + ") or per slot (" +
                                    std::to_string(tokens_ * k_) + ")");
    std::size_t const C = x.extent(1), per = x.extent(0) == tokens_ ? k_ : 1;
    auto const out_flat = buffer<T>((sent_ - own_) * C), in_flat = buffer<T>((rows_ - own_) * C);
    detail::copy_rows(exec, sent_ - own_, C, x.data(), mapped{send_slots_, per}, out_flat.data(),
                      detail::identity_row{});
    all_to_all_v(*group_, out_flat, scaled(send_counts_, C), in_flat, scaled(recv_counts_, C), exec);
    auto const y = detail::pooled<rows_view<T>>(mesh_, {rows_, C});
    detail::copy_rows(exec, rows_ - own_, C, in_flat.data(), detail::identity_row{}, y.data(), mapped{recv_places_, 1});
    detail::copy_rows(exec, own_, C, x.data(), mapped{own_slots_, per}, y.data(), mapped{own_places_, 1});
    return y;
  }

  template <class T>
  [[nodiscard]] rows_view<T> from_experts(rows_view<T> const& y, exec_type const& exec = {}) const {
    if (y.extent(0) != rows_)
      throw mismatched_tensor_error("expert_exchange::from_experts: " + std::to_string(y.extent(0)) +
                                    " rows; the experts received " + std::to_string(rows_));
    std::size_t const C = y.extent(1);
    auto const out_flat = buffer<T>((rows_ - own_) * C), in_flat = buffer<T>((sent_ - own_) * C);
    detail::copy_rows(exec, rows_ - own_, C, y.data(), mapped{recv_places_, 1}, out_flat.data(),
                      detail::identity_row{});
    all_to_all_v(*group_, out_flat, scaled(recv_counts_, C), in_flat, scaled(send_counts_, C), exec);
    auto const x = detail::pooled<rows_view<T>>(mesh_, {tokens_ * k_, C});
    if (sent_ != tokens_ * k_) Kokkos::deep_copy(exec, x, T(0));  // zero where dropped
    detail::copy_rows(exec, sent_ - own_, C, in_flat.data(), detail::identity_row{}, x.data(), mapped{send_slots_, 1});
    detail::copy_rows(exec, own_, C, y.data(), mapped{own_places_, 1}, x.data(), mapped{own_slots_, 1});
    return x;
  }

 private:
  // Buffers and results from the mesh's pool (ops/detail/result_pool.hpp): a
  // layer exchanges the same sizes every step, and fresh memory would cost
  // its page faults every time.
  template <class T>
  Kokkos::View<T*, MemorySpace> buffer(std::size_t n) const {
    return detail::pooled<Kokkos::View<T*, MemorySpace>>(mesh_, {n});
  }
  static std::vector<std::size_t> scaled(std::vector<std::size_t> counts, std::size_t by) {
    for (std::size_t& c : counts) c *= by;
    return counts;
  }

  // counts[r][e]: rows rank r sends expert e, from every rank's own; then
  // what each keeps, sends and receives, and where each row goes.
  void plan(choices_view const& choices, double factor) {
    std::size_t const ep = static_cast<std::size_t>(group_->size()), me = static_cast<std::size_t>(group_->rank());
    std::size_t const E = experts_;
    // Each rank's rows per expert, then how many of its choices are out of range or repeated.
    Kokkos::View<std::int64_t*, Kokkos::HostSpace> mine("counts", E + 1), all("all counts", (E + 1) * ep);
    for (std::size_t n = 0; n < tokens_; ++n)
      for (std::size_t j = 0; j < k_; ++j) {
        int const e = choices(n, j);
        bool repeated = false;
        for (std::size_t i = 0; i < j; ++i) repeated = repeated || choices(n, i) == e;
        if (e < 0 || static_cast<std::size_t>(e) >= E || repeated)
          ++mine(E);
        else
          ++mine(static_cast<std::size_t>(e));
      }
    all_gather(*group_, mine, all, Kokkos::DefaultHostExecutionSpace{});
    auto const count = [&](std::size_t r, std::size_t e) { return static_cast<std::size_t>(all(r * (E + 1) + e)); };
    for (std::size_t r = 0; r < ep; ++r)
      if (count(r, E) != 0)
        throw invalid_option_error("expert_exchange: rank " + std::to_string(r) + " of the expert axis has " +
                                   std::to_string(count(r, E)) + " choices out of [0, " + std::to_string(E) +
                                   ") or repeated within a token");
    std::size_t total = 0;
    for (std::size_t r = 0; r < ep; ++r)
      for (std::size_t e = 0; e < E; ++e) total += count(r, e);
    std::size_t const capacity =
        factor > 0 ? static_cast<std::size_t>(std::ceil(factor * static_cast<double>(total) / static_cast<double>(E)))
                   : total;
    // kept(r, e): the rows of rank r that expert e takes, the first `capacity` in rank order.
    std::vector<std::size_t> kept(ep * E);
    for (std::size_t e = 0; e < E; ++e)
      for (std::size_t r = 0, before = 0; r < ep; ++r) {
        std::size_t const room = capacity > before ? capacity - before : 0;
        kept[r * E + e] = count(r, e) < room ? count(r, e) : room;
        before += count(r, e);
      }
    std::size_t const L = local_experts_;
    send_counts_.assign(ep, 0);
    recv_counts_.assign(ep, 0);
    expert_rows_.assign(L, 0);
    for (std::size_t d = 0; d < ep; ++d)
      for (std::size_t e = d * L; e < (d + 1) * L; ++e) send_counts_[d] += kept[me * E + e];
    for (std::size_t r = 0; r < ep; ++r)
      for (std::size_t l = 0; l < L; ++l) {
        recv_counts_[r] += kept[r * E + me * L + l];
        expert_rows_[l] += kept[r * E + me * L + l];
      }
    sent_ = 0;
    rows_ = 0;
    for (std::size_t d = 0; d < ep; ++d) sent_ += send_counts_[d];
    for (std::size_t l = 0; l < L; ++l) rows_ += expert_rows_[l];
    // Send order: by expert (so by destination), then token, then choice; a slot past its expert's kept rows stays.
    Kokkos::View<std::size_t*, Kokkos::HostSpace> slots("slots", sent_), places("places", rows_);
    std::vector<std::size_t> next(E, 0), taken(E, 0);
    for (std::size_t e = 1; e < E; ++e) next[e] = next[e - 1] + kept[me * E + e - 1];
    for (std::size_t n = 0; n < tokens_; ++n)
      for (std::size_t j = 0; j < k_; ++j) {
        auto const e = static_cast<std::size_t>(choices(n, j));
        if (taken[e]++ < kept[me * E + e]) slots(next[e]++) = n * k_ + j;
      }
    // Arrival order: by source rank, then expert; grouped order: by expert, then source rank.
    std::vector<std::size_t> start(L, 0);
    for (std::size_t l = 1; l < L; ++l) start[l] = start[l - 1] + expert_rows_[l - 1];
    for (std::size_t r = 0, i = 0; r < ep; ++r)
      for (std::size_t l = 0; l < L; ++l)
        for (std::size_t c = 0; c < kept[r * E + me * L + l]; ++c) places(i++) = start[l]++;
    // The rows this rank's experts take from its own tokens go straight from slot to place: out of the
    // all-to-all (a count of 0 to itself) and out of the packed orders.
    own_ = send_counts_[me];
    std::size_t sent_before = 0, received_before = 0;
    for (std::size_t d = 0; d < me; ++d) sent_before += send_counts_[d], received_before += recv_counts_[d];
    send_counts_[me] = recv_counts_[me] = 0;
    auto const split = [&](Kokkos::View<std::size_t*, Kokkos::HostSpace> order, std::size_t before, auto& others,
                           auto& own) {
      Kokkos::View<std::size_t*, Kokkos::HostSpace> rest("others", order.extent(0) - own_), own_rows("own", own_);
      for (std::size_t i = 0, j = 0; i < order.extent(0); ++i)
        if (i >= before && i < before + own_)
          own_rows(i - before) = order(i);
        else
          rest(j++) = order(i);
      others = Kokkos::create_mirror_view_and_copy(MemorySpace{}, rest);
      own = Kokkos::create_mirror_view_and_copy(MemorySpace{}, own_rows);
    };
    split(slots, sent_before, send_slots_, own_slots_);
    split(places, received_before, recv_places_, own_places_);
  }

  device_mesh mesh_;
  communicator const* group_ = nullptr;
  std::size_t tokens_ = 0, k_ = 0, experts_ = 0, local_experts_ = 0, sent_ = 0, rows_ = 0;
  std::size_t own_ = 0;                                               // rows from this rank's tokens to its own experts
  std::vector<std::size_t> send_counts_, recv_counts_, expert_rows_;  // to and from the other ranks
  // Slots sent and places of arrivals in the exchange's order (from and to the other ranks), and the own rows'.
  Kokkos::View<std::size_t*, MemorySpace> send_slots_, recv_places_, own_slots_, own_places_;
};

}  // namespace shardmesh::ops
