#pragma once
// What a model's last forward saved for its backward, taken out of its
// layers and put back: a pipeline keeps one per micro-batch in flight.
// `data` names the memory it holds, which the trainer's ledger counts as
// activations (detail/saved_data.hpp says what each saved kind holds).
//
//   saved_activations take_saved() { return take_saved_of([&](auto v) { visit_saved(v); }); }
//   void restore_saved(saved_activations s) { restore_saved_into([&](auto v) { visit_saved(v); }, std::move(s)); }
//
// where visit_saved(visit) calls visit(member) on every member a layer
// saves, in the same order each time.

#include "shardmesh/nn/detail/saved_data.hpp"

#include <any>
#include <cstddef>
#include <type_traits>
#include <utility>
#include <vector>

namespace shardmesh::parallel {

struct saved_activations {
  std::vector<std::any> members;
  std::vector<void const*> data;
};

// Moves every member visit_saved visits into the result, leaving each empty.
template <class VisitSaved>
saved_activations take_saved_of(VisitSaved&& visit_saved) {
  saved_activations out;
  visit_saved([&](auto& member) {
    detail::add_saved_data(out.data, member);
    out.members.emplace_back(std::move(member));
    member = {};
  });
  return out;
}

// Moves saved's members back, in the order take_saved_of took them.
template <class VisitSaved>
void restore_saved_into(VisitSaved&& visit_saved, saved_activations saved) {
  std::size_t i = 0;
  visit_saved([&](auto& member) {
    member = std::move(*std::any_cast<std::remove_reference_t<decltype(member)>>(&saved.members[i++]));
  });
}

}  // namespace shardmesh::parallel
