"""The training planner against real runs: tools/validate-planner's body (see its --help)."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.path.join(REPO, "build", "release")
MODEL_FILE = os.path.join(REPO, "tools", "planner", "models", "small-gpt.json")
with open(MODEL_FILE) as f:
    MODEL = json.load(f)
GLOBAL_BATCH = 16
BUCKET_KIB = 25 * 1024  # the planner's bucket size
STATE = ("parameters", "gradients", "optimizer_state", "activations")
QUIET = 1.3  # see comparable(); shardmesh-calibrate's the same (quiet_pace, include/shardmesh/parallel/machine_pace.hpp)
LEAST_QUIET = 3  # steps at the calibration's pace a plan needs to be measured
WAIT_SECONDS = 15  # the longest wait for the calibration's pace before a run or a calibration
CALIBRATE = os.path.join(BUILD, "tools", "planner", "shardmesh-calibrate")
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
    """train_gpt on plan p: its steps' (seconds, pace) after the first two, and its peak memory per category."""
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
    return {"steps": list(zip(measured["step_seconds"], measured["pace_seconds"]))[2:],
            "peak_bytes": measured["peak_bytes"]}


def at_pace(pace, reference):
    """Whether a measurement at `pace` met the machine as the calibration did: within QUIET of its pace."""
    return reference / QUIET <= pace <= QUIET * reference


def comparable(steps, reference):
    """The seconds of the steps that ran on the machine as calibration found it: their pace (train_gpt's
    fixed work around each step, the slowest rank's) within QUIET of the calibration's. This machine is
    shared, and runs a core up to twice as slow for seconds to minutes at a time; the pace tells those
    spells apart (measured here: within 1.25x of the fastest pace, or beyond 1.5x)."""
    return [seconds for seconds, pace in steps if at_pace(pace, reference)]


class machine:
    """A rank count's calibration, and its pace: the reference the steps are measured against."""

    def __init__(self, ranks, quick, hardware):
        self.ranks, self.quick, self.hardware, self.reference = ranks, quick, hardware, None

    def wait(self):
        """Until the pace is the calibration's, for at most WAIT_SECONDS: a spell lasts seconds to minutes."""
        deadline = time.monotonic() + WAIT_SECONDS
        while self.reference is not None and time.monotonic() < deadline:
            if at_pace(float(mpirun(self.ranks, CALIBRATE, "--pace").split()[-1]), self.reference):
                return
            time.sleep(1)

    def calibrate(self):
        """Calibrates into the hardware file, again keeping each figure's faster of this and the file's
        (and the faster pace), after waiting for the calibration's pace."""
        self.wait()
        again = self.reference is not None
        mpirun(self.ranks, CALIBRATE, *(["--quick"] if self.quick else []), "--out", self.hardware,
               *(["--faster-than", self.hardware] if again else []))
        with open(self.hardware) as f:
            self.reference = json.load(f)["pace_seconds"]


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
    here = machine(ranks, quick, hardware)
    say(f"{ranks} ranks: calibrating")
    here.calibrate()
    plans = predictions(ranks, hardware)
    picked = chosen(plans, count)
    say(f"{ranks} ranks: {len(plans)} feasible plans; running {len(picked)}")
    # Rounds over every plan, so that the machine's spells fall on each plan
    # alike; calibrated again before each round, so that calibration meets
    # the same spells, each figure keeping its fastest.
    measured = [{"steps": [], "peak_bytes": None} for _ in picked]

    def run(i, round_):
        here.wait()
        done = run_plan(ranks, picked[i], steps, os.path.join(out, f"run-{ranks}-{i}-{round_}.json"))
        measured[i]["steps"] += done["steps"]
        measured[i]["peak_bytes"] = measured[i]["peak_bytes"] or done["peak_bytes"]

    for round_ in range(rounds):
        if round_ > 0:
            here.calibrate()
        for i in range(len(picked)):
            run(i, round_)
    # Plans that have not yet met the machine as calibrated get up to as many runs again.
    for round_ in range(rounds, 2 * rounds):
        short = [i for i, m in enumerate(measured) if len(comparable(m["steps"], here.reference)) < LEAST_QUIET]
        if not short:
            break
        say(f"{ranks} ranks: {len(short)} plans short of {LEAST_QUIET} steps at the calibration's pace, "
            "running them again")
        for i in short:
            run(i, round_)
    # Predicted by the calibration of every round.
    final = {plan_label(p): p for p in predictions(ranks, hardware)}
    picked = [final[plan_label(p)] for p in picked]
    order = sorted(range(len(picked)), key=lambda i: picked[i]["seconds"]["step"])
    picked, measured = [picked[i] for i in order], [measured[i] for i in order]
    rows = []
    for p, m in zip(picked, measured):
        memory_equal = all(p["memory"][c] == m["peak_bytes"][c] for c in STATE)
        calm = comparable(m["steps"], here.reference)
        rows.append({"plan": plan_label(p), "predicted": p["seconds"]["step"],
                     "measured": statistics.median(calm) if len(calm) >= LEAST_QUIET else None,
                     "at_pace": (len(calm), len(m["steps"])), "memory_equal": memory_equal,
                     "memory": {c: (p["memory"][c], m["peak_bytes"][c]) for c in STATE}})
        seen = f"{1e3 * rows[-1]['measured']:8.2f} ms" if rows[-1]["measured"] else "not measured"
        say(f"  {plan_label(p):48} predicted {1e3 * p['seconds']['step']:8.2f} ms, measured {seen} "
            f"({len(calm)} of {len(m['steps'])} steps at the calibration's pace), memory {'equal' if memory_equal else 'DIFFERENT'}")
    return rows


def summary(rows):
    """Step-time figures over the plans measured on the machine left alone (None: fewer than 2); memory over
    every plan run."""
    timed = [r for r in rows if r["measured"] is not None]
    out = {"memory_equal": sum(r["memory_equal"] for r in rows), "runs": len(rows), "timed": len(timed),
           "mape": None, "spearman": None, "first_over_fastest": None}
    if len(timed) >= 2:
        out["mape"] = statistics.fmean(abs(r["predicted"] - r["measured"]) / r["measured"] for r in timed)
        out["spearman"] = spearman([r["predicted"] for r in timed], [r["measured"] for r in timed])
        # The planner's first choice of those measured: plans run fastest predicted first.
        out["first_over_fastest"] = timed[0]["measured"] / min(r["measured"] for r in timed)
    return out


def mib(n):
    return f"{n / 2 ** 20:.2f}"


def markdown(results, quick, steps, rounds):
    lines = [f"The small GPT (vocabulary {MODEL['vocabulary']}, sequence {MODEL['sequence']}, hidden "
             f"{MODEL['hidden']}, {MODEL['heads']} heads of {MODEL['head_size']}, ffn {MODEL['ffn']}, "
             f"{MODEL['layers']} blocks), global batch {GLOBAL_BATCH}; each plan run {rounds} times, in rounds over "
             f"the plans, {steps} steps a run (the first two left out), measured as the median of its steps at the "
             f"calibration's pace: those whose pace (train_gpt's fixed work around each step) is within {QUIET}x of the "
             f"pace the calibration's figures were measured at; each run and calibration waits up to {WAIT_SECONDS} s "
             f"for that pace; a plan with fewer than {LEAST_QUIET} such steps runs again, up to {rounds} more "
             f"times, or is reported unmeasured; {'quick' if quick else 'full'} calibration at each rank count, again before each "
             "round, each figure keeping its fastest; "
             "made by `tools/validate-planner" + (" --quick" if quick else "") + "`.", "",
             "| ranks | plans run | plans timed | step-time error (MAPE) | Spearman | first choice / fastest measured "
             "| memory equal |", "|---|---|---|---|---|---|---|"]
    for ranks, rows in results.items():
        s = summary(rows)
        setting = "one per core" if ranks <= (os.cpu_count() or 1) else "oversubscribed"
        figures = (f"{100 * s['mape']:.1f}% | {s['spearman']:.2f} | {s['first_over_fastest']:.2f}"
                   if s["mape"] is not None else "- | - | -")
        lines.append(f"| {ranks} ({setting}) | {s['runs']} | {s['timed']} | {figures} | "
                     f"{s['memory_equal']} of {s['runs']} |")
    for ranks, rows in results.items():
        lines += ["", f"{ranks} ranks, fastest predicted first:", "",
                  "| plan | predicted ms | measured ms | error | steps at pace | parameters MiB | gradients MiB | optimizer MiB "
                  "| activations MiB |", "|---|---|---|---|---|---|---|---|---|"]
        for r in rows:
            timed = r["measured"] is not None
            memory = " | ".join(mib(r["memory"][c][1]) + ("" if r["memory"][c][0] == r["memory"][c][1]
                                                          else f" (predicted {mib(r['memory'][c][0])})")
                                for c in STATE)
            measured = f"{1e3 * r['measured']:.1f}" if timed else "unmeasured"
            error = f"{100 * (r['predicted'] - r['measured']) / r['measured']:+.0f}%" if timed else ""
            lines.append(f"| {r['plan']} | {1e3 * r['predicted']:.1f} | {measured} | {error} | "
                         f"{r['at_pace'][0]} of {r['at_pace'][1]} | {memory} |")
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
