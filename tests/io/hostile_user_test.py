"""The training command and its checkpoints against a hostile user, on 2 ranks.

    python3 hostile_user_test.py DIR TRAIN_GPT MPIEXEC NUMPROC_FLAG [PREFLAGS...]

Each case is something a user did that once went wrong:
- bad sizes on the command line: refused before any work, the flag named,
  the message printed once (not once per rank, not prefixed twice);
- a save folder that cannot take checkpoints: refused before step 1;
- the initial state (--save-initial): the same under every layout, and a
  run resumed from it continues as the uninterrupted run;
- the file describes itself (read with h5py): named optimizer slots, the
  optimizer's hyperparameters, numbers stored as numbers;
- attributes rewritten with h5py in both of its string forms (null-padded
  bytes, variable-length str): the checkpoint still resumes bit for bit;
- a stored configuration, step or seed changed: the resume is refused;
- a folder held by a live job: another job's resume is refused; after the
  launcher of a saving job is killed, no save completes, and once its
  ranks are gone the folder is taken over.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import h5py
import numpy as np

COMMON = ["--global-batch", "8", "--quiet", "--dp", "2"]


def main():
    out_dir, train_gpt, mpiexec, numproc, *preflags = sys.argv[1:]
    shutil.rmtree(out_dir, ignore_errors=True)
    os.makedirs(out_dir)
    launch = [mpiexec, numproc, "2", *preflags, train_gpt]

    def run(options, expect_ok=True):
        done = subprocess.run([*launch, *options], capture_output=True, text=True, check=False, timeout=240)
        output = done.stdout + done.stderr
        if (done.returncode == 0) != expect_ok:
            sys.exit(f"train_gpt {' '.join(options)}: exit {done.returncode}\n{output}")
        return output

    def refused(options, message):
        output = run(options, expect_ok=False)
        if output.count(message) != 1 or "train_gpt: train_gpt:" in output or "step   1/" in output:
            sys.exit(f"train_gpt {' '.join(options)}: expected {message!r} once, before step 1\n{output}")

    # Bad sizes: the flag named, once.
    for flags, message in [(["--vocabulary", "0"], "train_gpt: --vocabulary is 0"),
                           (["--hidden", "0"], "train_gpt: --hidden is 0"),
                           (["--heads", "0"], "train_gpt: --heads is 0"),
                           (["--layers", "0"], "train_gpt: --layers is 0"),
                           (["--tp", "0"], "train_gpt: --tp is 0"),
                           (["--lr", "0"], "train_gpt: --lr is 0"),
                           (["--model", "llama", "--kv-heads", "3"], "train_gpt: --kv-heads 3 does not divide --heads 4"),
                           (["--bogus"], "The following argument was not expected: --bogus")]:
        refused([*COMMON, *flags], message)

    # Save folders that cannot take checkpoints.
    a_file = os.path.join(out_dir, "a-file")
    open(a_file, "w").close()
    refused([*COMMON, "--save", a_file], "is not a folder")
    taken = os.path.join(out_dir, "state-is-a-folder")
    os.makedirs(os.path.join(taken, "state.h5"))
    refused([*COMMON, "--save", taken], "state.h5 exists and is not a file")
    if os.geteuid() != 0:  # root writes into a read-only folder
        read_only = os.path.join(out_dir, "read-only")
        os.makedirs(read_only)
        os.chmod(read_only, 0o555)
        refused([*COMMON, "--save", read_only], "is not writable")

    # The initial state: equal under ZeRO-3 and under tp, and a run resumed from it is the uninterrupted one.
    first, second = os.path.join(out_dir, "initial-zero3"), os.path.join(out_dir, "initial-tp")
    run([*COMMON, "--zero", "3", "--steps", "0", "--save", first, "--save-initial"])
    whole_report = os.path.join(out_dir, "whole.json")
    run(["--global-batch", "8", "--quiet", "--tp", "2", "--steps", "2", "--save", second, "--save-initial",
         "--report", whole_report])
    with h5py.File(os.path.join(first, "initial.h5")) as a, h5py.File(os.path.join(second, "initial.h5")) as b:
        names = []
        a.visititems(lambda key, item: names.append(key) if isinstance(item, h5py.Dataset) else None)
        for name in names:
            if not np.array_equal(a[name][()], b[name][()]):
                sys.exit(f"initial.h5: {name} differs between ZeRO-3 and tp = 2")
            if name.startswith("optimizer/") and np.any(a[name][()] != 0):
                sys.exit(f"initial.h5: {name} is not zero before the first step")
        if a.attrs["value:step"] != 0:
            sys.exit(f"initial.h5: step {a.attrs['value:step']}")
    resumed_dir = os.path.join(out_dir, "from-initial")
    os.makedirs(resumed_dir)
    shutil.copy(os.path.join(second, "initial.h5"), os.path.join(resumed_dir, "state.h5"))
    resumed_report = os.path.join(out_dir, "resumed.json")
    run(["--quiet", "--tp", "2", "--steps", "2", "--resume", resumed_dir, "--report", resumed_report])
    with open(whole_report) as w, open(resumed_report) as r:
        whole, resumed = json.load(w)["losses"], json.load(r)["losses"]
    if whole != resumed:
        sys.exit(f"resumed from the initial state: losses {resumed}, uninterrupted {whole}")

    # The file describes itself.
    state = os.path.join(second, "state.h5")
    with h5py.File(state) as f:
        slots = sorted(f["optimizer/wte"].keys())
        if slots != ["first_moment", "second_moment"]:
            sys.exit(f"optimizer slots {slots}")
        root = f.attrs
        if root["value:optimizer"] not in (b"adamw", "adamw"):
            sys.exit(f"value:optimizer {root['value:optimizer']!r}")
        for name, want in [("beta1", 0.9), ("beta2", 0.999), ("eps", 1e-8), ("lr", 3e-3)]:
            got = root[f"value:optimizer.{name}"]
            if not isinstance(got, np.floating) or got != want:
                sys.exit(f"value:optimizer.{name} = {got!r}, expected the number {want}")
        for name, want in [("step", 2), ("samples", 16), ("seed", 1)]:
            got = root[f"value:{name}"]
            if not isinstance(got, np.integer) or got != want:
                sys.exit(f"value:{name} = {got!r}, expected the integer {want}")

    # Attributes rewritten by h5py as null-padded bytes and variable-length str: read exactly.
    for form in ("bytes", "str"):
        folder = os.path.join(out_dir, f"h5py-{form}")
        os.makedirs(folder)
        shutil.copy(state, os.path.join(folder, "state.h5"))
        with h5py.File(os.path.join(folder, "state.h5"), "r+") as f:
            def rewrite(attrs, key):
                text = attrs[key].decode() if isinstance(attrs[key], bytes) else str(attrs[key])
                del attrs[key]
                attrs[key] = text.encode() if form == "bytes" else text
            f.visititems(lambda key, item: [rewrite(item.attrs, k) for k in ("layout", "mesh", "element_type")]
                         if isinstance(item, h5py.Dataset) else None)
            rewrite(f.attrs, "value:configuration")
        out = run(["--quiet", "--tp", "2", "--steps", "3", "--resume", folder])
        if "the state equal bit for bit to the saved one" not in out:
            sys.exit(f"resumed from attributes written by h5py as {form}:\n{out}")

    # Run values changed after the save: refused.
    for what in ("configuration", "step", "seed"):
        folder = os.path.join(out_dir, f"changed-{what}")
        os.makedirs(folder)
        target = os.path.join(folder, "state.h5")
        shutil.copy(state, target)
        if what == "configuration":  # one bit: lr=0.003 becomes lr=0.007
            data = bytearray(open(target, "rb").read())
            at = data.find(b"lr=0.003")
            data[at + 7] ^= 0x04
            open(target, "wb").write(data)
        else:
            with h5py.File(target, "r+") as f:
                value = f.attrs[f"value:{what}"]
                f.attrs.modify(f"value:{what}", value ^ value.dtype.type(1))
        refused(["--quiet", "--tp", "2", "--steps", "3", "--resume", folder], "do not match their checksum")

    # A folder held by a live job, and a job whose launcher is killed while it saves.
    held = os.path.join(out_dir, "held")
    job = subprocess.Popen([*launch, *COMMON, "--steps", "100000", "--save", held, "--every", "1"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 60
    while not os.path.exists(os.path.join(held, "state.h5")) and time.time() < deadline:
        time.sleep(0.05)
    refused([*COMMON, "--steps", "3", "--resume", held], "is held by the live job")
    with open(os.path.join(held, "lock")) as f:
        holder = int(f.read().split()[1])
    time.sleep(0.5)
    job.send_signal(signal.SIGKILL)  # the launcher
    killed = time.time()
    job.wait()
    while time.time() < killed + 20:
        try:
            os.kill(holder, 0)
            time.sleep(0.1)
        except ProcessLookupError:
            break
    changed = os.stat(os.path.join(held, "state.h5")).st_ctime
    if changed > killed + 0.01:
        sys.exit(f"a save completed {changed - killed:.3f} s after the launcher was killed")
    run([*COMMON, "--steps", "0", "--resume", held])
    print("hostile user: bad sizes, folders, the initial state, self-description, h5py strings, changed values, "
          "held folders and a killed launcher: passed")


if __name__ == "__main__":
    main()
