"""Checks of shardmesh-plan's --json, --all and --svg output.

    python3 plan_test.py PROGRAM json|all|svg [SCRATCH_DIR]
"""
import json
import subprocess
import sys
import xml.etree.ElementTree as ElementTree


def run(program, *args):
    done = subprocess.run([program, *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"{' '.join(args)}: exit {done.returncode}\n{done.stderr}")
    return done.stdout


def check(condition, what):
    if not condition:
        sys.exit(f"FAILED: {what}")


def plan_json(program):
    doc = json.loads(run(program, "--mesh", "dp=2,tp=2", "--shape", "8,6", "--from", "S(dp),R",
                         "--to", "R,S(dp)", "--json"))
    check(doc["tensor"] == "f32[8,6]" and doc["ranks"] == 4 and doc["element_bytes"] == 4, "header")
    check(len(doc["steps"]) == 1, "one step")
    step = doc["steps"][0]
    check(step["kind"] == "all_to_all" and step["axes"] == ["dp"], "all_to_all on dp")
    check(step["step"] == "all_to_all(dp, dim 0->1)" and step["of_local"] == "1/2 of local", "step text")
    # Each rank holds 4x6 and keeps a 4x3 block: it receives 12 floats.
    check(step["bytes_per_rank"] == [48] * 4 and doc["bytes_per_rank"] == [48] * 4, "48 B per rank")
    check(doc["bytes_busiest_rank"] == 48 and doc["lower_bound_bytes"] == 48, "at the lower bound")
    check(doc["peak_extra_bytes"] >= 0 and doc["planned_cost"] > 0, "peak and cost")
    doc = json.loads(run(program, "--mesh", "x=2", "--shape", "5", "--type", "f64", "--from", "R P(sum:x)",
                         "--to", "S(x)", "--json"))
    check([s["kind"] for s in doc["steps"]] == ["reduce_scatter"], "partial to shards: one reduce-scatter")
    # Uneven: x=0 keeps 3 of 5 elements, x=1 two; each receives its block from the other.
    check(doc["bytes_per_rank"] == [24, 16], f"exact uneven bytes, got {doc['bytes_per_rank']}")
    print("json: passed")


def all_targets(program):
    cases = [
        ("dp=2,tp=2", "8,6", "S(dp),R"),
        ("dp=2,tp=2", "8,6", "R,R P(sum:tp)"),
        ("dp=2,tp=2", "7,5", "S(tp),S(dp)"),
        ("x=3,y=2", "6,6", "R,S(x,y)"),
        ("a=2,b=2,c=2", "8", "S(a) P(sum:b,c)"),
        ("dp=2,one=1", "4,4", "C1(dp),R"),
    ]
    for mesh, shape, source in cases:
        doc = json.loads(run(program, "--mesh", mesh, "--shape", shape, "--from", source, "--all", "--json"))
        targets = doc["targets"]
        what = f"--mesh {mesh} --shape {shape} --from '{source}' --all"
        check(targets and targets[0]["source"] and targets[0]["to"] == source, f"{what}: the source comes first")
        check(targets[0]["steps"] == [] and targets[0]["bytes_busiest_rank"] == 0, f"{what}: source at cost 0")
        check(sum(t["source"] for t in targets) == 1, f"{what}: the source once")
        layouts = [t["to"] for t in targets]
        check(len(set(layouts)) == len(layouts), f"{what}: each target once")
        costs = [t["planned_cost"] for t in targets]
        check(costs == sorted(costs), f"{what}: cheapest first")
        for t in targets:
            check(t["bytes_busiest_rank"] >= t["lower_bound_bytes"],
                  f"{what}: {t['to']} moves {t['bytes_busiest_rank']} B, below its lower bound {t['lower_bound_bytes']} B")
            check(t["bytes_per_rank"] == [sum(s["bytes_per_rank"][r] for s in t["steps"]) for r in range(doc["ranks"])],
                  f"{what}: {t['to']} totals are the sums of the steps")
        print(f"{what}: {len(targets)} targets, passed")
    # 2 axes, rank 2, no partial: 1 + 4 + 6 = 11 block layouts.
    doc = json.loads(run(program, "--mesh", "dp=2,tp=2", "--shape", "8,6", "--from", "S(dp),R", "--all", "--json"))
    check(len(doc["targets"]) == 11, "11 targets on a 2x2 mesh")


def svg(program, scratch):
    path = f"{scratch}/plan_test.svg"
    run(program, "--mesh", "dp=2,tp=2", "--shape", "8,6", "--from", "R,R P(sum:tp)", "--to", "S(tp),S(dp)",
        "--svg", path)
    root = ElementTree.parse(path).getroot()
    ns = "{http://www.w3.org/2000/svg}"
    check(root.tag == ns + "svg" and float(root.get("width")) > 0 and float(root.get("height")) > 0, "an svg root")
    texts = [t.text for t in root.iter(ns + "text")]
    for expected in ["P 0+1,2+3", "0", "1", "2", "3", "1. slice(dp, dim 1)", "2. reduce_scatter(sum, tp, dim 0)",
                     "rank 3: dp=1,tp=1"]:
        check(expected in texts, f"svg text {expected!r}")
    check(any(p.get("id") == "ranks_0_1_2_3" for p in root.iter(ns + "pattern")), "stripes for 4 holders")
    check(not any(e.get("href") or e.get("{http://www.w3.org/1999/xlink}href") for e in root.iter()),
          "self-contained: no external references")
    print("svg: passed")


if __name__ == "__main__":
    program, what = sys.argv[1], sys.argv[2]
    if what == "json":
        plan_json(program)
    elif what == "all":
        all_targets(program)
    else:
        svg(program, sys.argv[3])
