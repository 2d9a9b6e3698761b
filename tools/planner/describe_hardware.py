"""Writes the hardware files of machines that are not here, from their public specifications.

    python3 tools/planner/describe_hardware.py   # writes tools/planner/hardware/*.json

Each is marked "measured": false, so shardmesh-plan-training labels what it
says of them as a prediction. From a device's specification:

  products  a roofline: the time of C[m, n] = A[m, k] B[k, n] is the largest of
            a kernel launch, its flops at the sustained rate, and its operands'
            bytes (float) at the memory bandwidth;
  kernels   a launch plus the bytes each streams at the memory bandwidth
            (the planner's streamed_elements per kind);
  links     alpha + beta x bytes per collective from the bus bandwidth of a
            ring (all-reduce moves 2 (g - 1) / g of the buffer, all-gather and
            reduce-scatter (g - 1) / g), inside a node over NVLink and between
            nodes over each device's InfiniBand adapter.
"""
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))

# NVIDIA A100-SXM4-80GB: FP32 19.5 TFLOP/s (shardmesh's float products are
# FP32 GEMMs; no TF32), HBM2e 2039 GB/s, NVLink 3 600 GB/s through NVSwitch.
# HDR InfiniBand: 200 Gb/s, one adapter per device (DGX A100).
DEVICE = {
    "name": "NVIDIA A100-SXM4-80GB",
    "flops": 0.75 * 19.5e12,        # sustained share of the peak on large products
    "bandwidth": 0.85 * 2039e9,     # sustained share of the peak
    "memory": 80 * 2**30,
    "launch": 5e-6,                 # seconds per kernel launch
}
NVLINK = {"bus_bandwidth": 230e9, "alpha": 10e-6}      # per device, nccl-tests' all-reduce bus bandwidth
INFINIBAND = {"bus_bandwidth": 20e9, "alpha": 30e-6}   # per device, 200 Gb/s less protocol
KERNELS = {  # elements of 4 bytes streamed per element, as plan/stage_work.hpp counts them
    "add": 3, "fill": 1, "gelu_forward": 2, "gelu_backward": 3, "softmax_forward": 2, "softmax_backward": 3,
    "layer_norm_forward": 2, "layer_norm_backward": 4, "cross_entropy_forward": 1, "cross_entropy_backward": 2,
    "embedding_forward": 2, "embedding_backward": 2, "adamw": 7,
}


def gemm_rates():
    powers = [2 ** i for i in range(5, 15)]
    out = []
    for m in powers:
        for n in powers:
            for k in powers:
                flops = 2.0 * m * n * k
                seconds = max(DEVICE["launch"], flops / DEVICE["flops"],
                              4.0 * (m * k + k * n + m * n) / DEVICE["bandwidth"])
                out.append({"m": m, "n": n, "k": k, "flops_per_second": flops / seconds})
    return out


def collectives(groups, link, between_nodes):
    out = []
    share = {"all_reduce": lambda g: 2 * (g - 1) / g, "all_gather": lambda g: (g - 1) / g,
             "reduce_scatter": lambda g: (g - 1) / g, "all_to_all": lambda g: (g - 1) / g}
    for g in groups:
        for kind, moved in share.items():
            out.append({"kind": kind, "group": g, "alpha_seconds": link["alpha"] * max(1, (g - 1).bit_length()),
                        "beta_seconds_per_byte": moved(g) / link["bus_bandwidth"], "between_nodes": between_nodes})
        if g == 2:
            out.append({"kind": "point_to_point", "group": 2, "alpha_seconds": link["alpha"],
                        "beta_seconds_per_byte": 1 / link["bus_bandwidth"], "between_nodes": between_nodes})
    return out


def machine(nodes, per_node):
    ranks = nodes * per_node
    links = collectives([2, 4, 8], NVLINK, False)
    if nodes > 1:
        links += collectives([2 ** i for i in range(1, ranks.bit_length())], INFINIBAND, True)
    where = f"{nodes} nodes of {per_node}" if nodes > 1 else f"one node of {per_node}"
    return {
        "machine": f"described, not measured: {where} x {DEVICE['name']} (FP32 19.5 TFLOP/s, HBM2e 2.0 TB/s, "
                   "NVLink 600 GB/s" + (", HDR InfiniBand 200 Gb/s per device" if nodes > 1 else "") + ")",
        "measured": False,
        "ranks": ranks,
        "cores": per_node,  # devices per node: one rank each
        "memory_per_rank": DEVICE["memory"],
        "ranks_per_node": per_node,
        "elementwise_bytes_per_second": DEVICE["bandwidth"],
        "data_parallel_overlap": 0.9,  # NCCL on its own stream hides most of the reduction behind the backward
        "gemm": gemm_rates(),
        "kernels": [{"kind": kind, "alpha_seconds": DEVICE["launch"],
                     "beta_seconds_per_element": 4.0 * streamed / DEVICE["bandwidth"]}
                    for kind, streamed in KERNELS.items()],
        "collectives": links,
    }


def main():
    os.makedirs(os.path.join(HERE, "hardware"), exist_ok=True)
    for name, nodes in (("a100-node-8.json", 1), ("a100-cluster-64x8.json", 64)):
        with open(os.path.join(HERE, "hardware", name), "w") as f:
            json.dump(machine(nodes, 8), f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
