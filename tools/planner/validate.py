"""The training planner against real runs: tools/validate-planner's body (see its --help)."""
import argparse
import json
import os
import statistics
import subprocess
import sys

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.path.join(REPO, "build", "release")
MODEL_FILE = os.path.join(REPO, "tools", "planner", "models", "small-gpt.json")
with open(MODEL_FILE) as f:
    MODEL = json.load(f)
GLOBAL_BATCH = 16
BUCKET_KIB = 25 * 1024  # the planner's bucket size
STATE = ("parameters", "gradients", "optimizer_state", "activations")
MARKERS = ("<!-- planner validation: begin -->", "<!-- planner validation: end -->")


def say(what):
    print(f"[validate-planner] {what}", file=sys.stderr, flush=True)


def mpirun(ranks, program, *args, timeout=600):
    command = [os.path.join(REPO, "tools", "mpirun"), str(ranks), program, *map(str, args)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stdout}\n{done.stderr}")
    return done.stdout


def plan_label(p):
    label = f"dp={p['dp']} tp={p['tp']} pp={p['pp']} zero={p['zero']} b={p['micro_batch']} m={p['micro_batches']}"
    if p["pp"] > 1:
        label += f" {p['schedule']}" + (f" v={p['virtual_stages']}" if p["virtual_stages"] > 1 else "")
    return label


def chosen(plans, count, top=4):
    """The planner's top plans and a spread of the rest, fastest first."""
    if len(plans) <= count:
        return plans
    rest = plans[top:]
    spread = count - top
    picks = {round(i * (len(rest) - 1) / max(spread - 1, 1)) for i in range(spread)}
    return plans[:top] + [rest[i] for i in sorted(picks)]


def ranks_of(values):
    """Ranks 1..n, ties given their mean rank."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    out = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return out


def spearman(x, y):
    rx, ry = ranks_of(x), ranks_of(y)
    mx, my = statistics.fmean(rx), statistics.fmean(ry)
    num = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    den = (sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry)) ** 0.5
    return num / den if den > 0 else float("nan")


def run_plan(ranks, p, steps, report):
    """train_gpt on plan p: its steps' seconds after the first two, and its peak memory per category."""
    args = ["--dp", p["dp"], "--tp", p["tp"], "--pp", p["pp"], "--zero", p["zero"], "--micro-batch", p["micro_batch"],
            "--accumulation", p["micro_batches"], "--global-batch", GLOBAL_BATCH, "--steps", steps, "--bucket-kib",
            BUCKET_KIB, "--quiet", "--report", report]
    if p["pp"] > 1:
        args += ["--schedule", p["schedule"], "--virtual", p["virtual_stages"]]
    for key in ("vocabulary", "sequence", "hidden", "heads", "head_size", "ffn", "layers"):
        args += ["--" + key.replace("_", "-"), MODEL[key]]
    mpirun(ranks, os.path.join(BUILD, "examples", "train_gpt"), *args)
    with open(report) as f:
        measured = json.load(f)
    return {"steps": measured["step_seconds"][2:], "peak_bytes": measured["peak_bytes"]}


def fastest(steps, count=3):
    """A plan's step time on the machine left alone: the median of its `count` fastest steps over every run.
    Calibration keeps each figure's fastest pass for the same reason: this machine is shared, and slows
    down by up to 1.7x for seconds at a time, which a step (tens of milliseconds) either meets or not."""
    return statistics.median(sorted(steps)[:count])


def calibrate(ranks, quick, hardware, again):
    """Calibrates at `ranks` into `hardware`; again: keeping each figure's faster of this and the file's."""
    mpirun(ranks, os.path.join(BUILD, "tools", "planner", "shardmesh-calibrate"), *(["--quick"] if quick else []),
           "--out", hardware, *(["--faster-than", hardware] if again else []))


def predictions(ranks, hardware):
    """Every feasible plan, fastest predicted first."""
    listing = subprocess.run(
        [os.path.join(BUILD, "tools", "planner", "shardmesh-plan-training"), "--model", MODEL_FILE, "--global-batch",
         str(GLOBAL_BATCH), "--ranks", str(ranks), "--hardware", hardware, "--memory", "0", "--json"],
        capture_output=True, text=True, check=True).stdout
    plans = [p for p in json.loads(listing)["plans"] if "seconds" in p]
    return sorted(plans, key=lambda p: p["seconds"]["step"])


def validate(ranks, count, steps, rounds, quick, out):
    hardware = os.path.join(out, f"hardware-{ranks}.json")
    say(f"{ranks} ranks: calibrating")
    calibrate(ranks, quick, hardware, again=False)
    plans = predictions(ranks, hardware)
    picked = chosen(plans, count)
    say(f"{ranks} ranks: {len(plans)} feasible plans; running {len(picked)}")
    # Rounds over every plan, so that a spell of the machine running slow
    # (it is shared) falls on each plan alike and each meets it left alone;
    # calibrated again before each round, each figure keeping its fastest,
    # so that calibration meets the same spells.
    measured = [{"steps": [], "peak_bytes": None} for _ in picked]
    for round_ in range(rounds):
        if round_ > 0:
            calibrate(ranks, quick, hardware, again=True)
        for i, p in enumerate(picked):
            run = run_plan(ranks, p, steps, os.path.join(out, f"run-{ranks}-{i}-{round_}.json"))
            measured[i]["steps"] += run["steps"]
            measured[i]["peak_bytes"] = measured[i]["peak_bytes"] or run["peak_bytes"]
    # Predicted by the calibration of every round.
    final = {plan_label(p): p for p in predictions(ranks, hardware)}
    picked = [final[plan_label(p)] for p in picked]
    order = sorted(range(len(picked)), key=lambda i: picked[i]["seconds"]["step"])
    picked, measured = [picked[i] for i in order], [measured[i] for i in order]
    rows = []
    for p, m in zip(picked, measured):
        memory_equal = all(p["memory"][c] == m["peak_bytes"][c] for c in STATE)
        rows.append({"plan": plan_label(p), "predicted": p["seconds"]["step"], "measured": fastest(m["steps"]),
                     "memory_equal": memory_equal,
                     "memory": {c: (p["memory"][c], m["peak_bytes"][c]) for c in STATE}})
        say(f"  {plan_label(p):48} predicted {1e3 * p['seconds']['step']:8.2f} ms, measured {1e3 * rows[-1]['measured']:8.2f} "
            f"ms, memory {'equal' if memory_equal else 'DIFFERENT'}")
    return rows


def summary(rows):
    errors = [abs(r["predicted"] - r["measured"]) / r["measured"] for r in rows]
    quickest = min(r["measured"] for r in rows)
    first = rows[0]  # the planner's first choice: plans run fastest predicted first
    return {"mape": statistics.fmean(errors), "spearman": spearman([r["predicted"] for r in rows],
                                                                    [r["measured"] for r in rows]),
            "first_over_fastest": first["measured"] / quickest,
            "memory_equal": sum(r["memory_equal"] for r in rows), "runs": len(rows)}


def mib(n):
    return f"{n / 2 ** 20:.2f}"


def markdown(results, quick, steps, rounds):
    lines = [f"The small GPT (vocabulary {MODEL['vocabulary']}, sequence {MODEL['sequence']}, hidden "
             f"{MODEL['hidden']}, {MODEL['heads']} heads of {MODEL['head_size']}, ffn {MODEL['ffn']}, "
             f"{MODEL['layers']} blocks), global batch {GLOBAL_BATCH}; each plan run {rounds} times, in rounds over "
             f"the plans, {steps} steps a run, measured as the median of its 3 fastest steps (the first two of each run "
             f"left out); {'quick' if quick else 'full'} calibration at each rank count, again before each "
             "round, each figure keeping its fastest; "
             "made by `tools/validate-planner" + (" --quick" if quick else "") + "`.", "",
             "| ranks | plans run | step-time error (MAPE) | Spearman | first choice / fastest measured | "
             "memory equal |", "|---|---|---|---|---|---|"]
    for ranks, rows in results.items():
        s = summary(rows)
        setting = "one per core" if ranks <= (os.cpu_count() or 1) else "oversubscribed"
        lines.append(f"| {ranks} ({setting}) | {s['runs']} | {100 * s['mape']:.1f}% | {s['spearman']:.2f} | "
                     f"{s['first_over_fastest']:.2f} | {s['memory_equal']} of {s['runs']} |")
    for ranks, rows in results.items():
        lines += ["", f"{ranks} ranks, fastest predicted first:", "",
                  "| plan | predicted ms | measured ms | error | parameters MiB | gradients MiB | optimizer MiB | activations MiB |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in rows:
            error = (r["predicted"] - r["measured"]) / r["measured"]
            memory = " | ".join(mib(r["memory"][c][1]) + ("" if r["memory"][c][0] == r["memory"][c][1]
                                                          else f" (predicted {mib(r['memory'][c][0])})")
                                for c in STATE)
            lines.append(f"| {r['plan']} | {1e3 * r['predicted']:.1f} | {1e3 * r['measured']:.1f} | "
                         f"{100 * error:+.0f}% | {memory} |")
    return "\n".join(lines) + "\n"


def update_docs(report):
    path = os.path.join(REPO, "docs", "07-choosing-a-strategy.md")
    with open(path) as f:
        text = f.read()
    begin, end = text.index(MARKERS[0]), text.index(MARKERS[1])
    with open(path, "w") as f:
        f.write(text[:begin + len(MARKERS[0])] + "\n" + report + text[end:])


def main():
    parser = argparse.ArgumentParser(description="The training planner against real runs.")
    parser.add_argument("--ranks", default="2 4 8")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", default=os.path.join(REPO, "build", "validate-planner"))
    parser.add_argument("--update-docs", action="store_true")
    o = parser.parse_args()
    os.makedirs(o.out, exist_ok=True)
    steps, rounds = (8, 4) if o.quick else (12, 6)
    results = {}
    for ranks in map(int, o.ranks.split()):
        count = {2: 12, 4: 8}.get(ranks, 6) // (2 if o.quick else 1)
        results[ranks] = validate(ranks, count, steps, rounds, o.quick, o.out)
    report = markdown(results, o.quick, steps, rounds)
    with open(os.path.join(o.out, "report.md"), "w") as f:
        f.write(report)
    print(report)
    if o.update_docs:
        update_docs(report)


if __name__ == "__main__":
    main()
