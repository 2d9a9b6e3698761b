#pragma once
// The work one rank does for a model stage on one micro-batch, as the
// planner prices it: its local products with their shapes, and its
// elementwise kernels with their element counts, for the forward (F), the
// backward's input gradients (I) and its weight gradients (W).
//
// A product is declared once, for the forward; its backward is derived:
// C[m, n] = A[m, k] B[k, n] gives dA = dC B^T, a product of shape (m, k, n),
// and dB = A^T dC, of shape (k, n, m). Where B is a weight, dA is I's and dB
// is W's; where both operands are activations (attention's scores and
// weighted values), both are I's.
//
// Pure; no Kokkos or MPI.

#include <cstddef>
#include <string_view>
#include <vector>

namespace shardmesh::parallel {

// `count` local products C[m, n] = A[m, k] B[k, n] of one shape.
struct product_spec {
  std::size_t count = 1, m = 0, n = 0, k = 0;
  bool weight = true;  // B is a parameter
  [[nodiscard]] double flops() const {
    return 2.0 * static_cast<double>(count) * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  }
};

// The library's elementwise and row kernels a layer calls (ops/local),
// which the planner prices by calibration, kernel by kernel.
enum class kernel_kind {
  add,
  fill,
  gelu_forward,
  gelu_backward,
  softmax_forward,
  softmax_backward,
  layer_norm_forward,
  layer_norm_backward,
  cross_entropy_forward,
  cross_entropy_backward,
  embedding_forward,
  embedding_backward,
  adamw,
};
inline constexpr kernel_kind kernel_kinds[] = {
    kernel_kind::add,
    kernel_kind::fill,
    kernel_kind::gelu_forward,
    kernel_kind::gelu_backward,
    kernel_kind::softmax_forward,
    kernel_kind::softmax_backward,
    kernel_kind::layer_norm_forward,
    kernel_kind::layer_norm_backward,
    kernel_kind::cross_entropy_forward,
    kernel_kind::cross_entropy_backward,
    kernel_kind::embedding_forward,
    kernel_kind::embedding_backward,
    kernel_kind::adamw,
};

[[nodiscard]] constexpr std::string_view to_string(kernel_kind k) {
  constexpr std::string_view names[] = {"add",
                                        "fill",
                                        "gelu_forward",
                                        "gelu_backward",
                                        "softmax_forward",
                                        "softmax_backward",
                                        "layer_norm_forward",
                                        "layer_norm_backward",
                                        "cross_entropy_forward",
                                        "cross_entropy_backward",
                                        "embedding_forward",
                                        "embedding_backward",
                                        "adamw"};
  return names[static_cast<std::size_t>(k)];
}

// Elements of 4 bytes each kernel reads and writes per element of its
// output: what a machine described by its memory bandwidth alone charges.
[[nodiscard]] constexpr double streamed_elements(kernel_kind k) {
  constexpr double per[] = {3, 1, 2, 3, 2, 3, 2, 4, 1, 2, 2, 2, 7};
  return per[static_cast<std::size_t>(k)];
}

// `calls` calls of kernel `kind` over `elements` elements each.
struct kernel_spec {
  kernel_kind kind = kernel_kind::add;
  double elements = 0;
  std::size_t calls = 1;
};

// Which of the library's calibrated per-stage overheads a stage pays
// (hardware_model.hpp): the embedding's, a block's, the head's, the loss's.
enum class stage_kind { embedding, block, head, loss };
inline constexpr stage_kind stage_kinds[] = {stage_kind::embedding, stage_kind::block, stage_kind::head,
                                             stage_kind::loss};
[[nodiscard]] constexpr std::string_view to_string(stage_kind k) {
  constexpr std::string_view names[] = {"embedding", "block", "head", "loss"};
  return names[static_cast<std::size_t>(k)];
}

struct stage_work {
  std::vector<product_spec> products;               // F's; I's and W's derived
  std::vector<kernel_spec> forward, input, weight;  // kernels of F, I and W
  // Forward products run again at the start of I (activation recomputation:
  // their kernels are in `input` already).
  std::vector<product_spec> recomputed;
};

// The backward of `p`: its input gradient's product (to I) and its second
// operand's (to W where it is a weight, else to I).
[[nodiscard]] inline product_spec input_gradient(product_spec const& p) { return {p.count, p.m, p.k, p.n, p.weight}; }
[[nodiscard]] inline product_spec operand_gradient(product_spec const& p) { return {p.count, p.k, p.n, p.m, p.weight}; }

}  // namespace shardmesh::parallel
