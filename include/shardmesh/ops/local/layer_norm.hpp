#pragma once
// Layer norm over the rows of a rank's local shard: x, y, dy, dx are
// [rows, n] (as_rows(shard, n)), gamma, beta and their gradients [n], mean
// and rstd [rows]. Per row: mean, population variance (two passes, for
// rows far from 0), rstd = 1 / sqrt(var + eps), xhat = (x - mean) * rstd,
// y = gamma * xhat + beta. An empty row (n == 0) has mean 0 and rstd
// 1 / sqrt(eps).
//
// RMS norm (root mean square layer normalisation, Zhang and Sennrich 2019)
// is the same without centring and without bias: rstd = 1 / sqrt(mean(x^2)
// + eps), y = gamma * x * rstd. Both share the kernels below, `centred`
// telling them apart. Everything is computed in accumulation_t of x's
// elements (float for bf16 and fp16), mean and rstd included.

#include "shardmesh/comm/reduced_precision.hpp"
#include "shardmesh/ops/local/reshape.hpp"
#include "shardmesh/ops/local/row_loops.hpp"

#include <Kokkos_Core.hpp>

#include <cstddef>
#include <string>
#include <type_traits>

namespace shardmesh::ops::local {

namespace detail {

// layer_norm_forward and rms_norm_forward below; mean (and beta) are not read or written unless centred.
template <class ExecSpace, class X, class G, class B, class Y, class M, class R>
void normalize_forward(ExecSpace const& exec, X const& x, G const& gamma, B const& beta,
                       accumulation_t<typename X::non_const_value_type> eps, Y const& y, M const& mean, R const& rstd,
                       bool centred) {
  constexpr char const* kernel = "layer_norm_forward";
  detail::require_same_extents(kernel, "x", x, "y", y);
  detail::require(gamma.extent(0) == x.extent(1) && (!centred || beta.extent(0) == x.extent(1)), kernel,
                  "gamma is " + detail::shape(gamma) + " and beta " + detail::shape(beta) + " for rows of " +
                      std::to_string(x.extent(1)));
  detail::require((!centred || mean.extent(0) == x.extent(0)) && rstd.extent(0) == x.extent(0), kernel,
                  "mean is " + detail::shape(mean) + " and rstd " + detail::shape(rstd) + " for " +
                      std::to_string(x.extent(0)) + " rows");
  using T = typename Y::non_const_value_type;
  using A = accumulation_t<typename X::non_const_value_type>;
  using policy = Kokkos::TeamPolicy<ExecSpace>;
  std::size_t const n = x.extent(1);
  A const inv_n = n == 0 ? static_cast<A>(0) : static_cast<A>(1) / static_cast<A>(n);
  Kokkos::parallel_for(
      "shardmesh::layer_norm_forward", policy(exec, detail::league_size(kernel, x.extent(0)), Kokkos::AUTO),
      KOKKOS_LAMBDA(typename policy::member_type const& team) {
        auto const r = static_cast<std::size_t>(team.league_rank());
        auto const xr = detail::row(x, r);
        auto const yr = detail::row(y, r);
        auto const g = detail::elements(gamma);
        auto const b = detail::elements(beta);
        A const mu =
            centred ? detail::row_sum(team, n, [&](std::size_t j) { return static_cast<A>(xr[j]); }) * inv_n : A(0);
        A const squares = detail::row_sum(team, n, [&](std::size_t j) {
          A const d = static_cast<A>(xr[j]) - mu;
          return d * d;
        });
        A const s = static_cast<A>(1) / Kokkos::sqrt(squares * inv_n + eps);
        detail::row_for(team, n, [&](std::size_t j) {
          A const shift = centred ? static_cast<A>(b[j]) : static_cast<A>(0);
          yr[j] = static_cast<T>(static_cast<A>(g[j]) * ((static_cast<A>(xr[j]) - mu) * s) + shift);
        });
        Kokkos::single(Kokkos::PerTeam(team), [&]() {
          if (centred) mean(r) = static_cast<typename M::non_const_value_type>(mu);
          rstd(r) = static_cast<typename R::non_const_value_type>(s);
        });
      });
}

}  // namespace detail

// Saves mean and rstd for layer_norm_backward. y may be x.
template <class ExecSpace, local_view<2, ExecSpace> X, local_view<1, ExecSpace> G, local_view<1, ExecSpace> B,
          local_view<2, ExecSpace> Y, local_view<1, ExecSpace> M, local_view<1, ExecSpace> R>
void layer_norm_forward(ExecSpace const& exec, X const& x, G const& gamma, B const& beta,
                        accumulation_t<typename X::non_const_value_type> eps, Y const& y, M const& mean,
                        R const& rstd) {
  detail::normalize_forward(exec, x, gamma, beta, eps, y, mean, rstd, true);
}

// RMS norm; saves rstd for rms_norm_backward. y may be x.
template <class ExecSpace, local_view<2, ExecSpace> X, local_view<1, ExecSpace> G, local_view<2, ExecSpace> Y,
          local_view<1, ExecSpace> R>
void rms_norm_forward(ExecSpace const& exec, X const& x, G const& gamma,
                      accumulation_t<typename X::non_const_value_type> eps, Y const& y, R const& rstd) {
  detail::normalize_forward(exec, x, gamma, gamma, eps, y, rstd, rstd, false);
}

namespace detail {

// The weights' gradients, dgamma = sum over rows of dy (x - mean) rstd and
// dbeta = sum of dy (mean and dbeta only when centred), summed without
// atomics: the same sums on every run. On the host, a thread per run of 64
// columns walks the rows in order, its sums in vector lanes. On a GPU a
// team per 32 columns: 8 threads each walk every 8th row, the 32 lanes of
// each reading neighbouring elements, and the 8 partial sums add up in team
// scratch: hidden x 8 threads share the rows, not hidden.
template <class ExecSpace, class X, class M, class R, class DY, class DG, class DB>
void weight_gradients(ExecSpace const& exec, X const& x, M const& mean, R const& rstd, DY const& dy, DG const& dgamma,
                      DB const& dbeta, bool centred) {
  using A = accumulation_t<typename X::non_const_value_type>;
  std::size_t const rows = x.extent(0);
  std::size_t const n = x.extent(1);
  if constexpr (std::is_same_v<typename ExecSpace::memory_space, Kokkos::HostSpace>) {
    constexpr std::size_t width = 64;
    Kokkos::parallel_for(
        "shardmesh::layer_norm_backward_params",
        Kokkos::RangePolicy<ExecSpace, Kokkos::IndexType<std::size_t>>(exec, 0, (n + width - 1) / width),
        KOKKOS_LAMBDA(std::size_t block) {
          std::size_t const first = block * width;
          std::size_t const count = n - first < width ? n - first : width;
          A dg[width] = {};
          A db[width] = {};
          for (std::size_t r = 0; r < rows; ++r) {
            A const mu = centred ? static_cast<A>(mean(r)) : static_cast<A>(0);
            A const s = static_cast<A>(rstd(r));
            auto const xr = row(x, r);
            auto const dyr = row(dy, r);
            SHARDMESH_HOST_SIMD("omp simd")
            for (std::size_t c = 0; c < count; ++c) {
              A const d = static_cast<A>(dyr[first + c]);
              dg[c] += d * (static_cast<A>(xr[first + c]) - mu) * s;
              db[c] += d;
            }
          }
          for (std::size_t c = 0; c < count; ++c) {
            dgamma(first + c) = static_cast<typename DG::non_const_value_type>(dg[c]);
            if (centred) dbeta(first + c) = static_cast<typename DB::non_const_value_type>(db[c]);
          }
        });
  } else {
    constexpr std::size_t tile = 32;
    constexpr int walkers = 8;
    using policy = Kokkos::TeamPolicy<ExecSpace>;
    using sums_view = Kokkos::View<A**, typename ExecSpace::scratch_memory_space, Kokkos::MemoryUnmanaged>;
    Kokkos::parallel_for(
        "shardmesh::layer_norm_backward_params",
        policy(exec, static_cast<int>((n + tile - 1) / tile), walkers, static_cast<int>(tile))
            .set_scratch_size(0, Kokkos::PerTeam(sums_view::shmem_size(walkers, 2 * tile))),
        KOKKOS_LAMBDA(typename policy::member_type const& team) {
          std::size_t const first = static_cast<std::size_t>(team.league_rank()) * tile;
          std::size_t const count = n - first < tile ? n - first : tile;
          sums_view const sums(team.team_scratch(0), walkers, 2 * tile);  // dgamma's, then dbeta's
          auto const w = static_cast<std::size_t>(team.team_rank());
          Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, count), [&](std::size_t c) {
            sums(w, c) = 0;
            sums(w, tile + c) = 0;
          });
          for (std::size_t r = w; r < rows; r += walkers) {
            A const mu = centred ? static_cast<A>(mean(r)) : static_cast<A>(0);
            A const s = static_cast<A>(rstd(r));
            auto const xr = row(x, r);
            auto const dyr = row(dy, r);
            Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, count), [&](std::size_t c) {
              A const d = static_cast<A>(dyr[first + c]);
              sums(w, c) += d * (static_cast<A>(xr[first + c]) - mu) * s;
              sums(w, tile + c) += d;
            });
          }
          team.team_barrier();
          Kokkos::parallel_for(Kokkos::TeamVectorRange(team, count), [&](std::size_t c) {
            A dg = 0, db = 0;
            for (int k = 0; k < walkers; ++k) {
              dg += sums(k, c);
              db += sums(k, tile + c);
            }
            dgamma(first + c) = static_cast<typename DG::non_const_value_type>(dg);
            if (centred) dbeta(first + c) = static_cast<typename DB::non_const_value_type>(db);
          });
        });
  }
}

// layer_norm_backward and rms_norm_backward below, dx plus the residual
// when add_residual; mean and dbeta are not read or written unless centred.
template <class ExecSpace, class X, class G, class M, class R, class DY, class DX, class DG, class DB, class RES>
void normalize_backward(ExecSpace const& exec, X const& x, G const& gamma, M const& mean, R const& rstd, DY const& dy,
                        DX const& dx, DG const& dgamma, DB const& dbeta, RES const& residual, bool add_residual,
                        bool centred) {
  constexpr char const* kernel = "layer_norm_backward";
  detail::require_same_extents(kernel, "x", x, "dy", dy);
  detail::require_same_extents(kernel, "x", x, "dx", dx);
  detail::require_same_extents(kernel, "x", x, "residual", residual);
  detail::require(
      gamma.extent(0) == x.extent(1) && dgamma.extent(0) == x.extent(1) && (!centred || dbeta.extent(0) == x.extent(1)),
      kernel,
      "gamma is " + detail::shape(gamma) + ", dgamma " + detail::shape(dgamma) + " and dbeta " + detail::shape(dbeta) +
          " for rows of " + std::to_string(x.extent(1)));
  detail::require((!centred || mean.extent(0) == x.extent(0)) && rstd.extent(0) == x.extent(0), kernel,
                  "mean is " + detail::shape(mean) + " and rstd " + detail::shape(rstd) + " for " +
                      std::to_string(x.extent(0)) + " rows");
  using A = accumulation_t<typename X::non_const_value_type>;
  using policy = Kokkos::TeamPolicy<ExecSpace>;
  std::size_t const rows = x.extent(0);
  std::size_t const n = x.extent(1);

  weight_gradients(exec, x, mean, rstd, dy, dgamma, dbeta, centred);

  A const inv_n = n == 0 ? static_cast<A>(0) : static_cast<A>(1) / static_cast<A>(n);
  Kokkos::parallel_for(
      "shardmesh::layer_norm_backward", policy(exec, detail::league_size(kernel, rows), Kokkos::AUTO),
      KOKKOS_LAMBDA(typename policy::member_type const& team) {
        auto const r = static_cast<std::size_t>(team.league_rank());
        auto const xr = detail::row(x, r);
        auto const dyr = detail::row(dy, r);
        auto const dxr = detail::row(dx, r);
        auto const g = detail::elements(gamma);
        A const mu = centred ? static_cast<A>(mean(r)) : static_cast<A>(0);
        A const s = static_cast<A>(rstd(r));
        A const g_mean =
            centred ? detail::row_sum(team, n,
                                      [&](std::size_t j) { return static_cast<A>(g[j]) * static_cast<A>(dyr[j]); }) *
                          inv_n
                    : static_cast<A>(0);
        A const gx_mean =
            detail::row_sum(team, n,
                            [&](std::size_t j) {
                              return static_cast<A>(g[j]) * static_cast<A>(dyr[j]) * (static_cast<A>(xr[j]) - mu) * s;
                            }) *
            inv_n;
        auto const rr = detail::row(residual, r);
        detail::row_for(team, n, [&](std::size_t j) {
          A const xhat = (static_cast<A>(xr[j]) - mu) * s;
          A const from_residual = add_residual ? static_cast<A>(rr[j]) : static_cast<A>(0);
          dxr[j] = static_cast<typename DX::non_const_value_type>(
              from_residual + s * (static_cast<A>(g[j]) * static_cast<A>(dyr[j]) - g_mean - xhat * gx_mean));
        });
      });
}

}  // namespace detail

// With g = gamma * dy and xhat recomputed from the saved mean and rstd:
//   dx = rstd * (g - mean_j(g) - xhat * mean_j(g * xhat))
//   dgamma[j] = sum over rows of dy * xhat, dbeta[j] = sum over rows of dy
// dgamma and dbeta cover this rank's rows only and are overwritten; a
// caller with rows on several ranks reduces them. Outputs must not alias inputs.
template <class ExecSpace, local_view<2, ExecSpace> X, local_view<1, ExecSpace> G, local_view<1, ExecSpace> M,
          local_view<1, ExecSpace> R, local_view<2, ExecSpace> DY, local_view<2, ExecSpace> DX,
          local_view<1, ExecSpace> DG, local_view<1, ExecSpace> DB>
void layer_norm_backward(ExecSpace const& exec, X const& x, G const& gamma, M const& mean, R const& rstd, DY const& dy,
                         DX const& dx, DG const& dgamma, DB const& dbeta) {
  detail::normalize_backward(exec, x, gamma, mean, rstd, dy, dx, dgamma, dbeta, dx, false, true);
}

// The same, dx plus residual: the gradient reaching x of a residual branch
// x + f(layer_norm(x)), summed in the same pass (Megatron's fused form).
// residual may be dy; outputs must not alias the other inputs.
template <class ExecSpace, local_view<2, ExecSpace> X, local_view<1, ExecSpace> G, local_view<1, ExecSpace> M,
          local_view<1, ExecSpace> R, local_view<2, ExecSpace> DY, local_view<2, ExecSpace> DX,
          local_view<1, ExecSpace> DG, local_view<1, ExecSpace> DB, local_view<2, ExecSpace> RES>
void layer_norm_backward(ExecSpace const& exec, X const& x, G const& gamma, M const& mean, R const& rstd, DY const& dy,
                         DX const& dx, DG const& dgamma, DB const& dbeta, RES const& residual) {
  detail::normalize_backward(exec, x, gamma, mean, rstd, dy, dx, dgamma, dbeta, residual, true, true);
}

// RMS norm, with xhat = x * rstd: dx = rstd * (g - xhat * mean_j(g * xhat)),
// dgamma[j] = sum over rows of dy * xhat; residual as above, or none.
template <class ExecSpace, local_view<2, ExecSpace> X, local_view<1, ExecSpace> G, local_view<1, ExecSpace> R,
          local_view<2, ExecSpace> DY, local_view<2, ExecSpace> DX, local_view<1, ExecSpace> DG,
          local_view<2, ExecSpace> RES>
void rms_norm_backward(ExecSpace const& exec, X const& x, G const& gamma, R const& rstd, DY const& dy, DX const& dx,
                       DG const& dgamma, RES const& residual, bool add_residual) {
  detail::normalize_backward(exec, x, gamma, rstd, rstd, dy, dx, dgamma, dgamma, residual, add_residual, false);
}

}  // namespace shardmesh::ops::local
