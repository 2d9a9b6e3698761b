#!/usr/bin/env python3
"""The transition suite's cases on PyTorch DTensor, for comparison.

    bench/dtensor_transitions.py --ranks 4 [--sizes 1MiB 16MiB ...] [--repetitions 5] --out FILE.json

Spawns --ranks processes on the gloo backend (CPU), runs every case of
bench/transition_cases.hpp whose mesh has that many devices (DTensor has no
block-cyclic placement and refuses to redistribute to Partial, so
all_to_all_v and to_partial are left out) and writes Google
Benchmark-style JSON that bench/report.py merges: one entry per repetition,
named like bench_transitions' with the implementation "dtensor", its time
the mean over the repetition's redistributions of the slowest rank.
Debian's PyTorch is built without libuv: the TCP rendezvous runs with
use_libuv=0.
"""
import argparse
import json
import logging
import os
import socket
import time
import warnings

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor

SIZES = {"64KiB": 128, "256KiB": 256, "1MiB": 512, "4MiB": 1024, "16MiB": 2048, "64MiB": 4096}
R, P, S0, S1 = Replicate(), Partial(), Shard(0), Shard(1)
# kind, mesh, from, to (shardmesh notation, as bench_transitions names them), DTensor placements per mesh axis.
CASES = [
    ("all_gather", "4", "S(x),R", "R,R", [S0], [R]),
    ("all_gather", "4", "R,S(x)", "R,R", [S1], [R]),
    ("all_to_all", "4", "S(x),R", "R,S(x)", [S0], [S1]),
    ("reduce_scatter", "4", "R,R P(sum:x)", "S(x),R", [P], [S0]),
    ("all_reduce", "4", "R,R P(sum:x)", "R,R", [P], [R]),
    ("slice", "4", "R,R", "R,S(x)", [R], [S1]),
    ("permute", "2x2", "S(a),S(b)", "S(b),S(a)", [S0, S1], [S1, S0]),
    ("all_to_all", "2x2", "S(a),S(b)", "S(a,b),R", [S0, S1], [S0, S0]),
    ("reduce_scatter+all_gather", "2x2", "R,S(b) P(sum:a)", "R,R", [P, S1], [R, R]),
    ("reduce_scatter+all_to_all", "2x2", "S(a),R P(sum:b)", "R,S(a,b)", [S0, P], [S1, S1]),
    ("all_gather", "2x2x2", "S(a,b,c),R", "R,R", [S0, S0, S0], [R, R, R]),
    ("all_to_all", "2x2x2", "S(a),S(b,c)", "S(a,b,c),R", [S0, S1, S1], [S0, S0, S0]),
    ("reduce_scatter+all_gather", "2x2x2", "S(b),S(c) P(sum:a)", "R,R", [P, S0, S1], [R, R, R]),
]
NAMES = {1: ("x",), 2: ("a", "b"), 3: ("a", "b", "c")}


def finished(t):
    """The local tensor once every collective behind it has completed."""
    local = t.to_local()
    return local.wait() if hasattr(local, "wait") else local


def slowest(seconds):
    t = torch.tensor([seconds], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def worker(rank, ranks, port, sizes, repetitions, min_time, out):
    torch.set_num_threads(1)
    # On CPU, DTensor warns at every all-to-all that gloo lacks it (it all-gathers instead).
    logging.getLogger("torch.distributed.tensor._collective_utils").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", message="DTensor random operators")
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}?use_libuv=0", rank=rank, world_size=ranks)
    entries = []
    for kind, mesh_name, source, target, before, after in CASES:
        shape = tuple(int(e) for e in mesh_name.split("x"))
        if torch.Size(shape).numel() != ranks:
            continue
        mesh = init_device_mesh("cpu", shape, mesh_dim_names=NAMES[len(shape)])
        for size in sizes:
            n = SIZES[size]
            full = torch.arange(n * n, dtype=torch.float32).reshape(n, n) % 64
            # A partial input is each rank's own contribution: its replicated or sharded piece.
            local = distribute_tensor(full, mesh, [R if p.is_partial() else p for p in before]).to_local()
            x = DTensor.from_local(local, mesh, before, run_check=False)
            finished(x.redistribute(mesh, after))  # warm up
            start = time.perf_counter()
            finished(x.redistribute(mesh, after))
            iterations = max(1, int(min_time / max(slowest(time.perf_counter() - start), 1e-6)))
            name = f"{kind}/{mesh_name}/{source}->{target}/{size}/dtensor"
            for _ in range(repetitions):
                dist.barrier()
                start = time.perf_counter()
                for _ in range(iterations):
                    finished(x.redistribute(mesh, after))
                elapsed = slowest(time.perf_counter() - start) / iterations
                entries.append({"name": name, "run_name": name, "run_type": "iteration", "iterations": iterations,
                                "real_time": elapsed * 1e3, "time_unit": "ms"})
            if rank == 0:
                times = sorted(e["real_time"] for e in entries[-repetitions:])
                print(f"  {name:<80} {times[len(times) // 2]:.3g} ms", flush=True)
    if rank == 0:
        context = {"mpi_ranks": str(ranks), "dtensor": f"PyTorch {torch.__version__}, gloo, {torch.get_num_threads()} thread"}
        with open(out, "w") as f:
            json.dump({"context": context, "benchmarks": entries}, f, indent=1)
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, required=True)
    parser.add_argument("--sizes", nargs="+", default=list(SIZES), choices=list(SIZES))
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument("--min-time", type=float, default=0.1, help="seconds per repetition, at least")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    os.environ["USE_LIBUV"] = "0"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(worker, args=(args.ranks, port, args.sizes, args.repetitions, args.min_time, args.out), nprocs=args.ranks)


if __name__ == "__main__":
    main()
