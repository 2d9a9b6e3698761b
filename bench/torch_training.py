#!/usr/bin/env python3
"""The training suite's GPTs trained by PyTorch, for comparison with bench_training.

    bench/torch_training.py --ranks 1|2 [--models bench/training_models.json] --out FILE.json

The GPT of shardmesh's models/gpt.hpp written as a PyTorch user would:
token and learned position embeddings, pre-norm blocks (layer norm, causal
self-attention by scaled_dot_product_attention, residual, layer norm, GELU
in its tanh form, residual), a final layer norm and an untied head, no
biases but the norms'; cross-entropy averaged over the targets. The
initial weights and every step's batch are bench/support/synthetic_gpt.hpp's
counter-based draws, made here in numpy; AdamW as in training_models.json
(weight decay on parameters of two or more dimensions), the gradient
clipped to its global norm.

One process on one core (--ranks 1: the whole global batch), or --ranks
processes on gloo, each bound to a core of its own, each with its share of
the global batch, under DistributedDataParallel ("dp<n>_zero0"), and
FullyShardedDataParallel sharding gradients and optimizer state
(SHARD_GRAD_OP: "dp<n>_zero2") or everything (FULL_SHARD, each block a unit:
"dp<n>_zero3"). One thread per process. Writes Google Benchmark-style JSON
that bench/report.py reads beside bench_training's: one entry per model and
run named train/<model>/<run>/pytorch, its time the median over the timed
steps of the slowest rank's step, with counters loss_<i> and
samples_per_second. Debian's PyTorch is built without libuv: the TCP
rendezvous runs with use_libuv=0.
"""
import argparse
import json
import os
import socket
import statistics
import time
import warnings

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch import nn


def mix64(z):
    """splitmix64's finaliser on uint64 arrays (strategy/counter_random.hpp)."""
    z = z + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def bits(seed, a, b):
    with np.errstate(over="ignore"):
        return mix64(mix64(mix64(np.uint64(seed)) ^ np.asarray(a, dtype=np.uint64)) ^ np.asarray(b, dtype=np.uint64))


def uniform(seed, a, b):
    return (bits(seed, a, b) >> np.uint64(11)).astype(np.float64) * 2.0**-52 - 1.0


def parameters(c):
    """(name, shape) of every parameter in gpt_parameters' order (models/gpt_description.hpp)."""
    C, H, D, F_, V, T = c["hidden"], c["heads"], c["head_size"], c["ffn"], c["vocabulary"], c["sequence"]
    out = [("wte", (V, C)), ("wpe", (T, C))]
    for layer in range(c["layers"]):
        h = f"h{layer}."
        out += [(h + "ln1_g", (C,)), (h + "ln1_b", (C,)), (h + "wq", (C, H * D)), (h + "wk", (C, H * D)),
                (h + "wv", (C, H * D)), (h + "wo", (H * D, C)), (h + "ln2_g", (C,)), (h + "ln2_b", (C,)),
                (h + "w1", (C, F_)), (h + "w2", (F_, C))]
    return out + [("lnf_g", (C,)), ("lnf_b", (C,)), ("whead", (C, V))]


def initial_values(c):
    values = {}
    for i, (name, shape) in enumerate(parameters(c)):
        n = int(np.prod(shape))
        if name.endswith("_g"):
            v = np.ones(n)
        elif name.endswith("_b"):
            v = np.zeros(n)
        else:
            v = 0.02 * uniform(1, i, np.arange(n, dtype=np.uint64))
        values[name] = torch.tensor(v.reshape(shape), dtype=torch.float32)
    return values


def batch(c, first, n):
    """Token ids and targets of samples [first, first + n) of the global sequence of samples."""
    T, V = c["sequence"], c["vocabulary"]
    s = np.arange(first, first + n, dtype=np.uint64)[:, None]
    t = np.arange(T, dtype=np.uint64)[None, :]
    ids = bits(2, s, t) % np.uint64(V)
    targets = bits(2, s, t + np.uint64(T)) % np.uint64(V)
    return torch.from_numpy(ids.astype(np.int64)), torch.from_numpy(targets.astype(np.int64))


class Block(nn.Module):
    def __init__(self, c, values, prefix):
        super().__init__()
        self.heads, self.head_size = c["heads"], c["head_size"]
        for name in ("ln1_g", "ln1_b", "wq", "wk", "wv", "wo", "ln2_g", "ln2_b", "w1", "w2"):
            setattr(self, name, nn.Parameter(values[prefix + name].clone()))

    def forward(self, x):
        B, T, C = x.shape
        h = F.layer_norm(x, (C,), self.ln1_g, self.ln1_b, 1e-5)
        split = lambda w: (h @ w).view(B, T, self.heads, self.head_size).transpose(1, 2)
        a = F.scaled_dot_product_attention(split(self.wq), split(self.wk), split(self.wv), is_causal=True)
        x = x + a.transpose(1, 2).reshape(B, T, -1) @ self.wo
        h = F.layer_norm(x, (C,), self.ln2_g, self.ln2_b, 1e-5)
        return x + F.gelu(h @ self.w1, approximate="tanh") @ self.w2


class GPT(nn.Module):
    def __init__(self, c, values):
        super().__init__()
        self.wte, self.wpe = nn.Parameter(values["wte"].clone()), nn.Parameter(values["wpe"].clone())
        self.blocks = nn.ModuleList(Block(c, values, f"h{layer}.") for layer in range(c["layers"]))
        self.lnf_g, self.lnf_b = nn.Parameter(values["lnf_g"].clone()), nn.Parameter(values["lnf_b"].clone())
        self.whead = nn.Parameter(values["whead"].clone())

    def forward(self, ids, targets):
        x = F.embedding(ids, self.wte) + self.wpe[: ids.shape[1]]
        for block in self.blocks:
            x = block(x)
        logits = F.layer_norm(x, (x.shape[-1],), self.lnf_g, self.lnf_b, 1e-5) @ self.whead
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1))


def wrapped(model, run):
    """The model as a user runs it for `run`, and the clipping its parameters need."""
    if run == "1rank":
        return model, lambda m, norm: torch.nn.utils.clip_grad_norm_(m.parameters(), norm)
    if run.endswith("zero0"):
        from torch.nn.parallel import DistributedDataParallel
        return DistributedDataParallel(model), lambda m, norm: torch.nn.utils.clip_grad_norm_(m.parameters(), norm)
    from torch.distributed.fsdp import FullyShardedDataParallel, ShardingStrategy
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy
    strategy = ShardingStrategy.FULL_SHARD if run.endswith("zero3") else ShardingStrategy.SHARD_GRAD_OP
    fsdp = FullyShardedDataParallel(model, sharding_strategy=strategy, auto_wrap_policy=ModuleWrapPolicy({Block}),
                                    use_orig_params=True, device_id=torch.device("cpu"))
    return fsdp, lambda m, norm: m.clip_grad_norm_(norm)


def slowest(seconds):
    if not dist.is_initialized():
        return seconds
    t = torch.tensor([seconds], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def mean_loss(loss):
    if not dist.is_initialized():
        return loss.item()
    t = loss.detach().to(torch.float64)
    dist.all_reduce(t)
    return t.item() / dist.get_world_size()


def train(suite, c, run, rank, ranks):
    model, clip = wrapped(GPT(c, initial_values(c)), run)
    decayed = [p for p in model.parameters() if p.dim() >= 2]
    others = [p for p in model.parameters() if p.dim() < 2]
    a = suite["adamw"]
    optimizer = torch.optim.AdamW([{"params": decayed, "weight_decay": a["weight_decay"]},
                                   {"params": others, "weight_decay": 0.0}],
                                  lr=a["lr"], betas=(a["beta1"], a["beta2"]), eps=a["eps"])
    share = suite["global_batch"] // ranks
    losses, times = [], []
    for step in range(suite["warmup_steps"] + suite["timed_steps"]):
        ids, targets = batch(c, step * suite["global_batch"] + rank * share, share)
        if dist.is_initialized():
            dist.barrier()
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss = model(ids, targets)
        loss.backward()
        clip(model, suite["clip_norm"])
        optimizer.step()
        seconds = slowest(time.perf_counter() - start)
        losses.append(mean_loss(loss))
        if step >= suite["warmup_steps"]:
            times.append(seconds)
    return losses, statistics.median(times)


def runs(ranks):
    return ["1rank"] if ranks == 1 else [f"dp{ranks}_zero{s}" for s in (0, 2, 3)]


def worker(rank, ranks, port, suite, out):
    torch.set_num_threads(1)
    os.sched_setaffinity(0, {rank % os.cpu_count()})
    warnings.filterwarnings("ignore", category=FutureWarning)
    if ranks > 1:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}?use_libuv=0", rank=rank, world_size=ranks)
    entries = []
    for c in suite["models"]:
        for run in runs(ranks):
            losses, seconds = train(suite, c, run, rank, ranks)
            name = f"train/{c['name']}/{run}/pytorch"
            entry = {"name": name, "run_name": name, "run_type": "iteration", "iterations": 1,
                     "real_time": seconds * 1e3, "time_unit": "ms",
                     "samples_per_second": suite["global_batch"] / seconds}
            entry.update({f"loss_{i}": loss for i, loss in enumerate(losses)})
            entries.append(entry)
            if rank == 0:
                print(f"  {name:<84} {seconds * 1e3:.3g} ms", flush=True)
    if rank == 0:
        context = {"mpi_ranks": str(ranks),
                   "pytorch": f"PyTorch {torch.__version__}, gloo, {torch.get_num_threads()} thread per process"}
        with open(out, "w") as f:
            json.dump({"context": context, "benchmarks": entries}, f, indent=1)
    if dist.is_initialized():
        dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, required=True)
    parser.add_argument("--models", default=os.path.join(os.path.dirname(__file__), "training_models.json"))
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    with open(args.models) as f:
        suite = json.load(f)
    os.environ["USE_LIBUV"] = "0"
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # the loopback: the ranks share this host
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(worker, args=(args.ranks, port, suite, args.out), nprocs=args.ranks)


if __name__ == "__main__":
    main()
