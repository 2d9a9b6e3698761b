// ops::local_gemm's backends, the Kokkos kernel, the host BLAS and (for
// bf16 and fp16 operands, C in their type or in float) the reduced-precision
// one, against each other and against a plain loop in double: every
// transpose combination, batch ranks 0 to 2 with broadcast operands, odd and
// zero extents, beta 0 over NaN, beta 1 accumulating, and strides BLAS
// cannot take (the BLAS backend falls back to the Kokkos kernel).
//
// Tolerance. An element of C is a k-term dot product scaled by alpha and
// added to beta * C: in precision u = eps / 2 its rounding error is at most
// about (k + 2) u * bound, bound = |alpha| sum_l |a_l b_l| + |beta c|
// (the gamma_n bound), in any summation order (BLAS blocks and uses FMA, the
// kernel does not). The double reference obeys the same bound in double, so
// for double a backend and the reference may differ by (k + 2) eps * bound;
// for float the reference's share is negligible. The check allows
// 2 (k + 2) eps * bound, eps that of the type the sums run in (float for
// 16-bit operands), plus one rounding of the result to C's type (eps of
// bf16 or fp16 times |C|): a wrong index or a missed term is off by O(bound).
// Elements outside C (padding, a guard past the end) must keep their bits.
#include "mpi_test.hpp"

#include <shardmesh/ops/local_gemm.hpp>
#include <shardmesh/ops/product_path.hpp>

#include <catch2/catch_template_test_macros.hpp>
#include <catch2/catch_test_macros.hpp>

#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

// Inside a namespace of its own: bundled with other test files into one translation unit.
namespace local_gemm_test {

using namespace shardmesh::ops;
using shardmesh::memory_kind;

namespace {

using host_space = Kokkos::DefaultHostExecutionSpace;
using space = Kokkos::DefaultExecutionSpace;
using extent_index = std::ptrdiff_t;

// How one matrix of a problem is stored.
struct storage {
  bool transposed = false;                       // column-major (row stride 1), not row-major (col stride 1)
  bool strided = false;                          // every other element: neither stride is 1
  std::array<bool, max_batch_dims> broadcast{};  // batch dimensions of stride 0

  // A constructor, so that {transposed} leaves the rest at their defaults without warnings.
  storage(bool is_transposed = false, bool is_strided = false, std::array<bool, max_batch_dims> broadcasts = {})
      : transposed(is_transposed), strided(is_strided), broadcast(broadcasts) {}
};

// Strides of a rows x cols matrix stored as `how` in a batch of shape s.
// Rows (or columns) are padded by one element, so the leading dimension is
// not the tight one. `size` gets the elements spanned, plus a guard.
gemm_strides strides_for(gemm_shape const& s, std::size_t rows, std::size_t cols, storage const& how,
                         std::size_t& size) {
  extent_index const step = how.strided ? 2 : 1;
  auto const r = static_cast<extent_index>(rows);
  auto const c = static_cast<extent_index>(cols);
  gemm_strides st;
  st.row = how.transposed ? step : step * (c + 1);
  st.col = how.transposed ? step * (r + 1) : step;
  extent_index span = rows == 0 || cols == 0 ? 0 : (r - 1) * st.row + (c - 1) * st.col + 1;
  for (std::size_t d = s.batch_rank; d-- > 0;) {
    st.batch[d] = how.broadcast[d] ? 0 : span;
    if (!how.broadcast[d]) span *= static_cast<extent_index>(s.batch[d]);
  }
  size = static_cast<std::size_t>(span) + 1;
  return st;
}

using shardmesh::accumulation_t;
using shardmesh::bf16;
using shardmesh::fp16;

// Operands of T, C of Out.
template <class T, class Out = T>
struct problem {
  gemm_shape shape;
  accumulation_t<T> alpha = 1, beta = 0;
  gemm_strides sa, sb, sc;
  std::vector<T> a, b;
  std::vector<Out> c;  // before the product
  std::string name;
};

// The spacing of T's values at 1 (C++20 gives no numeric_limits for 16-bit floats).
template <class T>
double epsilon() {
  if constexpr (std::is_same_v<T, bf16>)
    return 0x1p-7;
  else if constexpr (std::is_same_v<T, fp16>)
    return 0x1p-10;
  else
    return std::numeric_limits<T>::epsilon();
}

std::string describe(storage const& how, std::size_t batch_rank) {
  std::string text = how.transposed ? "col-major" : "row-major";
  if (how.strided) text += ",strided";
  for (std::size_t d = 0; d < batch_rank; ++d)
    if (how.broadcast[d]) text += ",broadcast(" + std::to_string(d) + ")";
  return text;
}

template <class T, class Out = T>
problem<T, Out> make_problem(gemm_shape const& s, storage const& how_a, storage const& how_b, storage const& how_c,
                             accumulation_t<T> alpha, accumulation_t<T> beta, std::mt19937& rng) {
  problem<T, Out> p;
  p.shape = s;
  p.alpha = alpha;
  p.beta = beta;
  std::size_t size_a = 0, size_b = 0, size_c = 0;
  p.sa = strides_for(s, s.m, s.k, how_a, size_a);
  p.sb = strides_for(s, s.k, s.n, how_b, size_b);
  p.sc = strides_for(s, s.m, s.n, how_c, size_c);
  auto const draw = [&rng]<class U>(U) -> U {
    if constexpr (std::is_integral_v<U>)
      return static_cast<U>(std::uniform_int_distribution<int>(-3, 3)(rng));
    else
      return static_cast<U>(std::uniform_real_distribution<float>(-1, 1)(rng));
  };
  for (std::size_t i = 0; i < size_a; ++i) p.a.push_back(draw(T{}));
  for (std::size_t i = 0; i < size_b; ++i) p.b.push_back(draw(T{}));
  // With beta 0, C must not be read: fill it with NaN (a sentinel for integers).
  Out const unread = std::is_integral_v<Out> ? Out(12345) : static_cast<Out>(std::numeric_limits<float>::quiet_NaN());
  for (std::size_t i = 0; i < size_c; ++i) p.c.push_back(beta == 0 ? unread : draw(Out{}));
  p.name = "m=" + std::to_string(s.m) + " n=" + std::to_string(s.n) + " k=" + std::to_string(s.k) + " batch=[";
  for (std::size_t d = 0; d < s.batch_rank; ++d) p.name += (d ? "," : "") + std::to_string(s.batch[d]);
  p.name += "] A:" + describe(how_a, s.batch_rank) + " B:" + describe(how_b, s.batch_rank) +
            " C:" + describe(how_c, s.batch_rank) + " alpha=" + std::to_string(double(alpha)) +
            " beta=" + std::to_string(double(beta));
  return p;
}

// What C's storage must hold after the product: values and error bounds
// where C lies; elsewhere the elements keep their bits.
struct expectation {
  std::vector<double> value, bound;
  std::vector<bool> in_c;
};

template <class T, class Out>
expectation reference(problem<T, Out> const& p) {
  gemm_shape const& s = p.shape;
  expectation e{std::vector<double>(p.c.size()), std::vector<double>(p.c.size()), std::vector<bool>(p.c.size())};
  std::size_t count = 1;
  for (std::size_t d = 0; d < s.batch_rank; ++d) count *= s.batch[d];
  auto const alpha = static_cast<double>(p.alpha);
  auto const beta = static_cast<double>(p.beta);
  for (std::size_t flat = 0; flat < count; ++flat) {
    extent_index oa = 0, ob = 0, oc = 0;
    for (std::size_t d = s.batch_rank, rest = flat; d-- > 0;) {
      auto const i = static_cast<extent_index>(rest % s.batch[d]);
      rest /= s.batch[d];
      oa += i * p.sa.batch[d];
      ob += i * p.sb.batch[d];
      oc += i * p.sc.batch[d];
    }
    for (extent_index i = 0; i < static_cast<extent_index>(s.m); ++i) {
      for (extent_index j = 0; j < static_cast<extent_index>(s.n); ++j) {
        double sum = 0, magnitude = 0;
        for (extent_index l = 0; l < static_cast<extent_index>(s.k); ++l) {
          double const term = static_cast<double>(p.a[static_cast<std::size_t>(oa + i * p.sa.row + l * p.sa.col)]) *
                              static_cast<double>(p.b[static_cast<std::size_t>(ob + l * p.sb.row + j * p.sb.col)]);
          sum += term;
          magnitude += std::abs(term);
        }
        auto const at = static_cast<std::size_t>(oc + i * p.sc.row + j * p.sc.col);
        double const before = beta == 0 ? 0 : static_cast<double>(p.c[at]);
        e.value[at] = alpha * sum + beta * before;
        e.bound[at] = std::abs(alpha) * magnitude + std::abs(beta * before);
        e.in_c[at] = true;
      }
    }
  }
  return e;
}

// "" when `got` meets the expectation, else what the first bad element is.
template <class T, class Out>
std::string mismatch(expectation const& e, problem<T, Out> const& p, std::vector<Out> const& got) {
  double const eps = epsilon<accumulation_t<T>>();
  double const rounding = std::is_same_v<Out, accumulation_t<T>> ? 0.0 : epsilon<Out>();
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (!e.in_c[i]) {
      if (std::memcmp(&got[i], &p.c[i], sizeof(Out)) != 0) return "element " + std::to_string(i) + " outside C changed";
      continue;
    }
    double const tolerance =
        2 * static_cast<double>(p.shape.k + 2) * eps * e.bound[i] + rounding * std::abs(e.value[i]);
    auto const value = static_cast<double>(got[i]);
    if (!(std::abs(value - e.value[i]) <= tolerance))
      return "element " + std::to_string(i) + ": " + std::to_string(value) + ", expected " +
             std::to_string(e.value[i]) + " within " + std::to_string(tolerance);
  }
  return "";
}

template <class T>
using device_view = Kokkos::View<T*, space::memory_space>;
template <class T>
using host_view = Kokkos::View<T*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

template <class T>
device_view<T> on_device(std::vector<T> const& v) {
  device_view<T> d(Kokkos::view_alloc(Kokkos::WithoutInitializing, "gemm operand"), v.size());
  Kokkos::deep_copy(d, host_view<T const>(v.data(), v.size()));
  return d;
}

enum class backend { kokkos, blas, dispatch };

// C after the product by one backend: BLAS on host memory, the Kokkos kernel
// and the dispatch on the default execution space and its memory.
template <class T, class Out>
std::vector<Out> run(problem<T, Out> const& p, backend which) {
  std::vector<Out> c = p.c;
  if constexpr (gemm_backend<host_space, T, Out>::uses_host_blas) {
    if (which == backend::blas) {
      local_gemm_blas(host_space{}, p.shape, p.alpha, p.a.data(), p.sa, p.b.data(), p.sb, p.beta, c.data(), p.sc);
      return c;  // returns when done
    }
  }
  auto const a = on_device(p.a);
  auto const b = on_device(p.b);
  auto const dc = on_device(c);
  space const exec;
  if (which == backend::kokkos)
    local_gemm_kokkos(exec, p.shape, p.alpha, a.data(), p.sa, b.data(), p.sb, p.beta, dc.data(), p.sc);
  else
    local_gemm(exec, p.shape, p.alpha, a.data(), p.sa, b.data(), p.sb, p.beta, dc.data(), p.sc);
  exec.fence();
  Kokkos::deep_copy(host_view<Out>(c.data(), c.size()), dc);
  return c;
}

// Every backend against the reference, and the Kokkos kernel against BLAS.
template <class T, class Out>
void check_backends(problem<T, Out> const& p) {
  INFO(p.name);
  expectation const e = reference(p);
  std::vector<Out> const kokkos = run(p, backend::kokkos);
  CHECK(mismatch(e, p, kokkos) == "");
  CHECK(mismatch(e, p, run(p, backend::dispatch)) == "");
  if constexpr (gemm_backend<host_space, T, Out>::uses_host_blas) {
    std::vector<Out> const blas = run(p, backend::blas);
    CHECK(mismatch(e, p, blas) == "");
    expectation against_blas = e;
    for (std::size_t i = 0; i < blas.size(); ++i)
      if (e.in_c[i]) against_blas.value[i] = static_cast<double>(blas[i]);
    CHECK(mismatch(against_blas, p, kokkos) == "");
  }
}

gemm_shape shape_of(std::size_t m, std::size_t n, std::size_t k, std::vector<std::size_t> const& batch = {}) {
  gemm_shape s;
  s.batch_rank = batch.size();
  for (std::size_t d = 0; d < batch.size(); ++d) s.batch[d] = batch[d];
  s.m = m;
  s.n = n;
  s.k = k;
  return s;
}

// beta 0 (C unread, alpha 1) and beta 1 (accumulating, alpha -1.25).
template <class T, class Out = T>
void check_both_betas(gemm_shape const& s, storage const& how_a, storage const& how_b, storage const& how_c,
                      std::mt19937& rng) {
  check_backends(make_problem<T, Out>(s, how_a, how_b, how_c, 1, 0, rng));
  check_backends(make_problem<T, Out>(s, how_a, how_b, how_c, accumulation_t<T>(-1.25), 1, rng));
}

}  // namespace

// Sizes below, at and past the Kokkos kernel's tiles of 16.
TEMPLATE_TEST_CASE("local_gemm: every transpose combination on odd sizes", "[ops][gemm]", float, double) {
  std::mt19937 rng(20240601);
  std::size_t const sizes[] = {1, 3, 16, 17, 33};
  for (bool const ta : {false, true})
    for (bool const tb : {false, true})
      for (bool const tc : {false, true})
        for (std::size_t const m : sizes)
          for (std::size_t const n : sizes)
            for (std::size_t const k : sizes) check_both_betas<TestType>(shape_of(m, n, k), {ta}, {tb}, {tc}, rng);
}

TEMPLATE_TEST_CASE("local_gemm: batches of rank 1 and 2, with broadcast operands", "[ops][gemm]", float, double) {
  std::mt19937 rng(7);
  struct sizes {
    std::size_t m, n, k;
  };
  for (sizes const z : {sizes{3, 17, 33}, sizes{17, 1, 3}, sizes{1, 33, 17}}) {
    for (bool const ta : {false, true}) {
      for (bool const tb : {false, true}) {
        for (bool const tc : {false, true}) {
          gemm_shape const one = shape_of(z.m, z.n, z.k, {3});
          check_both_betas<TestType>(one, {ta}, {tb}, {tc}, rng);
          check_both_betas<TestType>(one, {ta, false, {true}}, {tb}, {tc}, rng);
          check_both_betas<TestType>(one, {ta}, {tb, false, {true}}, {tc}, rng);
          gemm_shape const two = shape_of(z.m, z.n, z.k, {2, 3});
          check_both_betas<TestType>(two, {ta}, {tb}, {tc}, rng);
          check_both_betas<TestType>(two, {ta, false, {true, false}}, {tb, false, {false, true}}, {tc}, rng);
          check_both_betas<TestType>(two, {ta, false, {true, true}}, {tb}, {tc}, rng);
        }
      }
    }
  }
}

TEMPLATE_TEST_CASE("local_gemm: zero extents", "[ops][gemm]", float, double) {
  std::mt19937 rng(11);
  // k == 0 gives beta * C (zeros for beta 0); the others write nothing.
  for (gemm_shape const& s : {shape_of(0, 3, 5), shape_of(3, 0, 5), shape_of(3, 5, 0), shape_of(3, 5, 0, {2}),
                              shape_of(3, 5, 7, {0}), shape_of(3, 5, 7, {2, 0})})
    for (bool const ta : {false, true})
      for (bool const tc : {false, true}) check_both_betas<TestType>(s, {ta}, {}, {tc}, rng);
}

TEMPLATE_TEST_CASE("local_gemm: strides BLAS cannot take run the Kokkos kernel", "[ops][gemm]", float, double) {
  std::mt19937 rng(13);
  gemm_shape const s = shape_of(3, 17, 33, {2});
  storage const strided{false, true, {}};
  storage const strided_columns{true, true, {}};
  for (auto const& [how_a, how_b, how_c] :
       {std::tuple{strided, storage{}, storage{}}, std::tuple{storage{}, strided_columns, storage{}},
        std::tuple{storage{}, storage{}, strided}, std::tuple{strided_columns, strided, strided_columns}}) {
    auto const p = make_problem<TestType>(s, how_a, how_b, how_c, 1, 1, rng);
    INFO(p.name);
    CHECK_FALSE(detail::plan_blas(p.shape, p.sa, p.sb, p.sc).has_value());
    check_both_betas<TestType>(s, how_a, how_b, how_c, rng);
  }
  auto const dense = make_problem<TestType>(s, {}, {true}, {}, 1, 0, rng);
  CHECK(detail::plan_blas(dense.shape, dense.sa, dense.sb, dense.sc).has_value());
}

TEST_CASE("local_gemm: BLAS for float and double on host memory, the Kokkos kernel otherwise", "[ops][gemm]") {
  STATIC_CHECK(gemm_backend<host_space, float>::uses_host_blas);
  STATIC_CHECK(gemm_backend<host_space, double>::uses_host_blas);
  STATIC_CHECK_FALSE(gemm_backend<host_space, int>::uses_host_blas);
  // Integers take the Kokkos kernel and come out exact.
  std::mt19937 rng(17);
  check_both_betas<int>(shape_of(17, 3, 33, {2}), {true}, {}, {}, rng);
  check_both_betas<int>(shape_of(5, 7, 3), {false, true, {}}, {}, {true}, rng);
}

// 16-bit operands: C in their type and in float, every shape kind above.
template <class T, class Out>
void check_reduced_precision() {
  std::mt19937 rng(19);
  std::size_t const sizes[] = {1, 17, 33};
  for (bool const ta : {false, true})
    for (bool const tb : {false, true})
      for (std::size_t const m : sizes)
        for (std::size_t const k : sizes) check_both_betas<T, Out>(shape_of(m, 3, k), {ta}, {tb}, {}, rng);
  for (bool const tc : {false, true}) {
    check_both_betas<T, Out>(shape_of(5, 17, 33, {2, 3}), {false, false, {true, false}}, {true, false, {false, true}},
                             {tc}, rng);
    check_both_betas<T, Out>(shape_of(17, 3, 5, {3}), {}, {false, false, {true}}, {tc}, rng);
  }
  for (gemm_shape const& s : {shape_of(0, 3, 5), shape_of(3, 5, 0), shape_of(3, 5, 0, {2}), shape_of(3, 5, 7, {0})})
    check_both_betas<T, Out>(s, {}, {}, {}, rng);
  check_both_betas<T, Out>(shape_of(3, 17, 33, {2}), {false, true, {}}, {true, true, {}}, {false, true, {}}, rng);
}

TEST_CASE("local_gemm: bf16 and fp16 operands, C in their type or in float, sums in float", "[ops][gemm]") {
  STATIC_CHECK(gemm_backend<host_space, bf16>::uses_reduced);
  STATIC_CHECK(gemm_backend<host_space, fp16, float>::uses_reduced);
  STATIC_CHECK_FALSE(gemm_backend<host_space, float>::uses_reduced);
  check_reduced_precision<bf16, bf16>();
  check_reduced_precision<bf16, float>();
  check_reduced_precision<fp16, fp16>();
  check_reduced_precision<fp16, float>();
}

TEST_CASE("local_gemm: one BLAS thread per rank unless told otherwise", "[ops][gemm]") {
  char const* const names[] = {"SHARDMESH_BLAS_THREADS", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"};
  std::vector<std::optional<std::string>> saved;
  for (char const* name : names) {
    char const* value = std::getenv(name);
    saved.push_back(value ? std::optional<std::string>(value) : std::nullopt);
    unsetenv(name);
  }
  CHECK(detail::requested_blas_threads() == 1);
  setenv("OMP_NUM_THREADS", "2", 1);
  CHECK(detail::requested_blas_threads() == std::nullopt);  // OpenBLAS reads it itself
  unsetenv("OMP_NUM_THREADS");
  setenv("OPENBLAS_NUM_THREADS", "4", 1);
  CHECK(detail::requested_blas_threads() == std::nullopt);
  setenv("SHARDMESH_BLAS_THREADS", "3", 1);
  CHECK(detail::requested_blas_threads() == 3);  // wins over the others
  for (char const* bad : {"0", "-2", "two", "3x", ""}) {
    setenv("SHARDMESH_BLAS_THREADS", bad, 1);
    CHECK_THROWS_AS(detail::requested_blas_threads(), shardmesh::error);
  }
  for (std::size_t i = 0; i < saved.size(); ++i) {
    if (saved[i])
      setenv(names[i], saved[i]->c_str(), 1);
    else
      unsetenv(names[i]);
  }
}

TEST_CASE("product paths: every memory, element and set of libraries", "[ops][gemm]") {
  constexpr memory_kind wheres[] = {memory_kind::host, memory_kind::cuda, memory_kind::hip, memory_kind::other_device};
  constexpr element_kind elements[] = {element_kind::fp64, element_kind::fp32, element_kind::bf16, element_kind::fp16,
                                       element_kind::other};
  for (unsigned libs = 0; libs < 16; ++libs) {
    product_libraries const have{.host_blas = (libs & 1U) != 0,
                                 .onednn = (libs & 2U) != 0,
                                 .cublas = (libs & 4U) != 0,
                                 .hipblas = (libs & 8U) != 0};
    for (memory_kind const where : wheres)
      for (element_kind const element : elements) {
        product_path const path = choose_product_path(where, element, have);
        INFO("libraries " << libs << ", memory " << static_cast<int>(where) << ", element " << static_cast<int>(element)
                          << ": " << to_string(path));
        bool const floating = element != element_kind::other;
        bool const sixteen = element == element_kind::bf16 || element == element_kind::fp16;
        // A library where one exists for the memory and the element, the portable kernel only where none does.
        bool const library = where == memory_kind::host ? floating && (have.host_blas || (sixteen && have.onednn))
                                                        : floating && ((where == memory_kind::cuda && have.cublas) ||
                                                                       (where == memory_kind::hip && have.hipblas));
        CHECK((path == product_path::portable) == !library);
        // Host libraries for host memory only, a vendor's for its own devices only.
        if (path == product_path::host_blas) CHECK((where == memory_kind::host && !sixteen && have.host_blas));
        if (path == product_path::host_reduced) CHECK((where == memory_kind::host && sixteen));
        if (path == product_path::cublas) CHECK(where == memory_kind::cuda);
        if (path == product_path::hipblas) CHECK(where == memory_kind::hip);
      }
  }
  // This build: host memory's products through the host libraries; other elements through the kernel.
  STATIC_CHECK(gemm_backend<host_space, float>::path == product_path::host_blas);
  STATIC_CHECK(gemm_backend<host_space, bf16, float>::path == product_path::host_reduced);
  STATIC_CHECK(gemm_backend<host_space, int>::path == product_path::portable);
#if defined(KOKKOS_ENABLE_CUDA)  // the vendor's library on device memory, never the portable kernel
  STATIC_CHECK(gemm_backend<Kokkos::Cuda, float>::path == product_path::cublas);
  STATIC_CHECK(gemm_backend<Kokkos::Cuda, double>::path == product_path::cublas);
  STATIC_CHECK(gemm_backend<Kokkos::Cuda, bf16, float>::path == product_path::cublas);
  STATIC_CHECK(gemm_backend<Kokkos::Cuda, fp16>::path == product_path::cublas);
#endif
#if defined(KOKKOS_ENABLE_HIP) && SHARDMESH_HAS_HIPBLAS  // likewise on HIP, where the build found hipBLAS
  STATIC_CHECK(gemm_backend<Kokkos::HIP, float>::path == product_path::hipblas);
  STATIC_CHECK(gemm_backend<Kokkos::HIP, double>::path == product_path::hipblas);
  STATIC_CHECK(gemm_backend<Kokkos::HIP, bf16, float>::path == product_path::hipblas);
  STATIC_CHECK(gemm_backend<Kokkos::HIP, fp16>::path == product_path::hipblas);
#endif
}

}  // namespace local_gemm_test
