"""Checks of shardmesh-bench on MPI ranks: --json for one transition and a
sweep, and --targets all (text and JSON) against shardmesh-plan --all.

    python3 bench_test.py json|targets PLAN_PROGRAM RANKS MPIEXEC... BENCH_PROGRAM [MPIEXEC_POSTFLAGS...]

Everything after RANKS is the command line that starts shardmesh-bench on
RANKS ranks; the arguments of each case are appended to it. Its reports are
read from --output's file: the launcher that forwards the ranks' stdout and
stderr may interleave the two.
"""
import json
import os
import re
import subprocess
import sys
import tempfile

MESH = "dp=2,tp"  # tp = 1 on 2 ranks, 2 on 4


def run(command, *args):
    done = subprocess.run([*command, *args], capture_output=True, text=True, check=False, timeout=100)
    if done.returncode != 0:
        sys.exit(f"{' '.join(args)}: exit {done.returncode}\n{done.stdout}\n{done.stderr}")
    return done.stdout


def report(command, *args):
    """shardmesh-bench's report, written to a file."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "report")
        run(command, *args, "--output", path)
        with open(path) as f:
            return f.read()


def check(condition, what):
    if not condition:
        sys.exit(f"FAILED: {what}")


def check_case(case, ranks, what):
    check(case["measured_bytes_per_rank"] == case["bytes_per_rank"], f"{what}: bytes moved as predicted, by rank")
    check(len(case["measured_bytes_per_rank"]) == ranks, f"{what}: one count per rank")
    check(case["measured_as_predicted"], f"{what}: measured_as_predicted")
    check(case["measured_bytes_busiest_rank"] >= case["lower_bound_bytes"], f"{what}: not below the lower bound")
    t = case["time_s"]
    check(0 < t["min"] <= t["median"] <= t["max"], f"{what}: min <= median <= max")
    check(0 <= case["slowest_rank"] < ranks and case["slowest_rank_runs"] >= 1, f"{what}: slowest rank")
    check(0 <= case["measured_peak_extra_bytes"] <= case["peak_extra_bytes"],
          f"{what}: measured peak extra memory within the plan's bound")
    if case["steps"] and any(s["kind"] not in ("slice", "to_partial") for s in case["steps"]):
        mpi = case["mpi"]
        check(mpi and mpi["calls"].startswith("MPI_") and mpi["time_s"]["median"] > 0, f"{what}: the MPI ceiling")
        check(case["gb_per_s"] > 0, f"{what}: GB/s")
    else:
        check(case["mpi"] is None and case["gb_per_s"] is None, f"{what}: nothing sent, no ceiling")


def one(command, ranks):
    doc = json.loads(report(command, "--mesh", MESH, "--shape", "16,12", "--from", "S(dp),R", "--to", "R,S(dp)",
                            "--repetitions", "3", "--json"))
    check(doc["ranks"] == ranks and doc["mesh"] == f"dp=2,tp={ranks // 2}", "the mesh bound to the ranks")
    check(doc["repetitions"] == 3 and doc["type"] == "f32" and doc["targets"] is None, "header")
    (size,) = doc["sizes"]
    check(size["tensor"] == "f32[16,12]" and size["bytes"] == 768, "one size")
    (case,) = size["cases"]
    check(case["to"] == "R,S(dp)" and [s["kind"] for s in case["steps"]] == ["all_to_all"], "one all-to-all")
    # Each rank holds 8x12 floats and keeps 8x6: it receives 48 floats.
    check(case["bytes_per_rank"] == [192] * ranks, f"192 B per rank predicted, got {case['bytes_per_rank']}")
    check(case["mpi"]["calls"] == "MPI_Alltoall(dp)", "the ceiling is MPI_Alltoall on dp")
    check_case(case, ranks, "S(dp),R -> R,S(dp)")

    # A sweep: powers of two, the leading dimension the longer.
    doc = json.loads(report(command, "--mesh", MESH, "--sweep", "1KiB..4KiB", "--type", "f64", "--from",
                            "R,R P(sum:dp)", "--to", "S(dp),R", "--repetitions", "2", "--json"))
    shapes = [s["shape"] for s in doc["sizes"]]
    check(shapes == [[16, 8], [16, 16], [32, 16]], f"sweep shapes, got {shapes}")
    for s in doc["sizes"]:
        check(s["bytes"] == s["shape"][0] * s["shape"][1] * 8, "sizes in bytes")
        check_case(s["cases"][0], ranks, s["tensor"])
    print(f"json on {ranks} ranks: passed")


def targets(command, plan, ranks):
    mesh = f"dp=2,tp={ranks // 2}"
    planned = json.loads(run([plan], "--mesh", mesh, "--shape", "16,12", "--from", "S(dp),R", "--all", "--json"))
    planned = [t["to"] for t in planned["targets"]]
    args = ["--mesh", MESH, "--shape", "16,12", "--from", "S(dp),R", "--targets", "all", "--repetitions", "3"]

    doc = json.loads(report(command, *args, "--json"))
    (size,) = doc["sizes"]
    cases = size["cases"]
    check([c["to"] for c in cases] == planned, f"the targets of shardmesh-plan --all, in its order: {planned}")
    check([c["planned_position"] for c in cases] == list(range(1, len(cases) + 1)), "planned positions")
    by_time = sorted(cases, key=lambda c: c["measured_position"])
    check(sorted(c["measured_position"] for c in cases) == list(range(1, len(cases) + 1)), "measured positions")
    medians = [c["time_s"]["median"] for c in by_time]
    check(medians == sorted(medians), "measured positions by median time")
    check(sum(c["source"] for c in cases) == 1 and cases[0]["source"], "the source once, planned first")
    for c in cases:
        check_case(c, ranks, c["to"])
    o = size["ordering"]
    n = len(cases)
    check(o["pairs"] == n * (n - 1) // 2, "all pairs")
    check(o["concordant"] + o["discordant"] + o["tied_in_cost"] + o["tied_in_time"] == o["pairs"], "pairs add up")
    check(o["clear_inversions"] <= o["discordant"], "clear inversions are inversions")
    check(o["kendall_tau_b"] is None or -1 <= o["kendall_tau_b"] <= 1, "tau-b in [-1, 1]")

    text = report(command, *args)
    check(f"f32[16,12] on mesh {mesh} ({ranks} ranks) from S(dp),R: {n} target layouts, fastest measured first"
          in text, "the table's title")
    lines = text.splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:2] == ["#", "target"])
    rows = [line.split() for line in lines[header + 1:header + 1 + n]]
    check(lines[header + 1 + n].strip().startswith("GB/s:"), f"{n} rows, then the legend")
    check([int(r[0]) for r in rows] == list(range(1, n + 1)), f"{n} rows numbered by measured time")
    check(sorted(r[1] for r in rows) == sorted(planned), "every target in the table")
    check([float(r[2]) for r in rows] == sorted(float(r[2]) for r in rows), "rows by median time")
    check(re.search(r"planned cost against measured time: \d+ of \d+ pairs .* Kendall tau-b (-?[0-9.]+|-)\n"
                    r"  \d+ inversions?, \d+ clear", text), "how the cost model orders them")
    print(f"targets on {ranks} ranks: {n} targets, passed")


if __name__ == "__main__":
    what, plan, ranks, command = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
    if what == "json":
        one(command, ranks)
    else:
        targets(command, plan, ranks)
