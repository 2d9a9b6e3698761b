#!/usr/bin/env python3
"""Turns the benchmarks' JSON into markdown tables and figures.

    bench/report.py RESULTS.json... [--markdown FILE] [--figures DIR] [--readme FILE]...

RESULTS are Google Benchmark JSON files of bench_transitions (one per rank
count), optionally of bench/dtensor_transitions.py, of
bench_transformer_block, of bench_data_parallel and of bench_pipeline. Transition names are
kind/mesh/from->to/size/implementation; the transformer block's are
block/run/shape/variant/implementation and gemm/run/spec/geometry/implementation;
data parallelism's reduce_scatter/size/implementation and dp_step/model/stage;
pipelines' p2p/size/implementation and pipeline/schedule/m<micro-batches>;
checkpoints' save/size/implementation and load/size/implementation;
products' product/mesh/n/implementation; pencil transposes'
pencil/ranks/n/contiguous|strided/implementation; training's
train/model/run/implementation (bench_training and bench/torch_training.py).
Times are medians over repetitions (rounds); ratios are medians of the ratios
of runs taken side by side. Each --readme FILE has the part between each pair
of results markers it holds replaced by the section of those results:
transition results, transformer block results, gemm results, data parallel results,
pipeline results, checkpoint results, product results, pencil results, training results.
"""
import argparse
import json
import math
import statistics
import sys
from collections import Counter, defaultdict

BEGIN = "<!-- transition results begin -->"
END = "<!-- transition results end -->"
BLOCK_MARKERS = ("<!-- transformer block results begin -->", "<!-- transformer block results end -->")
GEMM_MARKERS = ("<!-- gemm results begin -->", "<!-- gemm results end -->")
BLOCK_KINDS = ("block", "gemm")
DP_MARKERS = ("<!-- data parallel results begin -->", "<!-- data parallel results end -->")
DP_KINDS = ("reduce_scatter", "dp_step")
PIPELINE_MARKERS = ("<!-- pipeline results begin -->", "<!-- pipeline results end -->")
PIPELINE_KINDS = ("p2p", "pipeline")
CHECKPOINT_MARKERS = ("<!-- checkpoint results begin -->", "<!-- checkpoint results end -->")
CHECKPOINT_KINDS = ("save", "load")
PRODUCT_MARKERS = ("<!-- product results begin -->", "<!-- product results end -->")
PENCIL_MARKERS = ("<!-- pencil results begin -->", "<!-- pencil results end -->")
PRODUCT_KINDS = ("product", "pencil")
TRAINING_MARKERS = ("<!-- training results begin -->", "<!-- training results end -->")
TRAINING_KINDS = ("train",)
LOCAL_PRODUCT_MARKERS = ("<!-- local product results begin -->", "<!-- local product results end -->")
LOCAL_PRODUCT_KINDS = ("local_product",)
CONTEXT_MARKERS = ("<!-- context parallelism results begin -->", "<!-- context parallelism results end -->")
CONTEXT_KINDS = ("ring", "heads_transition")
EXPERT_MARKERS = ("<!-- expert parallelism results begin -->", "<!-- expert parallelism results end -->")
CONTEXT_MEMORY_MARKERS = ("<!-- context memory results begin -->", "<!-- context memory results end -->")
EXPERT_KINDS = ("dispatch", "dispatch_plan")
SIZES = {"75x5KiB": 75 * 5 << 10, "64KiB": 64 << 10, "256KiB": 256 << 10, "1MiB": 1 << 20, "4MiB": 4 << 20, "16MiB": 16 << 20, "64MiB": 64 << 20,
         "256MiB": 256 << 20, "1024MiB": 1024 << 20}
TO_MS = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}


def load(paths):
    """{(kind, mesh, transition, size): {impl: {"ms": median, "counters": {...}}}} and the contexts."""
    times = defaultdict(lambda: defaultdict(list))
    counters = defaultdict(dict)
    contexts = []
    for path in paths:
        with open(path) as f:
            data = json.load(f)
        if all(b["run_name"].split("/")[0] in BLOCK_KINDS + DP_KINDS + PIPELINE_KINDS + CHECKPOINT_KINDS + PRODUCT_KINDS + TRAINING_KINDS + LOCAL_PRODUCT_KINDS
               + CONTEXT_KINDS + EXPERT_KINDS for b in data["benchmarks"]):
            continue  # the transformer block's (load_block) or data parallelism's (load_data_parallel)
        contexts.append(data.get("context", {}))
        for b in data["benchmarks"]:
            if b.get("run_type") != "iteration" or b.get("error_occurred"):
                continue
            parts = b["run_name"].split("/")
            kind, mesh, transition, size, impl = parts[:5]
            key = (kind, mesh, transition, size)
            times[key][impl].append(b["real_time"] * TO_MS[b.get("time_unit", "ns")])
            counters[key][impl] = {k: v for k, v in b.items() if isinstance(v, (int, float))}
    results = {}
    for key, by_impl in times.items():
        results[key] = {impl: {"ms": statistics.median(t), "counters": counters[key][impl]} for impl, t in by_impl.items()}
    return results, contexts


def order(key):
    kind, mesh, transition, size = key
    return (mesh.count("x"), mesh, "+" in kind, kind, transition, SIZES[size])


def fmt_ms(ms):
    return f"{ms:.3g}"


def gbps(bytes_, ms):
    return bytes_ / (ms * 1e-3) / 1e9 if ms > 0 else float("nan")


def table(results):
    rows = ["| mesh | transition | plan | size | shardmesh ms | hand-written ms | ratio | checked ms | bytes / lower bound | "
            "= prediction | GB/s | MPI ceiling GB/s | memcpy GB/s | peak extra / output shard | DTensor ms | DTensor / shardmesh |",
            "|" + "---|" * 16]
    for key in sorted(results, key=order):
        kind, mesh, transition, size = key
        r = results[key]
        if "shardmesh" not in r:
            continue
        ours = r["shardmesh"]
        c = ours["counters"]
        moved = c.get("bytes_moved", 0)
        hand = r.get("hand_written", {}).get("ms")
        single = c.get("steps", 0) == 1
        lower = c.get("bytes_lower_bound", 0)
        bound = (f"{moved / lower:.2f}" if lower else ("0 / 0" if moved == 0 else "-")) if single else "multi-step"
        exact = "yes" if c.get("bytes_exact") == 1 else "NO"
        basis = moved if moved else c.get("output_shard_bytes", 0)
        ceiling = lambda impl: f"{gbps(basis, r[impl]['ms']):.2f}" if impl in r and r[impl]["ms"] > 0 else "-"
        extra = c.get("peak_extra_bytes", 0) / c["output_shard_bytes"] if c.get("output_shard_bytes") else 0
        dt = r.get("dtensor", {}).get("ms")
        checked = r.get("checked", {}).get("ms")
        rows.append("| " + " | ".join([
            mesh, f"`{transition}`", kind, size, fmt_ms(ours["ms"]), fmt_ms(hand) if hand else "-",
            f"{ours['ms'] / hand:.2f}" if hand else "-", fmt_ms(checked) if checked else "-", bound, exact, f"{gbps(basis, ours['ms']):.2f}",
            ceiling("mpi") if moved else "-", ceiling("memcpy"), f"{extra:.2f}",
            fmt_ms(dt) if dt else "-", f"{dt / ours['ms']:.1f}" if dt else "-"]) + " |")
    return "\n".join(rows)


def targets(results):
    """One line per target of the suite, with what the run shows."""
    big = [k for k in results if SIZES[k[3]] >= 1 << 20 and "shardmesh" in results[k] and "hand_written" in results[k]]
    ratios = {k: results[k]["shardmesh"]["ms"] / results[k]["hand_written"]["ms"] for k in big}
    within = [k for k in big if ratios[k] <= 1.05]
    worst = max(big, key=lambda k: ratios[k]) if big else None
    c = {k: v["shardmesh"]["counters"] for k, v in results.items() if "shardmesh" in v}
    exact = [k for k in c if c[k].get("bytes_exact") == 1]
    single = [k for k in c if c[k].get("steps") == 1]
    at_bound = [k for k in single if c[k].get("bytes_moved") == c[k].get("bytes_lower_bound")]
    lean = [k for k in single if c[k].get("peak_extra_bytes", 0) <= c[k].get("output_shard_bytes", 0)]
    shard_to_shard = [k for k in results if k[0] == "all_to_all" and k[1] == "4" and SIZES[k[3]] >= 16 << 20
                      and "dtensor" in results[k] and "shardmesh" in results[k]]
    lines = [
        f"- time within 1.05x of hand-written at >= 1 MiB: {len(within)} of {len(big)} cases"
        + (f" (worst: {worst[0]} `{worst[2]}` on {worst[1]} at {worst[3]}, {ratios[worst]:.2f}x)" if worst else ""),
        f"- bytes moved equal to the algebra's prediction on every rank: {len(exact)} of {len(c)} cases",
        f"- single-step cases at the collective's lower bound: {len(at_bound)} of {len(single)}",
        f"- single-step cases with peak extra memory <= one output shard: {len(lean)} of {len(single)}",
    ]
    two = sorted((k for k in big if k[1] == "2"), key=order)
    if two:
        within_two = [k for k in two if ratios[k] <= 1.05]
        lines.append(f"- on 2 ranks (one per core, not oversubscribed), within 1.05x of hand-written at >= 1 MiB: "
                     f"{len(within_two)} of {len(two)} cases; "
                     + ", ".join(f"{k[0]} {k[3]}: {ratios[k]:.2f}x" for k in two if k[0] in ("reduce_scatter", "all_reduce")))
    if shard_to_shard:
        speedups = ", ".join(f"{k[3]}: {results[k]['dtensor']['ms'] / results[k]['shardmesh']['ms']:.1f}x"
                             for k in sorted(shard_to_shard, key=order))
        lines.append(f"- shard-to-shard (S(x),R -> R,S(x)) against DTensor: {speedups} faster")
    return "\n".join(lines)


def machine(contexts):
    c = next((x for x in contexts if "num_cpus" in x), {})
    ranks = sorted({x.get("mpi_ranks") for x in contexts if x.get("mpi_ranks")}, key=int)
    runtime = next((x["shardmesh_runtime"] for x in contexts if "shardmesh_runtime" in x), "")
    pytorch = next((f"; {x['pytorch']}" for x in contexts if "pytorch" in x), "")
    return (f"{c.get('host_name', '?')}: {c.get('num_cpus', '?')} CPUs at {c.get('mhz_per_cpu', '?')} MHz, "
            f"runs on {', '.join(ranks)} MPI ranks (more than 2 oversubscribe the cores; one OpenMP thread each), "
            f"{runtime}{pytorch}, "
            f"{c.get('date', '')}")


def figure(results, directory):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    meshes = sorted({k[1] for k in results}, key=lambda m: (m.count("x"), m))
    fig, axes = plt.subplots(1, len(meshes), figsize=(5.2 * len(meshes), 4.2), sharey=True, squeeze=False)
    for ax, mesh in zip(axes[0], meshes):
        series = defaultdict(list)
        for key in sorted(results, key=order):
            r = results[key]
            if key[1] == mesh and "shardmesh" in r and "hand_written" in r:
                series[(key[0], key[2])].append((SIZES[key[3]], r["shardmesh"]["ms"] / r["hand_written"]["ms"]))
        for (kind, transition), points in series.items():
            xs, ys = zip(*points)
            ax.plot(xs, ys, marker="o", label=f"{kind}: {transition}")
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.axhline(1.05, color="gray", linestyle="--", linewidth=0.8)
        ax.set_xscale("log", base=2)
        ax.set_xticks(list(SIZES.values()), list(SIZES.keys()), rotation=30)
        ax.set_title(f"mesh {mesh}")
        ax.set_xlabel("global size (float32 matrix)")
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel("time / hand-written time (median)")
    fig.suptitle("shardmesh redistribute against hand-written pack + MPI + unpack (lower is faster)")
    fig.tight_layout()
    for ext in ("png", "svg"):
        fig.savefig(f"{directory}/transition_ratios.{ext}", dpi=110)


def iterations(paths, kinds):
    """The timed runs of benchmarks whose names start with one of kinds, as (path, context, benchmark, name
    parts, ms), and the contexts of the files that had any."""
    runs, contexts = [], []
    for path in paths:
        with open(path) as f:
            data = json.load(f)
        found = False
        for b in data["benchmarks"]:
            parts = b["run_name"].split("/")
            if b.get("run_type") != "iteration" or b.get("error_occurred") or parts[0] not in kinds:
                continue
            found = True
            runs.append((path, data.get("context", {}), b, parts, b["real_time"] * TO_MS[b.get("time_unit", "ns")]))
        if found:
            contexts.append(data.get("context", {}))
    return runs, contexts


def numbers(b):
    return {k: v for k, v in b.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def load_block(paths):
    """{(kind, run, what, detail): {impl: {"ms": [...], "rounds": {field: {round: value}}, "counters": {field: [...]}}}}
    and the contexts of the files that had any; a round is a round:k or a repetition of one file."""
    results = defaultdict(lambda: defaultdict(lambda: {"ms": [], "rounds": defaultdict(dict), "counters": defaultdict(list)}))
    runs, contexts = iterations(paths, BLOCK_KINDS)
    for path, _, b, parts, ms in runs:
        kind, run, what, detail, impl = parts[:5]
        rounds = [p for p in parts[5:] if p.startswith("round:")]
        round_ = (path, rounds[0] if rounds else b.get("repetition_index", 0))
        r = results[(kind, run, what, detail)][impl]
        r["ms"].append(ms)
        r["rounds"]["ms"][round_] = ms
        for k, v in numbers(b).items():
            r["counters"][k].append(v)
            r["rounds"][k][round_] = v
    return results, contexts


def side_by_side(ours, theirs, field="ms"):
    """Median of ours/theirs (time, or a counter) over the rounds both ran."""
    a, b = ours["rounds"].get(field, {}), theirs["rounds"].get(field, {})
    common = [k for k in a if k in b and b[k]]
    return statistics.median(a[k] / b[k] for k in common) if common else float("nan")


def counter(r, name):
    values = r["counters"].get(name)
    return statistics.median(values) if values else float("nan")


def calls(r):
    """"3 all_reduce + 2 all_gather": the collectives of one step by kind, or 0."""
    kinds = sorted((k[len("calls_"):], counter(r, k)) for k in r["counters"] if k.startswith("calls_"))
    return " + ".join(f"{n:.0f} {kind}" for kind, n in kinds if n > 0) or "0"


def run_ranks(run):
    """"dp2xtp1" -> (2, 1): groups, tp."""
    dp, tp = run[2:].split("xtp")
    return int(dp), int(tp)


def block_order(key):
    kind, run, what, detail = key
    dp, tp = run_ranks(run)
    return (dp * tp, tp, what, detail)


def block_table(results):
    rows = ["| ranks | run | shape (global) | shardmesh ms | Megatron-style ms | ratio | forward ratio | backward ratio | "
            "collectives per step (shardmesh / hand-written) | GFLOP/s per rank (hand-written) |",
            "|" + "---|" * 10]
    for key in sorted((k for k in results if k[0] == "block"), key=block_order):
        _, run, shape, _ = key
        r = results[key]
        if "shardmesh" not in r or "megatron" not in r:
            continue
        ours, theirs = r["shardmesh"], r["megatron"]
        dp, tp = run_ranks(run)
        fwd = side_by_side(ours, theirs, "fwd_ms")
        bwd = side_by_side(ours, theirs, "bwd_ms")
        theirs_ms = statistics.median(theirs["ms"])
        rows.append("| " + " | ".join([
            str(dp * tp), f"dp {dp} x tp {tp}", shape.replace("_", " "), fmt_ms(statistics.median(ours["ms"])), fmt_ms(theirs_ms),
            f"{side_by_side(ours, theirs):.2f}", f"{fwd:.2f}", f"{bwd:.2f}",
            f"{calls(ours)} / {calls(theirs)}",
            f"{counter(theirs, 'flops') / (theirs_ms * 1e-3) / 1e9:.1f}"]) + " |")
    return "\n".join(rows)


def gemm_rows(results):
    for key in sorted((k for k in results if k[0] == "gemm"), key=block_order):
        r = results[key]
        if "shardmesh" in r and "blas" in r:
            yield key, r, side_by_side(r["shardmesh"], r["blas"])


def gemm_table(results):
    rows = ["| ranks | run | einsum | M x N x K : transposes (x GEMMs) | calls per step | local_gemm us | sgemm_ us | ratio | "
            "GFLOP/s per rank (sgemm_) |", "|" + "---|" * 9]
    for (_, run, spec, geometry), r, ratio in gemm_rows(results):
        dp, tp = run_ranks(run)
        theirs = statistics.median(r["blas"]["ms"])
        rows.append("| " + " | ".join([
            str(dp * tp), f"dp {dp} x tp {tp}", f"`{spec}`", geometry, f"{counter(r['shardmesh'], 'uses_per_step'):.0f}",
            f"{statistics.median(r['shardmesh']['ms']) * 1e3:.0f}", f"{theirs * 1e3:.0f}", f"{ratio:.2f}",
            f"{counter(r['blas'], 'flops') / (theirs * 1e-3) / 1e9:.1f}"]) + " |")
    return "\n".join(rows)


def block_summary(results):
    """One line per target: the block within 1.10x of hand-written, GEMMs at the raw call's speed."""
    lines = []
    pairs = [(k, side_by_side(results[k]["shardmesh"], results[k]["megatron"])) for k in sorted(results, key=block_order)
             if k[0] == "block" and "shardmesh" in results[k] and "megatron" in results[k]]
    if pairs:
        within = [k for k, ratio in pairs if ratio <= 1.10]
        lines.append(f"- forward + backward within 1.10x of the hand-written block: {len(within)} of {len(pairs)} cases; "
                     + ", ".join(f"{k[1]} c{k[2].split('_c')[1].split('_')[0]} on {math.prod(run_ranks(k[1]))} ranks: "
                                 f"{ratio:.2f}x" for k, ratio in pairs))
    gemms = list(gemm_rows(results))
    if gemms:
        ratios = [ratio for _, _, ratio in gemms]
        # Time per step in products, as local_gemm and as the raw calls.
        per_step = defaultdict(lambda: [0.0, 0.0])
        for (_, run, _, _), r, _ in gemms:
            calls = counter(r["shardmesh"], "uses_per_step")
            per_step[run][0] += calls * statistics.median(r["shardmesh"]["ms"])
            per_step[run][1] += calls * statistics.median(r["blas"]["ms"])
        lines.append(f"- local_gemm against the raw sgemm_ calls for the same {len(gemms)} products: median ratio "
                     f"{statistics.median(ratios):.2f} (from {min(ratios):.2f} to {max(ratios):.2f}); a step's products "
                     + ", ".join(f"on {run}: {ours:.1f} ms against {theirs:.1f} ms" for run, (ours, theirs) in per_step.items()))
    return "\n".join(lines)


def load_data_parallel(paths, kinds=DP_KINDS):
    """{(ranks, kind, case): {impl: [{"ms": ..., counters...} per round, in order]}} and the contexts."""
    results = defaultdict(lambda: defaultdict(list))
    runs, contexts = iterations(paths, kinds)
    for path, context, b, parts, ms in runs:
        results[(context.get("mpi_ranks", path), parts[0], parts[1])][parts[2]].append({**numbers(b), "ms": ms})
    return results, contexts


def dp_ratio(rounds_a, rounds_b):
    """Median over rounds of a's time over b's (rounds run side by side, in order)."""
    return statistics.median(a["ms"] / b["ms"] for a, b in zip(rounds_a, rounds_b))


def data_parallel_section(results):
    lines, rows = [], ["| ranks | gradient buffer | shardmesh ms | algorithm chosen | ring ms | MPI_Reduce_scatter_block ms | "
                       "MPI_Allreduce ms | shardmesh / all-reduce | MPI reduce-scatter / all-reduce |", "|" + "---|" * 9]
    met = []
    for key in sorted((k for k in results if k[1] == "reduce_scatter"), key=lambda k: (str(k[0]), SIZES[k[2]])):
        ranks, _, size = key
        r = results[key]
        if not all(i in r for i in ("shardmesh", "ring", "mpi_reduce_scatter", "mpi_allreduce")):
            continue
        ours = dp_ratio(r["shardmesh"], r["mpi_allreduce"])
        theirs = dp_ratio(r["mpi_reduce_scatter"], r["mpi_allreduce"])
        ring = statistics.median(x.get("ring", 0) for x in r["shardmesh"]) >= 0.5
        med = lambda impl: fmt_ms(statistics.median(x["ms"] for x in r[impl]))
        rows.append("| " + " | ".join([str(ranks), size, med("shardmesh"), "ring" if ring else "MPI", med("ring"),
                                       med("mpi_reduce_scatter"), med("mpi_allreduce"), f"{ours:.2f}",
                                       f"{theirs:.2f}"]) + " |")
        if SIZES[size] >= 4 << 20:
            met.append((ranks, size, ours))
    if met:
        within = [m for m in met if m[2] <= 0.6]
        lines.append(f"- gradient reduce-scatter at most 0.6x MPI_Allreduce of the same buffer at >= 4 MiB: "
                     f"{len(within)} of {len(met)} cases; " + ", ".join(f"{size} on {ranks} ranks: {ratio:.2f}x"
                                                                     for ranks, size, ratio in met))
    steps = ["| ranks | model | ZeRO | compute ms | communication ms | step, overlapped ms | step, reductions after "
             "backward ms | exposed communication | buckets |", "|" + "---|" * 9]
    for key in sorted((k for k in results if k[1] == "dp_step"), key=lambda k: str(k[0])):
        ranks, _, model = key
        for stage, rounds in sorted(results[key].items()):
            c = lambda name: statistics.median(x[name] for x in rounds)
            steps.append("| " + " | ".join([str(ranks), model.replace("_", " "), stage.replace("zero", ""),
                                            f"{c('compute_ms'):.1f}", f"{c('communication_ms'):.1f}",
                                            f"{c('step_ms'):.1f}", f"{c('sequential_ms'):.1f}",
                                            f"{100 * c('exposed_share'):.0f}%", f"{c('buckets'):.0f}"]) + " |")
            lines.append(f"- data-parallel step on {ranks} ranks, ZeRO-{stage.replace('zero', '')}: "
                         f"{100 * c('exposed_share'):.0f}% of {c('communication_ms'):.1f} ms of communication exposed "
                         f"(step {c('step_ms'):.1f} ms, compute {c('compute_ms'):.1f} ms)")
    return "\n".join(lines) + "\n\n" + "\n".join(rows) + "\n\n" + "\n".join(steps) + "\n"


def pipeline_section(results):
    """The point-to-point transfer against MPI_Isend/MPI_Irecv, and each schedule's idle share measured against
    the simulation's from the measured mean action times."""
    lines = []
    p2p = ["| ranks | activation | shardmesh ms | MPI_Isend/MPI_Irecv ms | shardmesh / MPI |", "|" + "---|" * 5]
    ratios = []
    for key in sorted((k for k in results if k[1] == "p2p"), key=lambda k: (str(k[0]), SIZES[k[2]])):
        ranks, _, size = key
        r = results[key]
        if "shardmesh" not in r or "mpi" not in r:
            continue
        ratio = dp_ratio(r["shardmesh"], r["mpi"])
        ratios.append((ranks, size, ratio))
        med = lambda impl: fmt_ms(statistics.median(x["ms"] for x in r[impl]))
        p2p.append(f"| {ranks} | {size} | {med('shardmesh')} | {med('mpi')} | {ratio:.2f} |")
    if ratios:
        within = [x for x in ratios if x[2] <= 1.05]
        lines.append(f"- activation transfer between stages within 1.05x of hand-written MPI_Isend/MPI_Irecv: "
                     f"{len(within)} of {len(ratios)} sizes; " + ", ".join(f"{size}: {ratio:.2f}x" for _, size, ratio in ratios))
    rows = ["| ranks | schedule | micro-batches | step ms | idle measured | idle predicted | difference | idle, unit costs |",
            "|" + "---|" * 8]
    diffs, share = [], {}
    for key in sorted((k for k in results if k[1] == "pipeline"), key=lambda k: (str(k[0]), k[2])):
        ranks, _, schedule = key
        for m, rounds in sorted(results[key].items(), key=lambda kv: int(kv[0][1:])):
            c = lambda name: statistics.median(x[name] for x in rounds)
            diff = abs(c("idle_measured") - c("idle_predicted"))
            diffs.append(diff)
            share[(ranks, schedule, m)] = c("idle_measured")
            rows.append(f"| {ranks} | {schedule} | {m[1:]} | {c('step_ms'):.1f} | {c('idle_measured'):.3f} | "
                        f"{c('idle_predicted'):.3f} | {diff:.3f} | {c('idle_unit'):.3f} |")
    if diffs:
        lines.append(f"- measured idle share within 0.05 of the simulation's from the measured action times: "
                     f"{sum(d <= 0.05 for d in diffs)} of {len(diffs)} runs (largest difference {max(diffs):.3f})")
        pairs = [(k, share[k], share[(k[0], "1f1b", k[2])]) for k in share if k[1] == "zb-h1" and (k[0], "1f1b", k[2]) in share]
        if pairs:
            lines.append(f"- ZB-H1's idle share below 1F1B's: {sum(z < f for _, z, f in pairs)} of {len(pairs)}; "
                         + ", ".join(f"m = {k[2][1:]}: {z:.3f} against {f:.3f}" for k, z, f in sorted(pairs, key=lambda x: int(x[0][2][1:]))))
    return "\n".join(lines) + "\n\n" + "\n".join(p2p) + "\n\n" + "\n".join(rows) + "\n"


def checkpoint_section(results):
    """Save and load bandwidth against hand-written MPI-IO of the same bytes, side by side."""
    rows = ["| ranks | state | operation | shardmesh ms | MPI-IO ms | shardmesh GB/s | MPI-IO GB/s | shardmesh / MPI-IO "
            "bandwidth | unverified load / MPI-IO |", "|" + "---|" * 9]
    ratios = []
    for key in sorted(results, key=lambda k: (str(k[0]), k[1] == "load", SIZES[k[2]])):
        ranks, kind, size = key
        r = results[key]
        if "shardmesh" not in r or "mpi_io" not in r:
            continue
        ratio = 1 / dp_ratio(r["shardmesh"], r["mpi_io"])  # bandwidth: the inverse of the time ratio
        unverified = 1 / dp_ratio(r["shardmesh_unverified"], r["mpi_io"]) if "shardmesh_unverified" in r else None
        ratios.append((ranks, kind, size, ratio, unverified))
        med = lambda impl: statistics.median(x["ms"] for x in r[impl])
        rows.append(f"| {ranks} | {size} | {kind} | {fmt_ms(med('shardmesh'))} | {fmt_ms(med('mpi_io'))} | "
                    f"{gbps(SIZES[size], med('shardmesh')):.2f} | {gbps(SIZES[size], med('mpi_io')):.2f} | {ratio:.2f} | "
                    f"{'' if unverified is None else f'{unverified:.2f}'} |")
    lines = []
    for kind, baseline in (("save", "MPI_File_write_at_all"), ("load", "MPI_File_read_at_all")):
        mine = [x for x in ratios if x[1] == kind]
        if mine:
            lines.append(f"- {kind} bandwidth at least 0.8x hand-written {baseline}: {sum(x[3] >= 0.8 for x in mine)} of "
                         f"{len(mine)} cases; " + ", ".join(f"{size} on {ranks} ranks: {ratio:.2f}x"
                                                           for ranks, _, size, ratio, _ in mine))
    unverified = [x for x in ratios if x[4] is not None]
    if unverified:
        lines.append(f"- load without checking the checksums at least 0.8x: {sum(x[4] >= 0.8 for x in unverified)} of "
                     f"{len(unverified)} cases; " + ", ".join(f"{size} on {ranks} ranks: {u:.2f}x"
                                                              for ranks, _, size, _, u in unverified))
    return "\n".join(lines) + "\n\n" + "\n".join(rows) + "\n"


def load_cases(paths, kind, case_parts):
    """{case: {impl: [{"ms": ..., counters...} per round, in order]}} for benchmarks kind/<case_parts
    parts>/<impl parts...>, and the contexts."""
    results = defaultdict(lambda: defaultdict(list))
    runs, contexts = iterations(paths, (kind,))
    for _, _, b, parts, ms in runs:
        impl = "/".join(p for p in parts[1 + case_parts:] if ":" not in p and p != "manual_time")
        results[tuple(parts[1:1 + case_parts])][impl].append({**numbers(b), "ms": ms})
    return results, contexts


def product_section(results):
    """Distributed products against ScaLAPACK's pdgemm: time and workspace, side by side; and shardmesh with its
    workspace limited to what pdgemm took."""
    rows = ["| mesh | n | shardmesh ms | pdgemm ms | shardmesh / pdgemm | shardmesh KiB | pdgemm KiB | "
            "at pdgemm's memory: ms | / pdgemm | KiB | operand shards KiB |", "|" + "---|" * 11]
    same = "shardmesh_at_pdgemm_memory"
    for mesh, n in sorted(results, key=lambda k: (k[0], int(k[1]))):
        r = results[(mesh, n)]
        if "shardmesh" not in r or "pdgemm" not in r:
            continue
        med = lambda impl, field="ms": statistics.median(x[field] for x in r[impl])
        kib = lambda impl: f"{med(impl, 'workspace_bytes') / 1024:.0f}"
        limited = (f"{fmt_ms(med(same))} | {dp_ratio(r[same], r['pdgemm']):.2f} | {kib(same)}" if same in r
                   else " | | ")
        rows.append(f"| {mesh} | {n} | {fmt_ms(med('shardmesh'))} | {fmt_ms(med('pdgemm'))} | "
                    f"{dp_ratio(r['shardmesh'], r['pdgemm']):.2f} | {kib('shardmesh')} | {kib('pdgemm')} | {limited} | "
                    f"{med('pdgemm', 'operand_bytes') / 1024:.0f} |")
    return "\n".join(rows) + "\n"


def local_product_section(results):
    """Local products in bf16 and fp16 against the float BLAS, every rank multiplying at once: GFLOP/s per rank."""
    impls = ("fp32", "bf16", "bf16_widened", "fp16")
    rows = ["| m x n x k | " + " | ".join(f"{i} GFLOP/s" for i in impls) + " | bf16 / fp32 | fp16 / fp32 |",
            "|" + "---|" * (len(impls) + 3)]
    for (shape,) in sorted(results, key=lambda k: [int(x) for x in k[0].split("x")]):
        r = results[(shape,)]
        if not all(i in r for i in impls):
            continue
        rate = {i: statistics.median(x["gflops"] for x in r[i]) for i in impls}
        rows.append(f"| {shape} | " + " | ".join(f"{rate[i]:.0f}" for i in impls) +
                    f" | {rate['bf16'] / rate['fp32']:.2f}x | {rate['fp16'] / rate['fp32']:.2f}x |")
    return "\n".join(rows) + "\n"


def context_section(ring, transition):
    """The ring form against its computation and its transfers; the all-to-all form's transition against one by
    hand."""
    rows = ["| pass | shape | ring ms | compute alone ms | p2p alone ms | in transfer code ms | "
            "in transfer / p2p | (ring - compute) / p2p |", "|" + "---|" * 8]
    for pass_, shape in sorted(ring, key=lambda k: (k[0] != "forward", k[1])):
        r = ring[(pass_, shape)]
        if not all(i in r for i in ("ring", "compute", "p2p")):
            continue
        med = lambda impl, field="ms": statistics.median(x[field] for x in r[impl])
        rows.append(f"| {pass_} | {shape} | {fmt_ms(med('ring'))} | {fmt_ms(med('compute'))} | {fmt_ms(med('p2p'))} | "
                    f"{med('p2p', 'transfer_ms'):.3g} | {med('p2p', 'exposed_share'):.2f} | "
                    f"{med('p2p', 'difference_share'):.2f} |")
    rows += ["", "| [b, t, h, d] S(seq:cp) to S(heads:cp) | shardmesh ms | by hand ms | shardmesh / by hand |",
             "|" + "---|" * 4]
    for (shape,) in sorted(transition):
        r = transition[(shape,)]
        if "shardmesh" in r and "mpi" in r:
            med = lambda impl: statistics.median(x["ms"] for x in r[impl])
            rows.append(f"| {shape} | {fmt_ms(med('shardmesh'))} | {fmt_ms(med('mpi'))} | "
                        f"{dp_ratio(r['shardmesh'], r['mpi']):.2f} |")
    return "\n".join(rows) + "\n"


def context_memory_section(reports):
    """The memory ledger's peaks per rank of the same training step on cp = 1, 2, 4 ranks (train_gpt --report)."""
    runs = sorted((r["plan"]["cp"], r["peak_bytes"]) for r in reports if "plan" in r)
    if not runs:
        return ""
    base = runs[0][1]["activations"] if runs[0][0] == 1 else None
    mib = lambda b: f"{b / 2**20:.2f}"
    rows = ["| cp | activations per rank MiB | x cp = 1 | workspace per rank MiB | parameters per rank MiB | "
            "gradients per rank MiB |", "|" + "---|" * 6]
    for cp, peak in runs:
        share = f"{peak['activations'] / base:.3f}" if base else ""
        rows.append(f"| {cp} | {mib(peak['activations'])} | {share} | {mib(peak['workspace'])} | "
                    f"{mib(peak['parameters'])} | {mib(peak['gradients'])} |")
    return "\n".join(rows) + "\n"


def expert_section(dispatch, plans):
    """The dispatch against one by hand with MPI_Alltoallv of the same counts; the plan apart."""
    rows = ["| tokens x features | experts, top-k | shardmesh ms | by hand ms | shardmesh / by hand | plan ms |",
            "|" + "---|" * 6]
    for key in sorted(dispatch):
        r = dispatch[key]
        if "shardmesh" not in r or "mpi" not in r:
            continue
        med = lambda rounds: statistics.median(x["ms"] for x in rounds)
        plan = plans.get(key, {}).get("")
        rows.append(f"| {key[0]} | {key[1]} | {fmt_ms(med(r['shardmesh']))} | {fmt_ms(med(r['mpi']))} | "
                    f"{dp_ratio(r['shardmesh'], r['mpi']):.2f} | {fmt_ms(med(plan)) if plan else ''} |")
    return "\n".join(rows) + "\n"


def pencil_section(results):
    """Strided pencil transposes against contiguous ones and hand-written MPI, side by side; shardmesh's
    algorithms for strided all-to-alls, each forced, beside the one the mesh measured faster."""
    rows = ["| ranks | n | contiguous ms | strided ms | strided / contiguous | measured choice (rounds) | datatypes ms | "
            "node window ms | streaming window ms | alltoallw ms | strided / alltoallw | hand-packed ms | "
            "strided / hand-packed |", "|" + "---|" * 13]
    names = {1: "datatypes", 2: "window", 3: "streaming window"}
    for ranks, n in sorted(results, key=lambda k: (int(k[0]), int(k[1]))):
        r = results[(ranks, n)]
        ours, base = r.get("strided/shardmesh"), r.get("contiguous/shardmesh")
        if not ours or not base:
            continue
        med = lambda impl: statistics.median(x["ms"] for x in r[impl])
        cells = [fmt_ms(med("contiguous/shardmesh")), fmt_ms(med("strided/shardmesh")), f"{dp_ratio(ours, base):.2f}"]
        chosen = Counter(names.get(int(x.get("chosen", 0)), "?") for x in ours)
        cells.append(", ".join(f"{name} ({count})" for name, count in chosen.most_common()))
        for impl in ("strided/shardmesh_datatypes", "strided/shardmesh_node_window",
                     "strided/shardmesh_node_window_streaming"):
            cells.append(fmt_ms(med(impl)) if impl in r else "")
        for impl in ("strided/alltoallw", "strided/hand_packed"):
            cells += [fmt_ms(med(impl)), f"{dp_ratio(ours, r[impl]):.2f}"] if impl in r else ["", ""]
        rows.append(f"| {ranks} | {n}^3 | " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n"


def losses(rounds):
    """The losses of a run's steps (every round trains the same steps: the first round's)."""
    r = rounds[0]
    return [r[f"loss_{i}"] for i in range(len(r)) if f"loss_{i}" in r]


def loss_difference(ours, theirs):
    """The largest relative difference between two runs' losses, step by step."""
    a, b = losses(ours), losses(theirs)
    return max((abs(x - y) / abs(y) for x, y in zip(a, b)), default=float("nan")) if len(a) == len(b) else float("nan")


def training_section(results):
    """shardmesh's training steps against PyTorch's (one process, DDP, FSDP) side by side, their losses compared,
    ZeRO-1 and ZeRO-2 against ZeRO-0, and how much of the gradient reductions stays exposed."""
    baseline = {"1rank": "one process", "zero0": "DDP", "zero1": "DDP", "zero2": "FSDP SHARD_GRAD_OP",
                "zero3": "FSDP FULL_SHARD"}
    peer = lambda run: run if run == "1rank" or not run.endswith("zero1") else run[:-1] + "0"
    rows = ["| model | run | shardmesh ms | PyTorch | PyTorch ms | shardmesh / PyTorch | shardmesh / its ZeRO-0 | "
            "samples/s | largest loss difference | exposed communication |", "|" + "---|" * 10]
    ratios, zero, exposed = [], [], []
    for model, run in sorted(results, key=lambda k: (k[0], k[1])):
        r = results[(model, run)]
        ours = r.get("shardmesh")
        theirs = results.get((model, peer(run)), {}).get("pytorch")
        if not ours:
            continue
        med = lambda rounds, field="ms": statistics.median(x[field] for x in rounds)
        ratio = dp_ratio(ours, theirs) if theirs and run == peer(run) else None
        if ratio is not None:
            ratios.append((model, run, ratio))
        zero0 = results.get((model, run[:-1] + "0"), {}).get("shardmesh") if run[-1] in "12" else None
        to_zero0 = dp_ratio(ours, zero0) if zero0 else None
        if to_zero0 is not None:
            zero.append((model, run, to_zero0))
        share = med(ours, "exposed_share") if "exposed_share" in ours[0] else None
        if share is not None:
            exposed.append((model, run, share, med(ours, "communication_ms")))
        rows.append("| " + " | ".join([
            model.replace("_", " "), run.replace("_", " "), fmt_ms(med(ours)),
            baseline[run if run == "1rank" else run.split("_")[1]], fmt_ms(med(theirs)) if theirs else "",
            f"{ratio:.2f}" if ratio is not None else "", f"{to_zero0:.2f}" if to_zero0 is not None else "",
            f"{med(ours, 'samples_per_second'):.0f}", f"{loss_difference(ours, theirs):.1e}" if theirs else "",
            f"{100 * share:.0f}% of {med(ours, 'communication_ms'):.1f} ms" if share is not None else ""]) + " |")
    lines = []
    listed = lambda xs: ", ".join(f"{m.replace('_', ' ')} {run.replace('_', ' ')}: {x:.2f}x" for m, run, x in xs)
    if ratios:
        lines.append(f"- at most 1.0x PyTorch's step (one process, DDP, FSDP): {sum(x <= 1.0 for *_, x in ratios)} of "
                     f"{len(ratios)}; " + listed(ratios))
    if zero:
        lines.append(f"- ZeRO-1 and ZeRO-2 within 1.10x of ZeRO-0: {sum(x <= 1.10 for *_, x in zero)} of {len(zero)}; "
                     + listed(zero))
    bf16 = [(m, run, dp_ratio(r["shardmesh_bf16"], r["shardmesh"])) for (m, run), r in sorted(results.items())
            if "shardmesh_bf16" in r and "shardmesh" in r]
    if bf16:
        lines.append("- bf16 step against the float step, the same model and run: " + listed(bf16))
    if exposed:
        lines.append("- exposed gradient reduction: " + ", ".join(
            f"{m.replace('_', ' ')} {run.replace('_', ' ')}: {100 * x:.0f}% of {c:.1f} ms" for m, run, x, c in exposed))
    return "\n".join(lines) + "\n\n" + "\n".join(rows) + "\n"


def replace_between(text, markers, section):
    begin, end = markers
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{begin}\n{section}{end}{tail}"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", nargs="*")
    parser.add_argument("--markdown", help="write the tables here")
    parser.add_argument("--figures", help="write transition_ratios.png and .svg into this folder")
    parser.add_argument("--readme", action="append", default=[],
                        help="replace the results sections of this file (README.md, docs/04-benchmarks.md); repeatable")
    parser.add_argument("--command", default="tools/bench", help="the command that produced the results")
    parser.add_argument("--train-reports", nargs="*", default=[],
                        help="train_gpt --report files (JSON) of one run each, for the memory tables")
    args = parser.parse_args()
    reports = []
    for path in args.train_reports:
        with open(path) as f:
            reports.append(json.load(f))
    results, contexts = load(args.results)
    block, block_contexts = load_block(args.results)
    dp, dp_contexts = load_data_parallel(args.results)
    pipe, pipe_contexts = load_data_parallel(args.results, PIPELINE_KINDS)
    saves, save_contexts = load_data_parallel(args.results, CHECKPOINT_KINDS)
    products, product_contexts = load_cases(args.results, "product", 2)
    pencils, pencil_contexts = load_cases(args.results, "pencil", 2)
    training, training_contexts = load_cases(args.results, "train", 2)
    local, local_contexts = load_cases(args.results, "local_product", 1)
    ring, ring_contexts = load_cases(args.results, "ring", 2)
    heads, _ = load_cases(args.results, "heads_transition", 1)
    dispatch, dispatch_contexts = load_cases(args.results, "dispatch", 2)
    plans, _ = load_cases(args.results, "dispatch_plan", 2)
    if not any((results, block, dp, pipe, saves, products, pencils, training, local, ring, dispatch, reports)):
        sys.exit("no benchmark results in " + ", ".join(args.results))
    sections = {}  # markers -> text
    if results:
        sections[(BEGIN, END)] = f"Produced by `{args.command}` on {machine(contexts)}.\n\n{targets(results)}\n\n{table(results)}\n"
    if block:
        head = f"Produced by `{args.command}` on {machine(block_contexts)}.\n\n{block_summary(block)}\n\n"
        sections[BLOCK_MARKERS] = head + block_table(block) + "\n"
        if any(k[0] == "gemm" for k in block):
            sections[GEMM_MARKERS] = f"Produced by `{args.command}` on {machine(block_contexts)}.\n\n{gemm_table(block)}\n"
    if dp:
        sections[DP_MARKERS] = f"Produced by `{args.command}` on {machine(dp_contexts)}.\n\n{data_parallel_section(dp)}"
    if pipe:
        sections[PIPELINE_MARKERS] = f"Produced by `{args.command}` on {machine(pipe_contexts)}.\n\n{pipeline_section(pipe)}"
    if saves:
        sections[CHECKPOINT_MARKERS] = (f"Produced by `{args.command}` on {machine(save_contexts)}.\n\n"
                                        f"{checkpoint_section(saves)}")
    if products:
        sections[PRODUCT_MARKERS] = (f"Produced by `{args.command}` on {machine(product_contexts)}.\n\n"
                                     f"{product_section(products)}")
    if pencils:
        sections[PENCIL_MARKERS] = (f"Produced by `{args.command}` on {machine(pencil_contexts)}.\n\n"
                                    f"{pencil_section(pencils)}")
    if training:
        sections[TRAINING_MARKERS] = (f"Produced by `{args.command}` on {machine(training_contexts)}.\n\n"
                                      f"{training_section(training)}")
    if local:
        sections[LOCAL_PRODUCT_MARKERS] = (f"Produced by `{args.command}` on {machine(local_contexts)}.\n\n"
                                           f"{local_product_section(local)}")
    if ring:
        sections[CONTEXT_MARKERS] = (f"Produced by `{args.command}` on {machine(ring_contexts)}.\n\n"
                                     f"{context_section(ring, heads)}")
    if reports:
        sections[CONTEXT_MEMORY_MARKERS] = (f"Produced by `{args.command}`: one step of the Llama-style model, 2 "
                                            f"sequences of 1024 tokens, on cp ranks (train_gpt --report).\n\n"
                                            f"{context_memory_section(reports)}")
    if dispatch:
        sections[EXPERT_MARKERS] = (f"Produced by `{args.command}` on {machine(dispatch_contexts)}.\n\n"
                                    f"{expert_section(dispatch, plans)}")
    text = "\n".join(sections.values())
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text)
    else:
        print(text)
    if args.figures and results:
        figure(results, args.figures)
    for path in args.readme:
        with open(path) as f:
            readme = f.read()
        if not any(begin in readme and end in readme for begin, end in ((BEGIN, END), BLOCK_MARKERS, GEMM_MARKERS, DP_MARKERS,
                                                                           PIPELINE_MARKERS, CHECKPOINT_MARKERS,
                                                                           PRODUCT_MARKERS, PENCIL_MARKERS,
                                                                           TRAINING_MARKERS, LOCAL_PRODUCT_MARKERS,
                                                                           CONTEXT_MARKERS, EXPERT_MARKERS,
                                                                           CONTEXT_MEMORY_MARKERS)):
            sys.exit(f"{path} has no results markers (such as {BEGIN} and {END})")
        present = [m for m in sections if m[0] in readme and m[1] in readme]
        for markers in present:
            readme = replace_between(readme, markers, sections[markers])
        with open(path, "w") as f:
            f.write(readme)


if __name__ == "__main__":
    main()
