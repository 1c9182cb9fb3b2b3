"""One JSON file and one Markdown table from a GPU run's results
(bench/gpu/run.sh): the steps and their status, the side-by-side
comparison (compare.py), the JIT figures (`kiln-bench jit`), the first
launch figures (`kiln-bench --gpu`), the demo runs and the GPU tests.

    python3 report.py WORK_DIR OUT_JSON OUT_MD

Standard library only.
"""

import json
import os
import sys


def load(path, default=None):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return default


def lines(path):
    try:
        with open(path, errors="replace") as f:
            return f.read().splitlines()
    except OSError:
        return []


def demo_summary(path):
    """The demo application's --json lines: per kernel its selection, per
    launch whether it matched the CPU reference."""
    events = []
    for line in lines(path):
        try:
            events.append(json.loads(line))
        except ValueError:
            pass
    kernels = [e for e in events if e.get("event") == "kernel"]
    gpu = [e for e in events if e.get("event") == "gpu"]
    selections = {}
    for k in kernels:
        selections[k.get("selection", "?")] = selections.get(k.get("selection", "?"), 0) + 1
    artifacts = {}
    for g in gpu:
        if g.get("ok"):
            artifacts[g.get("artifact", "?")] = artifacts.get(g.get("artifact", "?"), 0) + 1
    summary = next((e for e in events if e.get("event") == "summary"), {})
    return {
        "kernels": len(kernels),
        "selections": selections,
        "launched_ok": sum(1 for g in gpu if g.get("ok")),
        "launched": len(gpu),
        "artifacts_run": artifacts,
        "failures": [g for g in gpu if not g.get("ok")][:3],
        "summary": summary,
    }


def test_summary(path):
    text = lines(path)
    results = [l for l in text if l.startswith("test result:")]
    ran = [l for l in text if l.startswith("GPU test ")]
    return {"results": results, "gpu_tests_run": [l[len("GPU test "):] for l in ran]}


def main():
    work, out_json, out_md = sys.argv[1:4]
    steps = []
    for line in lines(os.path.join(work, "steps.jsonl")):
        try:
            steps.append(json.loads(line))
        except ValueError:
            pass
    machine = load(os.path.join(work, "machine.json"), {})
    demos = {}
    for step in steps:
        if step["name"].startswith("demo-"):
            demos[step["name"]] = demo_summary(os.path.join(work, "logs", step["name"] + ".out"))
    report = {
        "machine": machine,
        "steps": steps,
        "gpu_tests": test_summary(os.path.join(work, "logs", "gpu-tests.out")),
        "demo": demos,
        "bench_gpu": (load(os.path.join(work, "bench", "ttfk.json"), {}) or {}).get("gpu"),
        "jit": load(os.path.join(work, "jit", "jit.json")),
        "compare": load(os.path.join(work, "compare.json")),
    }
    with open(out_json, "w") as f:
        json.dump(report, f, indent=1)

    md = [f"# GPU run: {machine.get('gpu', '?')}, driver {machine.get('driver', '?')}, {machine.get('date', '?')}", ""]
    md += ["## Steps", "", "| step | status | seconds |", "|---|---|--:|"]
    for s in steps:
        status = "ok" if s["rc"] == 0 else ("timed out" if s["rc"] in (124, 137) else f"failed ({s['rc']})")
        md.append(f"| {s['name']} | {status} | {s['seconds']:.1f} |")
    md += ["", "## GPU tests", ""]
    md += [f"- {r}" for r in report["gpu_tests"]["results"]] or ["- no result"]
    md += ["", "## Demo application", "", "| run | kernels | selections | launched and matching | artifact run |", "|---|--:|---|--:|---|"]
    for name, d in demos.items():
        md.append(
            f"| {name} | {d['kernels']} | {d['selections']} | {d['launched_ok']} / {d['launched']} | {d['artifacts_run']} |"
        )
    compare = report["compare"]
    if compare:
        md += ["", "## Side by side: first launch in a fresh process", ""]
        md += [
            "| program | ok / runs | whole process ms, median (min) | its own clock ms, median (min) |",
            "|---|--:|--:|--:|",
        ]
        for p in compare["programs"]:
            wall = f"{p['wall_median_ms']:.1f} ({p['wall_min_ms']:.1f})" if "wall_median_ms" in p else "failed"
            own = f"{p['self_median_ms']:.1f} ({p['self_min_ms']:.1f})" if "self_median_ms" in p else "-"
            md.append(f"| {p['name']} | {p['ok']} / {p['runs']} | {wall} | {own} |")
        for p in compare["programs"]:
            if p.get("failures"):
                md.append(f"\n{p['name']} failed: {p['failures'][0][:300]}")
    jit = report["jit"]
    if jit:
        md += ["", f"## The driver's JIT once per fleet: a PTX entry of {jit['module_kernels']} kernels", ""]
        md += [
            "| scenario | runs | main → checked launch ms, median (min) | load + JIT ms, median (min) |",
            "|---|--:|--:|--:|",
        ]
        for name, runs, total, total_min, load_, load_min in jit["scenarios"]:
            md.append(f"| {name} | {runs} | {total:.1f} ({total_min:.1f}) | {load_:.1f} ({load_min:.1f}) |")
        for scenario, why in jit.get("failures", [])[:5]:
            md.append(f"\nFAILED {scenario}: {why[:300]}")
    bench = report["bench_gpu"]
    if bench:
        md += ["", f"## kiln-bench --gpu ({bench.get('device', '')})", "", "| path | runs | main → launch ms (median) | module load ms (median) |", "|---|--:|--:|--:|"]
        for path, runs, total, load_ in bench.get("paths", []):
            md.append(f"| {path} | {runs} | {total:.1f} | {load_:.3f} |")
    with open(out_md, "w") as f:
        f.write("\n".join(md) + "\n")


if __name__ == "__main__":
    main()
