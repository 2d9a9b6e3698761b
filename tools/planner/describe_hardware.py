"""Writes the hardware files of machines that are not here, from their public specifications.

    python3 tools/planner/describe_hardware.py   # writes tools/planner/hardware/*.json

Each is marked "measured": false, so shardmesh-plan-training labels what it
says of them as a prediction. From a device's specification (the A100 and
the H100):

  products  a roofline per precision (fp32, bf16, fp16): the time of
            C[m, n] = A[m, k] B[k, n] is the largest of a kernel launch, its
            flops at the sustained rate of that precision, and its operands'
            bytes (4 or 2 each) at the memory bandwidth;
  peaks     the dense peak per precision, which model flops utilisation
            divides by;
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

# Devices, from their specifications. Peaks are dense tensor-core rates
# (no sparsity). shardmesh's float products are FP32 GEMMs: TF32 is stated
# but not planned (cuBLAS uses it only when asked, PyTorch's default too).
# The sustained share of a peak on large products is what published
# cuBLAS measurements of large square GEMMs reach: about 75% of FP32 on
# both, about 80% of BF16/FP16 on the A100 (250 of 312 TFLOP/s) and about
# 70% on the H100, whose products need larger tiles to fill it (700 of 989).
DEVICES = {
    "a100": {
        "name": "NVIDIA A100-SXM4-80GB",
        "peaks": {"fp32": 19.5e12, "tf32": 156e12, "bf16": 312e12, "fp16": 312e12},
        "efficiency": {"fp32": 0.75, "bf16": 0.8, "fp16": 0.8},
        "bandwidth": 0.85 * 2039e9,  # HBM2e, sustained share of the peak
        "memory": 80 * 2**30,
        "launch": 5e-6,  # seconds per kernel launch
        "nvlink": {"bus_bandwidth": 230e9, "alpha": 10e-6},  # NVLink 3 (600 GB/s), nccl-tests' all-reduce bus bandwidth
        "infiniband": {"bus_bandwidth": 20e9, "alpha": 30e-6},  # HDR 200 Gb/s per device, less protocol
        "text": "FP32 19.5, TF32 156, BF16/FP16 312 TFLOP/s, HBM2e 2.0 TB/s, NVLink 600 GB/s",
        "network": "HDR InfiniBand 200 Gb/s per device",
    },
    "h100": {
        "name": "NVIDIA H100-SXM5-80GB",
        "peaks": {"fp32": 67e12, "tf32": 494.7e12, "bf16": 989.4e12, "fp16": 989.4e12},
        "efficiency": {"fp32": 0.75, "bf16": 0.7, "fp16": 0.7},
        "bandwidth": 0.85 * 3350e9,  # HBM3
        "memory": 80 * 2**30,
        "launch": 4e-6,
        "nvlink": {"bus_bandwidth": 360e9, "alpha": 8e-6},  # NVLink 4 (900 GB/s)
        "infiniband": {"bus_bandwidth": 45e9, "alpha": 25e-6},  # NDR 400 Gb/s per device, less protocol
        "text": "FP32 67, TF32 495, BF16/FP16 989 TFLOP/s, HBM3 3.35 TB/s, NVLink 900 GB/s",
        "network": "NDR InfiniBand 400 Gb/s per device",
    },
}
PRECISIONS = {"fp32": 4, "bf16": 2, "fp16": 2}  # bytes per operand element
KERNELS = {  # elements of 4 bytes streamed per element, as plan/stage_work.hpp counts them
    "add": 3, "fill": 1, "gelu_forward": 2, "gelu_backward": 3, "softmax_forward": 2, "softmax_backward": 3,
    "layer_norm_forward": 2, "layer_norm_backward": 4, "cross_entropy_forward": 1, "cross_entropy_backward": 2,
    "embedding_forward": 2, "embedding_backward": 2, "adamw": 7,
}


def gemm_rates(device):
    powers = [2 ** i for i in range(5, 15)]
    out = []
    for precision, element in PRECISIONS.items():
        rate = device["efficiency"][precision] * device["peaks"][precision]
        for m in powers:
            for n in powers:
                for k in powers:
                    flops = 2.0 * m * n * k
                    seconds = max(device["launch"], flops / rate,
                                  element * (m * k + k * n + m * n) / device["bandwidth"])
                    out.append({"m": m, "n": n, "k": k, "flops_per_second": flops / seconds, "precision": precision})
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


def machine(device, nodes, per_node):
    ranks = nodes * per_node
    links = collectives([2, 4, 8], device["nvlink"], False)
    if nodes > 1:
        links += collectives([2 ** i for i in range(1, ranks.bit_length())], device["infiniband"], True)
    where = f"{nodes} nodes of {per_node}" if nodes > 1 else f"one node of {per_node}"
    return {
        "machine": f"described, not measured: {where} x {device['name']} ({device['text']}"
                   + (f", {device['network']}" if nodes > 1 else "") + ")",
        "measured": False,
        "ranks": ranks,
        "cores": per_node,  # devices per node: one rank each
        "memory_per_rank": device["memory"],
        "ranks_per_node": per_node,
        "elementwise_bytes_per_second": device["bandwidth"],
        "data_parallel_overlap": 0.9,  # NCCL on its own stream hides most of the reduction behind the backward
        "peaks": {p: device["peaks"][p] for p in PRECISIONS},  # model flops utilisation's base
        "gemm": gemm_rates(device),
        "kernels": [{"kind": kind, "alpha_seconds": device["launch"],
                     "beta_seconds_per_element": 4.0 * streamed / device["bandwidth"]}
                    for kind, streamed in KERNELS.items()],
        "collectives": links,
    }


def main():
    os.makedirs(os.path.join(HERE, "hardware"), exist_ok=True)
    for device in DEVICES:
        for name, nodes in ((f"{device}-node-8.json", 1), (f"{device}-cluster-64x8.json", 64)):
            with open(os.path.join(HERE, "hardware", name), "w") as f:
                json.dump(machine(DEVICES[device], nodes, 8), f, indent=1)
                f.write("\n")


if __name__ == "__main__":
    main()
