#!/usr/bin/env python3
"""Turns the transition suite's JSON into a markdown table and figures.

    bench/report.py RESULTS.json... [--markdown FILE] [--figures DIR] [--readme README.md]

RESULTS are Google Benchmark JSON files of bench_transitions (one per rank
count) and, optionally, of bench/dtensor_transitions.py. Benchmark names are
kind/mesh/from->to/size/implementation. Times are medians over repetitions.
--readme replaces the part of README.md between the results markers.
"""
import argparse
import json
import statistics
import sys
from collections import defaultdict

BEGIN = "<!-- transition results begin -->"
END = "<!-- transition results end -->"
SIZES = {"64KiB": 64 << 10, "256KiB": 256 << 10, "1MiB": 1 << 20, "4MiB": 4 << 20, "16MiB": 16 << 20, "64MiB": 64 << 20}
TO_MS = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}


def load(paths):
    """{(kind, mesh, transition, size): {impl: {"ms": median, "counters": {...}}}} and the contexts."""
    times = defaultdict(lambda: defaultdict(list))
    counters = defaultdict(dict)
    contexts = []
    for path in paths:
        with open(path) as f:
            data = json.load(f)
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
    return (f"{c.get('host_name', '?')}: {c.get('num_cpus', '?')} CPUs at {c.get('mhz_per_cpu', '?')} MHz, "
            f"runs on {', '.join(ranks)} MPI ranks (more than 2 oversubscribe the cores; one OpenMP thread each), "
            f"{runtime}, "
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


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", nargs="+")
    parser.add_argument("--markdown", help="write the table here")
    parser.add_argument("--figures", help="write transition_ratios.png and .svg into this folder")
    parser.add_argument("--readme", help="replace the results section of this README")
    parser.add_argument("--command", default="tools/bench", help="the command that produced the results")
    args = parser.parse_args()
    results, contexts = load(args.results)
    if not results:
        sys.exit("no benchmark results in " + ", ".join(args.results))
    text = (f"Produced by `{args.command}` on {machine(contexts)}.\n\n{targets(results)}\n\n{table(results)}\n")
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text)
    else:
        print(text)
    if args.figures:
        figure(results, args.figures)
    if args.readme:
        with open(args.readme) as f:
            readme = f.read()
        if BEGIN not in readme or END not in readme:
            sys.exit(f"{args.readme} lacks the markers {BEGIN} and {END}")
        head, rest = readme.split(BEGIN, 1)
        _, tail = rest.split(END, 1)
        with open(args.readme, "w") as f:
            f.write(f"{head}{BEGIN}\n{text}{END}{tail}")


if __name__ == "__main__":
    main()
