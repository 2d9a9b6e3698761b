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
QUIET = 1.3  # see comparable(); shardmesh-calibrate's the same (quiet_pace, include/shardmesh/train/machine_pace.hpp)
LEAST_QUIET = 3  # steps at the calibration's pace a run needs to be measured
WAIT_SECONDS = 15  # the longest wait for the calibration's pace before a run
CALIBRATE = os.path.join(BUILD, "tools", "planner", "shardmesh-calibrate")
MARKERS = ("<!-- planner validation: begin -->", "<!-- planner validation: end -->")


def say(what):
    print(f"[validate-planner] {what}", file=sys.stderr, flush=True)


def mpirun(ranks, program, *args, timeout=600):
    command = [os.path.join(REPO, "tools", "mpirun"), "--bind", str(ranks), program, *map(str, args)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stdout}\n{done.stderr}")
    return done.stdout


def plan_label(p):
    label = f"dp={p['dp']} tp={p['tp']} pp={p['pp']} zero={p['zero']} b={p['micro_batch']} m={p['micro_batches']}"
    if p["pp"] > 1:
        label += f" {p['schedule']}" + (f" v={p['virtual_stages']}" if p["virtual_stages"] > 1 else "")
    return label


def chosen(plans, count):
    """The planner's top third of `count` and a spread of the rest over their predicted step times (the targets
    evenly apart from the top's slowest to the slowest plan, each the nearest plan not yet taken): plans the model
    sets far enough apart for the ranking to be tested beyond the runs' noise. Fastest predicted first."""
    if len(plans) <= count:
        return plans
    top = max(count // 3, 1)
    picked, rest = plans[:top], plans[top:]
    low, high = picked[-1]["seconds"]["step"], rest[-1]["seconds"]["step"]
    for i in range(1, count - top + 1):
        target = low + i * (high - low) / (count - top)
        nearest = min(rest, key=lambda p: abs(p["seconds"]["step"] - target))
        picked.append(nearest)
        rest.remove(nearest)
    return sorted(picked, key=lambda p: p["seconds"]["step"])


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
    """A rank count's calibrations, one a round, and the pace of the latest: what its runs are compared with."""

    def __init__(self, ranks, quick, out):
        self.ranks, self.quick, self.out, self.reference = ranks, quick, out, None

    def wait(self):
        """Until the pace is the calibration's, for at most WAIT_SECONDS: a spell lasts seconds to minutes."""
        deadline = time.monotonic() + WAIT_SECONDS
        while time.monotonic() < deadline:
            if at_pace(float(mpirun(self.ranks, CALIBRATE, "--pace").split()[-1]), self.reference):
                return
            time.sleep(1)

    def calibrate(self, round_):
        """A fresh calibration into the round's hardware file; the planner's predictions by it."""
        hardware = os.path.join(self.out, f"hardware-{self.ranks}-{round_}.json")
        mpirun(self.ranks, CALIBRATE, *(["--quick"] if self.quick else []), "--out", hardware)
        with open(hardware) as f:
            self.reference = json.load(f)["pace_seconds"]
        return {plan_label(p): p for p in predictions(self.ranks, hardware)}


def predictions(ranks, hardware):
    """Every feasible plan, fastest predicted first."""
    listing = subprocess.run(
        [os.path.join(BUILD, "tools", "planner", "shardmesh-plan-training"), "--model", MODEL_FILE, "--global-batch",
         str(GLOBAL_BATCH), "--ranks", str(ranks), "--hardware", hardware, "--memory", "0", "--json"],
        capture_output=True, text=True, check=True).stdout
    plans = [p for p in json.loads(listing)["plans"] if "seconds" in p]
    return sorted(plans, key=lambda p: p["seconds"]["step"])


def validate(ranks, count, steps, rounds, quick, out):
    here = machine(ranks, quick, out)
    say(f"{ranks} ranks: calibrating")
    plans = here.calibrate(0)
    picked = [plan_label(p) for p in chosen(list(plans.values()), count)]
    say(f"{ranks} ranks: {len(plans)} feasible plans; running {len(picked)}")
    # Rounds over every plan, each after a fresh calibration, each run
    # compared with its own round's predictions: the machine's spells last
    # minutes and change its speed by up to 2x, so a run is compared with
    # the machine as it was measured minutes, not an hour, before.
    paired = {label: [] for label in picked}  # per round measured: (predicted, measured, steps at pace, steps)
    peak = {}

    def run(label, round_):
        say(f"{ranks} ranks, round {round_ + 1}: plan {picked.index(label) + 1} of {len(picked)}, {label}")
        here.wait()
        p = plans[label]
        done = run_plan(ranks, p, steps, os.path.join(out, f"run-{ranks}-{picked.index(label)}-{round_}.json"))
        calm = comparable(done["steps"], here.reference)
        paired[label].append((p["seconds"]["step"], statistics.median(calm) if len(calm) >= LEAST_QUIET else None,
                              len(calm), len(done["steps"])))
        peak.setdefault(label, done["peak_bytes"])

    def measured_rounds(label):
        return [r for r in paired[label] if r[1] is not None]

    for round_ in range(rounds):
        if round_ > 0:
            plans = here.calibrate(round_)
        for label in picked:
            run(label, round_)
    # Plans short of a measured round in most rounds get up to as many rounds more.
    for round_ in range(rounds, 2 * rounds):
        short = [label for label in picked if len(measured_rounds(label)) < (rounds + 1) // 2]
        if not short:
            break
        say(f"{ranks} ranks: {len(short)} plans measured at the calibration's pace in fewer than half the rounds, "
            "running them again")
        plans = here.calibrate(round_)
        for label in short:
            run(label, round_)
    with open(os.path.join(out, f"rounds-{ranks}.json"), "w") as f:
        json.dump({label: [dict(zip(("predicted", "measured", "steps_at_pace", "steps"), r)) for r in rounds_]
                   for label, rounds_ in paired.items()}, f, indent=1)
    rows = []
    for label in sorted(picked, key=lambda label: statistics.median(r[0] for r in paired[label])):
        p, m, timed = plans[label], peak[label], measured_rounds(label)
        memory_equal = all(p["memory"][c] == m[c] for c in STATE)
        rows.append({"plan": label, "predicted": statistics.median(r[0] for r in paired[label]),
                     "measured": statistics.median(r[1] for r in timed) if timed else None,
                     "error": statistics.median(r[0] / r[1] - 1 for r in timed) if timed else None,
                     "rounds": (len(timed), len(paired[label])), "memory_equal": memory_equal,
                     "memory": {c: (p["memory"][c], m[c]) for c in STATE}})
        seen = (f"{1e3 * rows[-1]['measured']:8.2f} ms, error {100 * rows[-1]['error']:+.1f}%" if timed
                else "not measured")
        say(f"  {label:48} predicted {1e3 * rows[-1]['predicted']:8.2f} ms, measured {seen} "
            f"({len(timed)} of {len(paired[label])} rounds at the calibration's pace), "
            f"memory {'equal' if memory_equal else 'DIFFERENT'}")
    return rows


def summary(rows):
    """Step-time figures over the plans measured at their calibrations' pace (None: fewer than 2); memory over
    every plan run. The error is each plan's own, paired with its round's calibration; the ranking and the
    first choice compare the plans' median predicted and measured times."""
    timed = [r for r in rows if r["measured"] is not None]
    out = {"memory_equal": sum(r["memory_equal"] for r in rows), "runs": len(rows), "timed": len(timed),
           "mape": None, "spearman": None, "first_over_fastest": None}
    if len(timed) >= 2:
        out["mape"] = statistics.fmean(abs(r["error"]) for r in timed)
        out["spearman"] = spearman([r["predicted"] for r in timed], [r["measured"] for r in timed])
        # The planner's first choice of those measured: plans run fastest predicted first.
        out["first_over_fastest"] = timed[0]["measured"] / min(r["measured"] for r in timed)
    return out


def mib(n):
    return f"{n / 2 ** 20:.2f}"


def markdown(results, quick, steps, rounds):
    lines = [f"The small GPT (vocabulary {MODEL['vocabulary']}, sequence {MODEL['sequence']}, hidden "
             f"{MODEL['hidden']}, {MODEL['heads']} heads of {MODEL['head_size']}, ffn {MODEL['ffn']}, "
             f"{MODEL['layers']} blocks), global batch {GLOBAL_BATCH}; the planner's top plans and a spread of the "
             f"others over their predicted times; {rounds} rounds over the plans, each after a fresh "
             f"{'quick' if quick else 'full'} calibration, {steps} steps a run (the first two left out); a run is "
             f"measured as the median of its steps at its calibration's pace (train_gpt's fixed work around each "
             f"step within {QUIET}x of the pace the calibration's figures were measured at; each run waits up to "
             f"{WAIT_SECONDS} s for it), and if at least {LEAST_QUIET} are; a plan's error is the median over its "
             f"measured rounds of the round's predicted over measured, its predicted and measured times the "
             f"medians; a plan measured in fewer than half the rounds runs in up to {rounds} rounds more; made by "
             "`tools/validate-planner" + (" --quick" if quick else "") + "` (ranks bound to cores in blocks).", "",
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
                  "| plan | predicted ms | measured ms | error | rounds at pace | parameters MiB | gradients MiB "
                  "| optimizer MiB | activations MiB |", "|---|---|---|---|---|---|---|---|---|"]
        for r in rows:
            timed = r["measured"] is not None
            memory = " | ".join(mib(r["memory"][c][1]) + ("" if r["memory"][c][0] == r["memory"][c][1]
                                                          else f" (predicted {mib(r['memory'][c][0])})")
                                for c in STATE)
            measured = f"{1e3 * r['measured']:.1f}" if timed else "unmeasured"
            error = f"{100 * r['error']:+.0f}%" if timed else ""
            lines.append(f"| {r['plan']} | {1e3 * r['predicted']:.1f} | {measured} | {error} | "
                         f"{r['rounds'][0]} of {r['rounds'][1]} | {memory} |")
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
