"""Training saved under one parallel configuration, resumed under others.

    python3 resume_test.py DIR TRAIN_GPT MPIEXEC NUMPROC_FLAG [PREFLAGS...]

Each case trains examples/train_gpt (the GPT, or the Llama-style model, with
context parallelism or experts) for
6 steps and saves its state, then
resumes it to step 10 under another configuration and rank count, and
trains that configuration uninterrupted for 10 steps alongside. The resumed
run checks itself that the state it read equals the saved one bit for bit
(a digest of every parameter and optimizer state tensor, gathered: exit
status and message); here its losses for steps 7 to 10 must equal the
uninterrupted run's within the equivalence tolerance of train_gpt --check
(1e-3 relative: the same float model with sums in other orders). A resume
that disagrees with the checkpoint's options is refused.
"""
import json
import os
import shutil
import subprocess
import sys

TOLERANCE = 1e-3
COMMON = ["--global-batch", "8", "--quiet"]
LLAMA = ["--model", "llama", "--kv-heads", "1"]
EXPERTS = ["--model", "llama", "--experts", "4", "--top-k", "2"]

# (saved on, resumed on): each as (ranks, options).
CASES = [
    ((4, ["--dp", "2", "--tp", "2", "--zero", "3"]), (2, ["--dp", "2", "--zero", "1", "--check"])),
    ((4, ["--dp", "2", "--tp", "2", "--zero", "3"]), (6, ["--dp", "3", "--tp", "2", "--zero", "2"])),
    ((4, ["--dp", "2", "--tp", "2", "--zero", "3"]),
     (4, ["--dp", "2", "--pp", "2", "--zero", "3", "--schedule", "zb-h1", "--microbatches", "2"])),
    ((4, ["--dp", "2", "--pp", "2", "--zero", "2", "--microbatches", "2"]), (2, ["--tp", "2"])),
    # The Llama-style model with one key/value head (held whole by both tp ranks), resumed as a pipeline.
    ((4, [*LLAMA, "--dp", "2", "--tp", "2", "--zero", "3"]), (2, [*LLAMA, "--pp", "2", "--microbatches", "2"])),
    # Experts saved split over ep = 2 (ZeRO-3 beside dp), resumed over ep = 4; and checked against one rank.
    ((4, [*EXPERTS, "--dp", "2", "--ep", "2", "--zero", "3"]), (4, [*EXPERTS, "--ep", "4", "--zero", "2"])),
    ((4, [*EXPERTS, "--ep", "4"]), (2, [*EXPERTS, "--dp", "2", "--check"])),
    # Context parallelism: saved on cp = 4 (ring), resumed on cp = 2 (all-to-all) beside tp.
    ((4, [*LLAMA, "--cp", "4", "--zero", "1"]), (4, [*LLAMA, "--cp", "2", "--cp-form", "all-to-all", "--tp", "2"])),
]


def main():
    out_dir, train_gpt, mpiexec, numproc, *preflags = sys.argv[1:]

    def run(ranks, options, expect_ok=True):
        command = [mpiexec, numproc, str(ranks), *preflags, train_gpt, *COMMON, *options]
        done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=240)
        if (done.returncode == 0) != expect_ok:
            sys.exit(f"{' '.join(command)}: exit {done.returncode}\n{done.stdout}\n{done.stderr}")
        return done.stdout + done.stderr

    def losses(report):
        with open(report) as f:
            r = json.load(f)
        return r["first_step"], r["losses"]

    for i, ((ranks_a, saved_on), (ranks_b, resumed_on)) in enumerate(CASES):
        state = os.path.join(out_dir, f"resume-{i}")
        shutil.rmtree(state, ignore_errors=True)
        run(ranks_a, [*saved_on, "--steps", "6", "--save", state, "--every", "3"])
        resumed = os.path.join(out_dir, f"resume-{i}-resumed.json")
        whole = os.path.join(out_dir, f"resume-{i}-whole.json")
        out = run(ranks_b, [*resumed_on, "--steps", "10", "--resume", state, "--report", resumed])
        if "the state equal bit for bit to the saved one" not in out:
            sys.exit(f"case {i}: the resumed run did not confirm its state:\n{out}")
        run(ranks_b, [*[o for o in resumed_on if o != "--check"], "--steps", "10", "--report", whole])
        first, continued = losses(resumed)
        _, uninterrupted = losses(whole)
        if first != 6 or len(continued) != 4:
            sys.exit(f"case {i}: resumed at step {first} with {len(continued)} steps, not at 6 with 4")
        for step, (a, b) in enumerate(zip(continued, uninterrupted[6:]), start=7):
            if abs(a - b) > TOLERANCE * abs(b):
                sys.exit(f"case {i}: step {step}: resumed loss {a} vs uninterrupted {b}")
        print(f"case {i}: saved on {ranks_a} ranks {' '.join(saved_on)}, resumed on {ranks_b} ranks "
              f"{' '.join(resumed_on)}: state bit for bit, losses of steps 7-10 within {TOLERANCE:g}")

    # Options that define the run come from the checkpoint; a different one is refused.
    out = run(2, ["--dp", "2", "--hidden", "64", "--steps", "8", "--resume", os.path.join(out_dir, "resume-0")],
              expect_ok=False)
    if "--hidden 64 differs from the checkpoint's 32" not in out:
        sys.exit(f"a resume with another --hidden was not refused as expected:\n{out}")
    print("a resume with another --hidden is refused")


if __name__ == "__main__":
    main()
