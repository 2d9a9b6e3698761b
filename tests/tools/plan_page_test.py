"""The plan page (shardmesh-plan-training --html) in a real browser.

    python3 plan_page_test.py plans PLAN_TRAINING MODELS_DIR HARDWARE_DIR OUT_DIR
    python3 plan_page_test.py report PLAN_TRAINING MODELS_DIR HARDWARE_DIR OUT_DIR MPIEXEC... TRAIN_GPT [POSTFLAGS...]
    python3 plan_page_test.py transition PLAN OUT_DIR

Headless Chromium, driven through chromedriver by Selenium, opens the page
from disk and uses it as a person would: it picks plans with the controls
(the fastest, one with a pipeline, one with ZeRO-3, one the memory refuses,
and for a Llama with experts one with cp and ep), selects a tensor, and
checks what the page shows against the planner's --json for the same
question: the highlighted tensors and their collectives and bytes, the
memory bars, the step's parts, the refusal's reason, the pipeline's actions,
the shards on the device grid. No JavaScript error may reach the console. A
screenshot of each state goes to OUT_DIR. report: a train_gpt run's report
(--report) read back equals what the run printed (each step's time, the
ledger's peaks), and the page made with it shows the run beside its plan.
transition: shardmesh-plan --html draws a redistribution's two layouts and
its steps, and carries the plan that --json prints.
Exits 77 (skipped) only where no browser is installed.
"""
import json
import os
import re
import statistics
import subprocess
import sys

SKIP = 77
STATE = ("parameters", "gradients", "optimizer_state", "activations")


def check(condition, what):
    if not condition:
        sys.exit(f"FAILED: {what}")


def run(command, timeout=300):
    done = subprocess.run([str(c) for c in command], capture_output=True, text=True, check=False, timeout=timeout)
    if done.returncode != 0:
        sys.exit(f"{' '.join(map(str, command))}: exit {done.returncode}\n{done.stdout}\n{done.stderr}")
    return done


def browser():
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        print("SKIPPED: python3-selenium is not installed (tools/toolchain.packages installs it)")
        sys.exit(SKIP)
    driver_path = next((p for p in ("/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver") if os.path.exists(p)),
                       None)
    if driver_path is None:
        print("SKIPPED: chromium-driver is not installed (tools/toolchain.packages installs it)")
        sys.exit(SKIP)
    options = webdriver.ChromeOptions()
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                 "--window-size=1500,1200", "--allow-file-access-from-files"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(driver_path), options=options)


def plan_files(plan_training, model, hardware, out_dir, name, extra):
    """The planner's JSON and its page for the same question."""
    args = [plan_training, "--model", model, "--hardware", hardware, *extra]
    doc = json.loads(run([*args, "--json", "--crossings"]).stdout)
    page = os.path.join(out_dir, name + ".html")
    run([*args, "--html", page])
    return doc, page


class Page:
    def __init__(self, driver, path, out_dir, name):
        self.driver, self.out_dir, self.name = driver, out_dir, name
        driver.get("file://" + os.path.abspath(path))
        self.data = json.loads(driver.execute_script("return document.getElementById('plan-data').textContent;"))

    def js(self, script):
        return self.driver.execute_script(script)

    def choose(self, plan):
        """Sets the controls, dimension by dimension, until the page shows `plan`."""
        from selenium.webdriver.support.ui import Select
        for _ in range(4):
            if self.js("return document.body.dataset.plan;") == str(plan["id"]):
                return
            for d in self.data["dimensions"]:
                select = self.driver.find_element("id", "dim-" + d)
                if select.is_enabled() and select.get_attribute("value") != str(plan[d]):
                    Select(select).select_by_value(str(plan[d]))
        check(self.js("return document.body.dataset.plan;") == str(plan["id"]),
              f"{self.name}: the controls reach plan {plan['label']}")

    def screenshot(self, state):
        height = self.js("return document.body.scrollHeight;")
        self.driver.set_window_size(1500, min(max(height + 40, 800), 6000))
        self.driver.save_screenshot(os.path.join(self.out_dir, f"plan-page-{self.name}-{state}.png"))
        self.driver.set_window_size(1500, 1200)

    def no_console_errors(self):
        errors = [e for e in self.driver.get_log("browser") if e["level"] == "SEVERE"]
        check(not errors, f"{self.name}: no JavaScript error in the console, got {errors}")


def shown_crossings(page):
    return page.js("""return [...document.querySelectorAll('#crossing-table tr.crossing-row')].map(r =>
        [...r.children].map(c => c.dataset.bytes ?? c.textContent));""")


def check_plan(page, plan, json_plan, global_batch, state):
    """What the page shows for `plan` equals the planner's JSON for it."""
    page.choose(plan)
    name = f"{page.name} {plan['label']}"
    view = page.data["views"][plan["view"]]
    # The crossings: every one, in the planner's order, with its collective, group, calls and bytes.
    want = [[view["stages"][c["stage"]]["name"], c["tensor"], c["phase"], c["collective"], c["axis"], str(c["group"]),
             str(c["calls"]), str(c["bytes"])] for c in json_plan["crossings"]]
    check(shown_crossings(page) == want, f"{name}: the crossing table equals the planner's JSON")
    # Highlighted on the diagram: exactly the crossing tensors.
    crossing = {(view["stages"][c["stage"]]["name"], c["tensor"]) for c in json_plan["crossings"]}
    highlighted = {tuple(x) for x in page.js("""return [...document.querySelectorAll('.tensor.crossing')].map(e =>
        [e.dataset.stage, e.dataset.tensor]);""")}
    check(highlighted == crossing, f"{name}: the highlighted tensors are the crossing ones ({crossing - highlighted} "
                                   f"not highlighted, {highlighted - crossing} highlighted wrongly)")
    # The memory bars.
    bars = page.js("""return Object.fromEntries([...document.querySelectorAll('#memory .bar-row')].map(r =>
        [r.dataset.category, Number(r.dataset.bytes)]));""")
    for c in (*STATE, "total"):
        check(bars[c] == json_plan["memory"][c], f"{name}: the {c} bar shows {bars[c]}, the plan {json_plan['memory'][c]}")
    status = page.js("return document.getElementById('status').textContent;")
    if "dropped" in json_plan:
        check(json_plan["dropped"] in status, f"{name}: the refusal's reason is shown ({status})")
        check(page.js("return document.querySelector('#ranking tr.chosen').classList.contains('refused');"),
              f"{name}: the refused plan is greyed in the ranking")
    else:
        parts = page.js("""return Object.fromEntries([...document.querySelectorAll('#time .stack div')].map(d =>
            [d.dataset.part, Number(d.dataset.seconds)]));""")
        s = json_plan["seconds"]
        for part, key in (("compute", "compute"), ("exposed", "data_parallel"), ("bubble", "bubble"),
                          ("update", "optimizer")):
            check(abs(parts[part] - s[key]) <= 1e-12 * max(1, s[key]), f"{name}: the {part} part")
        actions = page.js("return document.querySelectorAll('#schedule g.action').length;")
        sim = sum(len(a) for a in plan["timeline"]["stages"])
        per_stage = plan["micro_batches"] * plan["virtual_stages"] * (3 if plan["schedule"] == "zb-h1" else 2)
        check(actions == sim == plan["pp"] * per_stage, f"{name}: {actions} actions drawn, {sim} simulated")
    batch = page.js("return document.getElementById('batch').textContent;")
    check(batch.endswith(f"= {global_batch}") and plan["batch"]["global"] == global_batch,
          f"{name}: B_global worked out ({batch})")
    check(plan["batch"]["micro"] * plan["batch"]["accumulation"] * plan["batch"]["dp"] * plan["batch"]["ep"]
          == plan["batch"]["global"], f"{name}: the batch's factors")
    page.screenshot(state)


def check_shards(page, plan):
    """Selecting a parameter shows, on its stage's devices, the block each holds."""
    page.choose(plan)
    element = page.driver.find_element("css selector", ".model-stage .tensor[data-layout*='S(']")
    stage_name, tensor = element.get_attribute("data-stage"), element.get_attribute("data-tensor")
    element.click()
    view = page.data["views"][plan["view"]]
    spec = next(t for s in view["stages"] if s["name"] == stage_name for t in s["parameters"] + s["saved"]
                if t["name"] == tensor)
    shards = page.js("return [...document.querySelectorAll('#grid td.holds .shard')].map(e => e.textContent);")
    # Each replica of the pipeline stage holding it shows the stage mesh's blocks in order.
    check(len(shards) == len(spec["shards"]) and shards == spec["shards"],
          f"{page.name}: {tensor}'s shards on the grid {shards} equal the layout's {spec['shards']}")
    check(len(set(shards)) > 1, f"{page.name}: a sharded tensor's blocks differ between ranks")
    page.screenshot("shards")


def plans_case(plan_training, models, hardware, out_dir):
    driver = browser()
    try:
        gpt, node = os.path.join(models, "small-gpt.json"), os.path.join(hardware, "a100-node-8.json")
        # A capacity that refuses the plans without state sharding.
        doc, path = plan_files(plan_training, gpt, node, out_dir, "gpt",
                               ["--global-batch", "16", "--ranks", "8", "--memory", str(3 << 20)])
        page = Page(driver, path, out_dir, "gpt")
        plans = page.data["plans"]
        check(len(plans) == len(doc["plans"]), "the page holds every plan")
        feasible = [p for p in plans if "dropped" not in p]
        fastest = feasible[0]
        picks = {"fastest": fastest,
                 "pipeline": next(p for p in feasible if p["pp"] > 1 and p["tp"] > 1 and p is not fastest),
                 "zero3": next(p for p in feasible if p["zero"] == 3 and p["pp"] == 1 and p is not fastest),
                 "refused": next(p for p in plans if "dropped" in p)}
        for state, p in picks.items():
            check_plan(page, p, doc["plans"][p["id"]], 16, state)
        check_shards(page, picks["pipeline"])
        page.no_console_errors()

        llama = os.path.join(models, "small-llama-experts.json")
        doc, path = plan_files(plan_training, llama, node, out_dir, "llama-experts",
                               ["--global-batch", "8", "--ranks", "8", "--max-cp", "2", "--memory", "0",
                                "--precision", "bf16", "--recompute", "none"])
        page = Page(driver, path, out_dir, "llama-experts")
        p = next(p for p in page.data["plans"] if p["cp"] > 1 and p["ep"] > 1)
        check_plan(page, p, doc["plans"][p["id"]], 8, "cp-ep")
        kinds = {(c["axis"], c["collective"]) for c in doc["plans"][p["id"]]["crossings"]}
        check(("ep", "all_to_all") in kinds, f"the experts' tokens cross on ep: {kinds}")
        page.no_console_errors()
    finally:
        driver.quit()


def report_case(plan_training, models, hardware, out_dir, command):
    model, node = os.path.join(models, "small-gpt.json"), os.path.join(hardware, "a100-node-8.json")
    with open(model) as f:
        m = json.load(f)
    report = os.path.join(out_dir, "plan-page-run.json")
    args = ["--pp", 2, "--schedule", "1f1b", "--micro-batch", 2, "--accumulation", 4, "--global-batch", 8,
            "--steps", 3, "--report", report, "--model", "gpt"]
    for key in ("vocabulary", "sequence", "hidden", "heads", "head_size", "ffn", "layers"):
        args += ["--" + key.replace("_", "-"), m[key]]
    printed = run([*command, *args]).stdout
    with open(report) as f:
        measured = json.load(f)
    # What the run printed: each step's time, then the ledger's table after the last step.
    steps = [float(x) for x in re.findall(r"step +\d+/\d+ .*?([0-9.]+) ms/step", printed)]
    check(len(steps) == 3 == len(measured["step_seconds"]), f"three steps printed and reported: {printed}")
    for shown, seconds in zip(steps, measured["step_seconds"]):
        check(abs(shown - 1e3 * seconds) <= 0.05 + 1e-9, f"the printed step time {shown} ms is the report's {seconds} s")
    printed_peaks = re.search(r"largest over the ranks: parameters (\d+) B, gradients (\d+) B, "
                              r"optimizer state (\d+) B, activations (\d+) B", printed)
    check(printed_peaks, f"the ledger's peaks printed: {printed}")
    for c, value in zip(STATE, printed_peaks.groups()):
        check(int(value) == measured["peak_bytes"][c], f"the printed {c} peak is the report's")
    check(len(measured["timeline"]["stages"]) == 2, "the report's timeline has both stages")
    check(measured["plan"]["pp"] == 2 and measured["plan"]["micro_batches"] == 4, "the report names its plan")

    driver = browser()
    try:
        path = os.path.join(out_dir, "gpt-run.html")
        run([plan_training, "--model", model, "--hardware", node, "--global-batch", 8, "--ranks", 2, "--memory", 0,
             "--html", path, "--report", report])
        page = Page(driver, path, out_dir, "run")
        chosen = page.js("return chosen;")
        for key, value in measured["plan"].items():
            check(chosen[key] == value, f"the page opens on the run's plan: {key} {chosen[key]} vs {value}")
        rows = page.js("""return Object.fromEntries([...document.querySelectorAll('#measured-table tr[data-what]')]
            .map(r => [r.dataset.what, [...r.querySelectorAll('td[data-value]')].map(c => Number(c.dataset.value))]));""")
        median = statistics.median_high(measured["step_seconds"])
        check(rows["step"] == [median, chosen["seconds"]["step"]], f"the measured median step {rows['step']}")
        for c in STATE:
            check(rows[c] == [measured["peak_bytes"][c], chosen["memory"][c]], f"the measured and predicted {c}")
        drawn = page.js("return document.querySelectorAll('#measured g.action').length;")
        check(drawn == sum(len(s) for s in measured["timeline"]["stages"]), "the measured timeline drawn")
        page.screenshot("measured")
        page.no_console_errors()
    finally:
        driver.quit()


def transition_case(plan, out_dir):
    args = [plan, "--mesh", "dp=2,tp=2", "--shape", "8,6", "--from", "R,R P(sum:tp)", "--to", "S(tp),S(dp)"]
    want = json.loads(run([*args, "--json"]).stdout)
    path = os.path.join(out_dir, "transition.html")
    run([*args, "--html", path])
    driver = browser()
    try:
        page = Page(driver, path, out_dir, "transition")
        check(page.data == want, "the page's plan is --json's")
        texts = page.js("return [...document.querySelectorAll('#picture svg text')].map(t => t.textContent);")
        for expected in ("1. slice(dp, dim 1)", "2. reduce_scatter(sum, tp, dim 0)", "rank 3: dp=1,tp=1"):
            check(expected in texts, f"the picture shows {expected!r}")
        page.screenshot("steps")
        page.no_console_errors()
    finally:
        driver.quit()


def main():
    what = sys.argv[1]
    if what == "transition":
        os.makedirs(sys.argv[3], exist_ok=True)
        transition_case(sys.argv[2], sys.argv[3])
        print("ok")
        return
    plan_training, models, hardware, out_dir = sys.argv[2:6]
    os.makedirs(out_dir, exist_ok=True)
    if what == "plans":
        plans_case(plan_training, models, hardware, out_dir)
    else:
        report_case(plan_training, models, hardware, out_dir, sys.argv[6:])
    print("ok")


if __name__ == "__main__":
    main()
