"""Checks of the training planner's commands, run as a user runs them.

    python3 planner_test.py calibrate DIR MPIEXEC... CALIBRATE [POSTFLAGS...]
    python3 planner_test.py unbound DIR MPIEXEC... CALIBRATE [POSTFLAGS...]
    python3 planner_test.py described|described_cluster PLAN_TRAINING MODELS_DIR HARDWARE_DIR
    python3 planner_test.py memory PLAN_TRAINING MODEL HARDWARE DIR MPIEXEC... TRAIN_GPT [POSTFLAGS...]
    python3 planner_test.py bad_models PLAN_TRAINING MODEL HARDWARE DIR

calibrate: shardmesh-calibrate --quick on the ranks of the command writes a
hardware file with every figure the planner reads, and run again with
--faster-than that file keeps each figure's faster and the fastest pace, and
--pace prints the machine's pace; it warns where ranks share cores unbound
(unbound: the same on 4 ranks, oversubscribed here). described: the 8-GPU node
file ranks plans of a 350M-parameter GPT, labelled as predictions;
described_cluster (the full suite's): the 64-node cluster file, the same
(its 512 ranks within the test's timeout, which
scales with the build: no wall-clock check, which the sanitizers' build
would fail). memory: examples/train_gpt
runs a spread of plans (every ZeRO stage, tp, pp with every schedule, an
uneven batch) and its peak parameters, gradients, optimizer state
and activations per rank equal the planner's prediction, byte for byte, and
its report holds the machine's pace around each step. bad_models: a model
file with a size missing, 0, negative or not a number, without an
architecture or with one the planner does not know, and a Llama-style
model's key/value heads, head size, rope base or tied embeddings that do
not fit, is refused with a message naming the field, and nothing is
planned. The described machines also rank a 1B Llama-style model's plans;
the memory check runs for each model file given.
"""
import itertools
import json
import os
import subprocess
import sys

STATE = ("parameters", "gradients", "optimizer_state", "activations")
NODE = (("a100-node-8.json", 8),)
CLUSTER = (("a100-cluster-64x8.json", 512),)
KERNELS = {"add", "fill", "gelu_forward", "gelu_backward", "softmax_forward", "softmax_backward",
           "layer_norm_forward", "layer_norm_backward", "cross_entropy_forward", "cross_entropy_backward",
           "embedding_forward", "embedding_backward", "adamw"}


def run(command, timeout=240):
    done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=timeout)
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)}: exit {done.returncode}\n{done.stdout}\n{done.stderr}")
    return done


def check(condition, what):
    if not condition:
        sys.exit(f"FAILED: {what}")


def check_placement_warning(h, stderr):
    """The build's launcher binds no rank where ranks outnumber cores (Open MPI oversubscribed, MPICH by
    default): calibration warns exactly there, since the planner assumes ranks bound in blocks."""
    check(("without being bound" in stderr) == (h["cores"] < h["ranks"]),
          f"a warning on {h['ranks']} unbound ranks exactly where they share {h['cores']} cores")


def unbound(out_dir, command):
    path = os.path.join(out_dir, "planner-test-hardware-unbound.json")
    first = run([*command, "--quick", "--out", path])
    with open(path) as f:
        check_placement_warning(json.load(f), first.stderr)


def calibrate(out_dir, command):
    path = os.path.join(out_dir, "planner-test-hardware.json")
    first = run([*command, "--quick", "--out", path])
    with open(path) as f:
        h = json.load(f)
    check(h["measured"] is True and h["ranks"] == 2, "measured on the 2 ranks it ran on")
    check_placement_warning(h, first.stderr)
    check(len(h["gemm"]) >= 100 and all(g["flops_per_second"] > 0 for g in h["gemm"]), "GEMM rates by shape")
    check({k["kind"] for k in h["kernels"]} == KERNELS, "every kernel the model declares")
    check(all(k["alpha_seconds"] >= 0 and k["beta_seconds_per_element"] > 0 for k in h["kernels"]),
          "kernel fits: alpha >= 0, beta > 0")
    kinds = {(c["kind"], c["group"]) for c in h["collectives"]}
    check(kinds == {(k, 2) for k in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "point_to_point")},
          "every collective on groups of 2")
    deferred = {c["kind"] for c in h["collectives"] if c.get("deferred")}
    check(deferred == {"all_reduce", "all_gather", "reduce_scatter"},
          "deferred (posted, then waited for) too, the collectives a step defers")
    check(h["elementwise_bytes_per_second"] > 0 and h["memory_per_rank"] > 0, "bandwidth and memory")
    overheads = h["stage_overheads"]
    check(set(overheads) == {"embedding", "block", "head", "loss"} and
          all(o["forward_seconds"] >= 0 and o["backward_seconds"] >= 0 for o in overheads.values()),
          "the library's own cost of every kind of stage, never negative")
    check(overheads["block"]["forward_seconds"] + overheads["block"]["backward_seconds"] > 0,
          "a block's ops cost something beyond their arithmetic")
    check(h["redistribution_overhead_seconds"] >= 0 and h["sync_overhead_seconds"] >= 0,
          "a redistribution's own cost, and a collective's wait among computing ranks")
    check(0 < h["pace_seconds"] < 1, "the fastest pace seen while calibrating")
    # Again, keeping each figure's faster of the two: no rate falls, no cost rises.
    again = os.path.join(out_dir, "planner-test-hardware-again.json")
    run([*command, "--quick", "--out", again, "--faster-than", path])
    with open(again) as f:
        h2 = json.load(f)
    def shape(g):
        return g["m"], g["n"], g["k"], g.get("precision", "fp32")
    rate = {shape(g): g["flops_per_second"] for g in h["gemm"]}
    check(all(g["flops_per_second"] >= rate[shape(g)] for g in h2["gemm"]),
          "--faster-than: every GEMM rate at least the earlier file's")
    check(h2["redistribution_overhead_seconds"] <= h["redistribution_overhead_seconds"] and
          h2["sync_overhead_seconds"] <= h["sync_overhead_seconds"] and
          all(h2["stage_overheads"][k][p] <= h["stage_overheads"][k][p]
              for k in overheads for p in ("forward_seconds", "backward_seconds")),
          "--faster-than: no overhead above the earlier file's")
    check(h2["elementwise_bytes_per_second"] >= h["elementwise_bytes_per_second"],
          "--faster-than: the bandwidth at least the earlier file's")
    check(0 < h2["pace_seconds"] <= h["pace_seconds"], "--faster-than: the fastest pace of both")
    pace = float(run([*command, "--pace"]).stdout.split()[-1])
    check(0 < pace < 1, f"--pace: the seconds of a fixed work of about half a millisecond, not {pace}")
    bad = subprocess.run([*command, "--quick", "--out", again, "--faster-than", os.path.join(out_dir, "none.json")],
                         capture_output=True, text=True, timeout=120)
    check(bad.returncode != 0 and "cannot be read" in bad.stderr, "--faster-than a missing file: a clear error")


def described(plan_training, models, hardware, machines):
    for (hardware_file, ranks), model in itertools.product(machines, ("gpt-350m.json", "llama-1b.json")):
        # bf16 given (the search over every precision takes three times as long): every plan in it. The table
        # once, on the node (the search it prints is the JSON's).
        if ranks == 8:
            out = run([plan_training, "--model", os.path.join(models, model), "--global-batch", "512",
                       "--ranks", str(ranks), "--hardware", os.path.join(hardware, hardware_file), "--top", "5",
                       "--precision", "bf16"]).stdout
            check("PREDICTION" in out and "described, not measured" in out, f"{hardware_file}: labelled a prediction")
        doc = json.loads(run([plan_training, "--model", os.path.join(models, model), "--global-batch",
                              "512", "--ranks", str(ranks), "--hardware", os.path.join(hardware, hardware_file),
                              "--json", "--precision", "bf16"]).stdout)
        feasible = [p for p in doc["plans"] if "seconds" in p]
        check(all(p["precision"] == "bf16" for p in doc["plans"]), f"{hardware_file}: --precision bf16 holds")
        check(all(0 < p["model_flops_utilisation"] < 1 for p in feasible), f"{hardware_file}: an MFU for each plan")
        check(doc["prediction_only"] and feasible, f"{hardware_file}: plans, as predictions")
        with open(os.path.join(models, model)) as f:
            check(doc["model"]["architecture"] == json.load(f)["architecture"], f"{model}: its architecture echoed")
        check(all(p["dp"] * p["cp"] * p["ep"] * p["tp"] * p["pp"] == ranks for p in doc["plans"]),
              f"{hardware_file}: every plan fills the ranks")
        # Context parallelism searched only where asked (--max-cp); no ep without experts.
        check(all(p["cp"] == 1 and p["ep"] == 1 for p in doc["plans"]), f"{model}: cp and ep 1 unless asked")
        steps = [p["seconds"]["step"] for p in feasible]
        check(steps == sorted(steps), f"{hardware_file}: fastest first")
    if machines != NODE:
        return

    # A Llama with 4 experts in every other block: ep searched where it divides them, and cp up to --max-cp.
    doc = json.loads(run([plan_training, "--model", os.path.join(models, "small-llama-experts.json"),
                          "--global-batch", "64", "--ranks", "8", "--hardware",
                          os.path.join(hardware, "a100-node-8.json"), "--json", "--precision", "bf16",
                          "--max-cp", "4"]).stdout)
    eps, cps = {p["ep"] for p in doc["plans"]}, {p["cp"] for p in doc["plans"]}
    check(eps == {1, 2, 4}, f"experts: ep in {{1, 2, 4}} for 4 experts on 8 ranks, got {sorted(eps)}")
    check(cps == {1, 2, 4}, f"experts: cp in {{1, 2, 4}} with --max-cp 4, got {sorted(cps)}")
    check(doc["model"]["experts"] == 4, "experts: the model's experts echoed")


def memory(plan_training, model, hardware, out_dir, command):
    with open(model) as f:
        m = json.load(f)
    doc = json.loads(run([plan_training, "--model", model, "--global-batch", "8", "--ranks", "2", "--hardware",
                          hardware, "--memory", "0", "--json"]).stdout)
    plans = {(p["dp"], p["tp"], p["pp"], p["zero"], p["micro_batch"], p["micro_batches"], p["schedule"],
              p["precision"], p["recompute"]): p for p in doc["plans"]}
    spread = [(2, 1, 1, z, 2, 2, "1f1b", "fp32", "none") for z in range(4)] + [
        (1, 2, 1, 0, 4, 2, "1f1b", "fp32", "none"), (1, 1, 2, 0, 2, 4, "zb-h1", "fp32", "none"),
        (1, 1, 2, 0, 2, 4, "gpipe", "fp32", "none"), (1, 1, 2, 0, 1, 8, "interleaved", "fp32", "none"),
        # Other precisions and recomputations, with ZeRO-3's gathers and a pipeline.
        (2, 1, 1, 3, 2, 2, "1f1b", "bf16", "selective"), (1, 1, 2, 0, 2, 4, "1f1b", "fp16", "full"),
        (1, 2, 1, 0, 4, 2, "1f1b", "bf16", "full")]
    for key in spread:
        check(key in plans, f"the planner lists {key}")
        p = plans[key]
        report = os.path.join(out_dir, "planner-test-run.json")
        args = ["--dp", p["dp"], "--tp", p["tp"], "--pp", p["pp"], "--zero", p["zero"], "--micro-batch",
                p["micro_batch"], "--accumulation", p["micro_batches"], "--global-batch", 8, "--steps", 2,
                "--bucket-kib", 25 * 1024, "--quiet", "--report", report]
        if p["pp"] > 1:
            args += ["--schedule", p["schedule"], "--virtual", p["virtual_stages"]]
        args += ["--precision", p["precision"], "--recompute", p["recompute"]]
        args += ["--model", m["architecture"]]
        for key_ in ("vocabulary", "sequence", "hidden", "heads", "head_size", "ffn", "layers", "kv_heads", "rope_base"):
            if key_ in m:
                args += ["--" + key_.replace("_", "-"), m[key_]]
        run([*command, *map(str, args)])
        with open(report) as f:
            measured = json.load(f)
        check(len(measured["step_seconds"]) == 2 and all(s > 0 for s in measured["step_seconds"]), "step times")
        check(len(measured["pace_seconds"]) == 2 and all(0 < s < 1 for s in measured["pace_seconds"]),
              "the machine's pace around each step")
        for c in STATE:
            check(p["memory"][c] == measured["peak_bytes"][c],
                  f"{key} {c}: predicted {p['memory'][c]} B, the ledger's peak {measured['peak_bytes'][c]} B")


def bad_models(plan_training, model, hardware, out_dir):
    with open(model) as f:
        good = json.load(f)
    cases = [("heads", None, '"heads" is missing'), ("heads", 0, '"heads" is 0; it must be at least 1'),
             ("layers", -2, '"layers" is -2, not a whole number'), ("ffn", "wide", '"ffn" is "wide", not a whole number'),
             ("head_size", 1.5, '"head_size" is 1.5, not a whole number'),
             ("architecture", None, '"architecture" is missing'),
             ("architecture", "mamba", 'the architecture "mamba" is not one the planner knows'),
             ("sequence_parallel", "yes", '"sequence_parallel" is "yes", not true or false')]
    if good["architecture"] == "llama":
        cases += [("kv_heads", None, '"kv_heads" is missing'), ("kv_heads", 0, '"kv_heads" is 0'),
                  ("kv_heads", 3, "kv_heads = 3 does not divide heads = 4"),
                  ("head_size", 31, "head_size = 31 is odd: rotary embeddings rotate pairs"),
                  ("rope_base", 0.5, "rope_base = 0.500000 is not above 1"),
                  ("rope_base", "big", '"rope_base" is "big", not a number'),
                  ("tied_embeddings", True, '"tied_embeddings" is true; the Llama-style model\'s head is untied'),
                  ("context", "ulysses", '"context" is "ulysses", not one of "ring", "all-to-all"'),
                  ("experts", 0, '"experts" is 0; it must be at least 1'),
                  ("top_k", 1.5, '"top_k" is 1.5, not a whole number')]
    # Named after the model: the GPT's and the Llama's runs may write at once.
    path = os.path.join(out_dir, "bad-" + os.path.basename(model))
    for field, value, message in cases:
        m = dict(good)
        if value is None:
            del m[field]
        else:
            m[field] = value
        with open(path, "w") as f:
            json.dump(m, f)
        r = subprocess.run([plan_training, "--model", path, "--global-batch", "8", "--ranks", "2", "--hardware",
                            hardware], capture_output=True, text=True, timeout=60)
        check(r.returncode != 0 and message in r.stderr and not r.stdout,
              f"{field} = {value!r}: refused with '{message}', got {r.returncode}: {r.stderr.strip()}")


def main():
    what = sys.argv[1]
    if what == "calibrate":
        calibrate(sys.argv[2], sys.argv[3:])
    elif what == "unbound":
        unbound(sys.argv[2], sys.argv[3:])
    elif what in ("described", "described_cluster"):
        described(*sys.argv[2:5], NODE if what == "described" else CLUSTER)
    elif what == "memory":
        memory(*sys.argv[2:6], sys.argv[6:])
    elif what == "bad_models":
        bad_models(*sys.argv[2:6])
    else:
        sys.exit(f"unknown check {what}")


if __name__ == "__main__":
    main()
