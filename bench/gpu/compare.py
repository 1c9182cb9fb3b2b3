"""Side by side on a GPU machine: the same first launch (kiln_axpy<float>,
1M elements in, one launch, back, checked) by several programs, each in
fresh processes, interleaved: round r runs every program once, in the same
order, so drift in the machine spreads over all of them. Times the whole
process from outside (fork + exec to exit) and keeps what each program says
of itself (`total_ns`, from its own start).

    python3 compare.py --rounds 9 --out DIR --json NAME \
        --program "name=command line" [--warm "name"] ...

Standard library only.
"""

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import time


def run_once(command, timeout, env):
    started = time.perf_counter_ns()
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout, env=env
        )
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": f"timed out after {timeout} s"}
    except OSError as error:
        return {"ok": False, "error": str(error)}
    wall = time.perf_counter_ns() - started
    result = {"ok": done.returncode == 0, "wall_ns": wall}
    if done.returncode != 0:
        result["error"] = (done.stderr or done.stdout).strip()[-600:]
        return result
    for line in reversed(done.stdout.splitlines()):
        try:
            said = json.loads(line)
        except ValueError:
            continue
        if isinstance(said, dict) and "total_ns" in said:
            result["self_ns"] = said["total_ns"]
            break
    return result


def ms(values):
    return [v / 1e6 for v in values]


def summary(runs):
    walls = ms([r["wall_ns"] for r in runs if r.get("ok")])
    selfs = ms([r["self_ns"] for r in runs if r.get("ok") and "self_ns" in r])
    out = {
        "runs": len(runs),
        "ok": len(walls),
        "failures": [r.get("error", "") for r in runs if not r.get("ok")][:3],
    }
    if walls:
        out["wall_median_ms"] = statistics.median(walls)
        out["wall_min_ms"] = min(walls)
    if selfs:
        out["self_median_ms"] = statistics.median(selfs)
        out["self_min_ms"] = min(selfs)
    return out


def compare(args):
    programs = []
    for spec in args.program:
        name, _, command = spec.partition("=")
        programs.append((name, shlex.split(command)))
    env = dict(os.environ)
    warm = set(args.warm)
    for name, command in programs:
        if name in warm:
            result = run_once(command, args.timeout, env)
            print(f"warm-up {name}: {'ok' if result['ok'] else result.get('error')}", flush=True)
    runs = {name: [] for name, _ in programs}
    deadline = time.monotonic() + args.budget
    for round_ in range(args.rounds):
        if time.monotonic() > deadline:
            print(f"budget spent after {round_} rounds", flush=True)
            break
        for name, command in programs:
            result = run_once(command, args.timeout, env)
            runs[name].append(result)
            shown = f"{result['wall_ns'] / 1e6:.1f} ms" if result.get("ok") else result.get("error")
            print(f"round {round_ + 1} {name}: {shown}", flush=True)
    return {
        "rounds": args.rounds,
        "programs": [
            {"name": name, "command": " ".join(command), **summary(runs[name]), "all": runs[name]}
            for name, command in programs
        ],
    }


def table(result):
    lines = [
        "| program | ok / runs | whole process ms, median (min) | its own clock ms, median (min) |",
        "|---|--:|--:|--:|",
    ]
    for p in result["programs"]:
        wall = (
            f"{p['wall_median_ms']:.1f} ({p['wall_min_ms']:.1f})" if "wall_median_ms" in p else "failed"
        )
        own = f"{p['self_median_ms']:.1f} ({p['self_min_ms']:.1f})" if "self_median_ms" in p else "-"
        lines.append(f"| {p['name']} | {p['ok']} / {p['runs']} | {wall} | {own} |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument("--budget", type=float, default=150.0, help="seconds for all rounds")
    parser.add_argument("--program", action="append", default=[])
    parser.add_argument("--warm", action="append", default=[])
    parser.add_argument("--out", required=True)
    parser.add_argument("--json", default="compare.json")
    args = parser.parse_args()
    result = compare(args)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, args.json), "w") as f:
        json.dump(result, f, indent=1)
    print(table(result))


if __name__ == "__main__":
    sys.exit(main())
