#!/usr/bin/env python3
"""Both driver families on one GPU, from one image (run by run.sh).

    python3 drivers.py BIN_DIR OUT_JSON

Runs kiln-demo-app on GPU 0, stripped (env -i, a fresh HOME, PATH=/usr/bin:/bin):

  cuda12     bin/demo-exact --gpu --driver 12.8: the driver served as a CUDA
             12.8 one (kiln::cuda::loader::limit_driver_version): every kernel
             from the NVRTC 12.9 entries, launched and checked;
  cuda13     bin/demo-exact --gpu: the driver as it is (R580, CUDA 13.0): every
             kernel from the NVRTC 13.0 entries, launched and checked;
  nvrtc135   bin/demo-nvrtc135 --gpu: an image built by NVRTC 13.5 (CUBINs for
             sm_80 and sm_90, PTX for sm_80): on an sm_90 GPU its CUBINs load and
             run on a 13.0 driver;
  nvrtc135-ptx-toolkit  bin/demo-nvrtc135-ptx --gpu: the same toolchain, CUBINs
             for sm_80 and sm_86 only: on an sm_90 GPU only the NVRTC 13.5 PTX
             runs, which a 13.0 driver cannot JIT, so the machine's own CUDA 13
             NVRTC compiles every kernel (Kiln's fallback), launched and checked;
  nvrtc135-ptx  the same with no NVRTC reachable (KILN_NVRTC names no file, as on
             a machine with only the driver): every kernel refused with Kiln's
             own error (never CUDA_ERROR_UNSUPPORTED_PTX_VERSION).

Prints one PASS or FAIL line per run and writes the findings to OUT_JSON; exit
status 1 when any run fails its check.
"""

import json
import os
import subprocess
import sys
import tempfile


def run(binary, *args, extra=None):
    home = tempfile.mkdtemp()
    env = {"HOME": home, "PATH": "/usr/bin:/bin", **(extra or {})}
    done = subprocess.run(
        [binary, "--gpu", "--json", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = []
    for line in done.stdout.splitlines():
        try:
            lines.append(json.loads(line))
        except ValueError:
            pass
    return done.returncode, lines, done.stderr


def events(lines, name):
    return [line for line in lines if line.get("event") == name]


def check_served(lines, nvrtc_prefix, selection):
    """Every kernel from an image, built by NVRTC nvrtc_prefix*, as selection,
    and every GPU check passed."""
    problems = []
    kernels = events(lines, "kernel")
    if not kernels:
        problems.append("no kernel served")
    for kernel in kernels:
        if kernel.get("outcome") != "image":
            problems.append(f"{kernel.get('name')}: {kernel.get('outcome')} {kernel.get('error', '')}")
        elif not str(kernel.get("nvrtc", "")).startswith(nvrtc_prefix):
            problems.append(f"{kernel['name']}: built by {kernel.get('nvrtc')}")
        elif kernel.get("selection") != selection:
            problems.append(f"{kernel['name']}: {kernel.get('selection')}")
    gpu = events(lines, "gpu")
    failed = [g for g in gpu if not g.get("ok")]
    if len(gpu) != len(kernels):
        problems.append(f"{len(gpu)} GPU checks for {len(kernels)} kernels")
    problems += [f"gpu {g.get('name')}: {g.get('error')}" for g in failed]
    return problems, {"kernels": len(kernels), "gpu_checked": len(gpu) - len(failed)}


def check_compiled(lines, nvrtc_prefix):
    """Every kernel compiled here by NVRTC nvrtc_prefix*, and every GPU check passed."""
    problems = []
    kernels = events(lines, "kernel")
    if not kernels:
        problems.append("no kernel served")
    for kernel in kernels:
        if kernel.get("outcome") != "compiled":
            problems.append(f"{kernel.get('name')}: {kernel.get('outcome')} {kernel.get('error', '')}")
        elif not str(kernel.get("nvrtc", "")).startswith(nvrtc_prefix):
            problems.append(f"{kernel['name']}: compiled by {kernel.get('nvrtc')}")
    gpu = events(lines, "gpu")
    failed = [g for g in gpu if not g.get("ok")]
    if len(gpu) != len(kernels):
        problems.append(f"{len(gpu)} GPU checks for {len(kernels)} kernels")
    problems += [f"gpu {g.get('name')}: {g.get('error')}" for g in failed]
    return problems, {"kernels": len(kernels), "gpu_checked": len(gpu) - len(failed)}


def check_refused(rc, lines):
    """Every kernel refused with Kiln's own error: the driver too old for the PTX."""
    problems = []
    kernels = events(lines, "kernel")
    if rc == 0:
        problems.append("the run succeeded: the PTX was not refused")
    if not kernels:
        problems.append("no kernel line")
    for kernel in kernels:
        error = kernel.get("error", "")
        if kernel.get("outcome") != "failed":
            problems.append(f"{kernel.get('name')}: served as {kernel.get('selection')}")
        elif "cannot JIT it" not in error or "nothing shipped loads" not in error:
            problems.append(f"{kernel.get('name')}: not Kiln's refusal: {error[:300]}")
        if "CUDA_ERROR" in error:
            problems.append(f"{kernel.get('name')}: the driver's error reached the caller")
    first = kernels[0].get("error", "") if kernels else ""
    return problems, {"kernels": len(kernels), "error": first}


def main():
    bin_dir, out = sys.argv[1], sys.argv[2]
    findings = {}
    ok = True
    cases = [
        ("cuda12", "demo-exact", ["--driver", "12.8"], ("12.9.", "exact-cubin")),
        ("cuda13", "demo-exact", [], ("13.0.", "exact-cubin")),
        ("nvrtc135", "demo-nvrtc135", [], ("13.5.", "exact-cubin")),
        # A machine with a CUDA toolkit compiles what no shipped code serves
        # (Kiln's fallback); one with only the driver (no NVRTC reachable)
        # gets Kiln's own error.
        ("nvrtc135-ptx-toolkit", "demo-nvrtc135-ptx", [], "13."),
        ("nvrtc135-ptx", "demo-nvrtc135-ptx", [], None),
    ]
    no_nvrtc = {"KILN_NVRTC": "/nonexistent/libnvrtc.so"}
    for name, binary, args, expected in cases:
        path = os.path.join(bin_dir, binary)
        if not os.path.exists(path):
            print(f"FAIL {name}: {path} missing from the bundle")
            findings[name] = {"problems": ["missing"]}
            ok = False
            continue
        extra = no_nvrtc if expected is None else None
        rc, lines, stderr = run(path, *args, extra=extra)
        device = (events(lines, "device") or [{}])[0]
        if expected is None:
            problems, facts = check_refused(rc, lines)
        elif isinstance(expected, str):
            problems, facts = check_compiled(lines, expected)
            if rc != 0:
                problems.append(f"exit {rc}: {stderr.strip()[-300:]}")
        else:
            problems, facts = check_served(lines, *expected)
            if rc != 0:
                problems.append(f"exit {rc}: {stderr.strip()[-300:]}")
        facts["device"] = {"arch": device.get("arch"), "driver": device.get("driver")}
        facts["problems"] = problems
        findings[name] = facts
        verdict = "PASS" if not problems else "FAIL"
        ok &= not problems
        print(f"{verdict} {name}: {json.dumps(facts)[:600]}")
    with open(out, "w") as handle:
        json.dump(findings, handle, indent=1)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
