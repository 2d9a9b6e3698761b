#pragma once
// Notation in: the inverse of to_string for layouts and mesh shapes.
//
//   constexpr auto l = parse_layout("S(dp,tp),C64(tp) P(sum:x)");  // l.ok(), l.value()
//   auto m = parse_mesh("dp=2,tp");                                 // tp: extent left to the communicator
//
// A malformed string gives a message that quotes it and points at the
// column (1-based), e.g. `S(dp,,tp): empty axis name at column 6`. The
// grammar is exactly what to_string prints:
//   layout := dims [" P(" op ":" axes ")"]  |  "P(" op ":" axes ")"
//   dims   := dim ("," dim)*
//   dim    := "R" | "S(" axes ")" | "C" number "(" axes ")"
//   mesh   := axis ("," axis)*,  axis := name ["=" (number | "?")]
// Checks of meaning (axes in the mesh, used once) stay with validation.hpp.
// Pure constexpr; no Kokkos or MPI.

#include "shardmesh/algebra/layout.hpp"
#include "shardmesh/algebra/mesh_shape.hpp"
#include "shardmesh/algebra/static_string.hpp"
#include "shardmesh/errors.hpp"

#include <cstddef>
#include <string>
#include <string_view>

namespace shardmesh {

// The result of a parse: the value, or the error (which quotes the text).
template <class Value>
class parsed {
 public:
  constexpr parsed(Value v, fixed_text e) : value_(v), error(e) {}

  [[nodiscard]] constexpr bool ok() const { return error.empty(); }

  // The parsed value. Text that did not parse throws notation_error with
  // the parse's message (in a constant expression: a compile error).
  [[nodiscard]] constexpr Value const& value() const {
    if (!ok()) throw notation_error(std::string(error.view()) + " (the text did not parse; check ok() first)");
    return value_;
  }

 private:
  Value value_{};

 public:
  fixed_text error;  // empty when the text parsed
};

namespace detail {

// A cursor over the text; fail() records the first error with its column.
class notation_reader {
 public:
  constexpr explicit notation_reader(std::string_view text) : text_(text) {}

  [[nodiscard]] constexpr bool done() const { return at_ == text_.size(); }
  [[nodiscard]] constexpr char peek() const { return done() ? '\0' : text_[at_]; }
  [[nodiscard]] constexpr bool failed() const { return !error_.empty(); }
  [[nodiscard]] constexpr fixed_text const& error() const { return error_; }

  constexpr bool accept_word(std::string_view w) {
    if (!text_.substr(at_).starts_with(w)) return false;
    at_ += w.size();
    return true;
  }
  constexpr bool accept(char c) {
    if (peek() != c) return false;
    ++at_;
    return true;
  }
  constexpr bool expect(char c) {
    if (accept(c)) return true;
    fixed_text what;
    what << "expected '" << std::string_view(&c, 1) << "'";
    return fail(what.view());
  }
  constexpr bool fail(std::string_view what) { return fail_at(at_, what); }
  constexpr bool fail_at(std::size_t column, std::string_view what) {
    if (error_.empty()) error_ << text_ << ": " << what << " at column " << column + 1;
    return false;
  }

  // An identifier; an empty one or a bad character is an error.
  constexpr axis_name name() {
    std::size_t const start = at_;
    while (!done() && (is_identifier(text_.substr(start, at_ - start + 1)))) ++at_;
    std::string_view const n = text_.substr(start, at_ - start);
    if (n.empty()) {
      if (done() || peek() == ',' || peek() == ')' || peek() == '=' || peek() == ':')
        fail_at(start, "empty axis name");
      else
        fail_at(start, "an axis name must start with a letter or '_'");
      return {};
    }
    if (n.size() > max_axis_name_length) fail_at(start, "axis name longer than 15 characters");
    return axis_name(n);
  }

  constexpr std::size_t number() {
    std::size_t const start = at_;
    std::size_t n = 0;
    while (peek() >= '0' && peek() <= '9') {
      n = n * 10 + static_cast<std::size_t>(peek() - '0');
      if (n > (std::size_t{1} << 48)) {
        fail_at(start, "number too large");
        return 0;
      }
      ++at_;
    }
    if (at_ == start) fail("expected a number");
    return n;
  }

  // axes := name ("," name)*, up to ')'.
  constexpr axis_list axes() {
    axis_list list;
    do {
      std::size_t const start = at_;
      axis_name const n = name();
      if (failed()) return list;
      if (list.contains(n.view())) fail_at(start, "axis named twice");
      list.push_back(n);
    } while (accept(','));
    expect(')');
    return list;
  }

  constexpr std::size_t column() const { return at_; }

 private:
  std::string_view text_;
  std::size_t at_ = 0;
  fixed_text error_;
};

constexpr bool parse_partial(notation_reader& r, layout& l) {
  for (reduce_op op : {reduce_op::sum, reduce_op::max, reduce_op::min, reduce_op::prod})
    if (r.accept_word(to_string(op))) {
      l.op = op;
      if (!r.expect(':')) return false;
      l.partial_axes = r.axes();
      return !r.failed();
    }
  return r.fail("expected sum, max, min or prod");
}

}  // namespace detail

// Postcondition: for every layout l that to_string prints,
// parse_layout(to_string(l)).value() == l.
[[nodiscard]] constexpr parsed<layout> parse_layout(std::string_view text) {
  detail::notation_reader r(text);
  layout l;
  bool const partial_only = text.starts_with("P(");
  if (text.empty()) r.fail("empty layout");
  while (!partial_only && !r.failed()) {
    if (l.rank == max_tensor_rank) {
      r.fail("more than 6 dimensions");
      break;
    }
    dim_placement p;
    if (r.accept('R')) {
    } else if (r.accept('S')) {
      r.expect('(');
      if (!r.failed()) p.axes = r.axes();
    } else if (r.accept('C')) {
      std::size_t const at = r.column();
      p.dist = distribution::cyclic;
      p.block_size = r.number();
      if (!r.failed() && p.block_size == 0) r.fail_at(at, "a cyclic block of 0 elements");
      r.expect('(');
      if (!r.failed()) p.axes = r.axes();
    } else {
      r.fail("expected R, S( or C");
    }
    if (r.failed()) break;
    l.dims[l.rank++] = p;
    if (!r.accept(',')) break;
  }
  if (!r.failed() && !r.done()) {
    if (!partial_only && !r.accept(' ')) {
      r.fail("expected ',' or ' P('");
    } else if (r.accept('P') && r.expect('(')) {
      detail::parse_partial(r, l);
    } else {
      r.fail("expected P(");
    }
  }
  if (!r.failed() && !r.done()) r.fail("unexpected text");
  return {r.failed() ? layout{} : l, r.error()};
}

// Postcondition: parse_mesh(to_string(m)).value() == m for every mesh shape m.
[[nodiscard]] constexpr parsed<mesh_shape> parse_mesh(std::string_view text) {
  detail::notation_reader r(text);
  mesh_shape m;
  do {
    if (m.ndim == max_mesh_axes) {
      r.fail("more than 6 axes");
      break;
    }
    std::size_t const start = r.column();
    axis_name const n = r.name();
    if (r.failed()) break;
    if (m.find(n.view()) != npos) {
      r.fail_at(start, "axis named twice");
      break;
    }
    std::size_t extent = dynamic_extent;
    if (r.accept('=') && !r.accept('?')) {
      std::size_t const at = r.column();
      extent = r.number();
      if (!r.failed() && extent == 0) r.fail_at(at, "an axis of extent 0");
    }
    m.axes[m.ndim++] = {n, extent};
  } while (!r.failed() && r.accept(','));
  if (!r.failed() && !r.done()) r.fail("expected ',' or '='");
  return {r.failed() ? mesh_shape{} : m, r.error()};
}

}  // namespace shardmesh
