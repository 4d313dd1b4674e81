#!/usr/bin/env python3
"""Benchmark kctl's start-up: `kctl --version`, `--help`, `dump-log --help`, a TAB of shell completion and a
small `kctl verify`, against the interpreter alone in the same run.

Every run is its own process (`python -m kcli ...`, as the `kctl` script runs it); wall time from the parent,
CPU time (user + system) from the kernel's accounting of that child (os.wait4). The commands run round-robin,
`--repeat` times each after one warm-up round, so a change in the machine's load hits them all alike; the table
shows medians, and each kctl figure less the `python -c "import typer"` baseline (the part kcli decides).

Baselines, measured in the same run:

* `python -c pass`: the interpreter's own start-up;
* `python -c "import typer"`: the interpreter plus the CLI framework, the floor for any typer program.

`--baseline-tree DIR` runs the same kctl commands from another kcli checkout too (say `git archive <commit>
kcli | tar -x -C DIR`), for before/after figures in one run. `--cached-bytecode` measures as an installed
package runs: bytecode written once to a temporary PYTHONPYCACHEPREFIX and reused (by default the environment
decides; with PYTHONDONTWRITEBYTECODE=1 every run compiles kcli from source, which the table's header notes).

Usage: bench/bench_startup.py [--repeat 15] [--baseline-tree DIR] [--cached-bytecode] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
SAMPLE = REPO / "sample-logs" / "kafka-logs"

# (label, arguments of `python -m kcli`, extra environment)
KCTL_CASES: tuple[tuple[str, tuple[str, ...], dict[str, str]], ...] = (
    ("kctl --version", ("--version",), {}),
    ("kctl --help", ("--help",), {}),
    ("kctl dump-log --help", ("dump-log", "--help"), {}),
    ("TAB: kctl dump-log --key-enc", (), {"_KCTL_COMPLETE": "complete_bash", "COMP_WORDS": "kctl dump-log --key-enc",
                                          "COMP_CWORD": "2"}),
    ("kctl verify sample-logs/kafka-logs", ("verify", str(SAMPLE)), {}),
)
BASELINES = (
    ("python -c pass", ("-c", "pass")),
    ("python -c 'import typer'", ("-c", "import typer")),
)


def run_once(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds, exit status) of one child process, its output thrown away."""
    started = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _pid, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here; keep Popen from waiting again
    return wall, usage.ru_utime + usage.ru_stime, proc.returncode


def cases(trees: list[tuple[str, Path]], base_env: dict[str, str]) -> list[dict]:
    out = []
    for label, args in BASELINES:
        out.append({"label": label, "tree": None, "argv": [sys.executable, *args], "env": base_env, "cwd": REPO})
    for tree_label, tree in trees:
        for label, args, extra in KCTL_CASES:
            # cwd and PYTHONPATH both name the tree: `-m kcli` puts the working directory first on sys.path
            env = {**base_env, "PYTHONPATH": str(tree), **extra}
            out.append({"label": label, "tree": tree_label, "argv": [sys.executable, "-m", "kcli", *args],
                        "env": env, "cwd": tree})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=15, help="counted runs of each command (medians reported)")
    parser.add_argument("--baseline-tree", type=Path, help="another kcli checkout to run the same kctl commands from")
    parser.add_argument("--cached-bytecode", action="store_true",
                        help="write and reuse bytecode (a temporary PYTHONPYCACHEPREFIX), as an installed package")
    parser.add_argument("--json", type=Path, help="write every run's figures here")
    args = parser.parse_args()

    base_env = dict(os.environ)
    base_env.pop("PYTHONPATH", None)
    cache_dir = None
    if args.cached_bytecode:
        cache_dir = tempfile.TemporaryDirectory(prefix="kcli-bench-pyc-")
        base_env.pop("PYTHONDONTWRITEBYTECODE", None)
        base_env["PYTHONPYCACHEPREFIX"] = cache_dir.name
    trees = [("this tree", REPO)]
    if args.baseline_tree is not None:
        baseline = args.baseline_tree.resolve()
        if not (baseline / "kcli" / "__main__.py").is_file():
            raise SystemExit(f"{baseline} holds no kcli package (kcli/__main__.py)")
        trees.append(("baseline", baseline))
    todo = cases(trees, base_env)
    for case in todo:
        case["runs"] = []
    try:
        for round_no in range(args.repeat + 1):  # round 0 is the warm-up (and writes bytecode if cached)
            for case in todo:
                wall, cpu, status = run_once(case["argv"], case["env"], case["cwd"])
                if status != 0:
                    raise SystemExit(f"{case['label']} ({case['tree']}) exited {status}")
                if round_no:
                    case["runs"].append({"wall": wall, "cpu": cpu})
    finally:
        if cache_dir is not None:
            cache_dir.cleanup()

    for case in todo:
        case["wall"] = statistics.median(r["wall"] for r in case["runs"])
        case["cpu"] = statistics.median(r["cpu"] for r in case["runs"])
    floor = next(c for c in todo if c["label"] == BASELINES[1][0])
    bytecode = ("cached (PYTHONPYCACHEPREFIX)" if args.cached_bytecode else
                "compiled from source every run (PYTHONDONTWRITEBYTECODE)" if os.environ.get("PYTHONDONTWRITEBYTECODE")
                else "as the environment leaves it (written beside the sources)")
    print(f"# medians of {args.repeat} interleaved runs per command; {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.1f}; bytecode: {bytecode}")
    baseline_of = {c["label"]: c for c in todo if c["tree"] == "baseline"}
    head = f"{'command':38} {'tree':10} {'wall s':>7} {'CPU s':>7} {'CPU - typer':>12}"
    if baseline_of:
        head += f" {'CPU vs baseline':>16}"
    print(head)
    for case in todo:
        line = f"{case['label']:38} {case['tree'] or '-':10} {case['wall']:7.3f} {case['cpu']:7.3f}"
        if case["tree"] is not None:
            line += f" {case['cpu'] - floor['cpu']:12.3f}"
            if case["tree"] == "this tree" and case["label"] in baseline_of:
                line += f" {case['cpu'] / baseline_of[case['label']]['cpu']:15.2f}x"
        print(line)
    if args.json:
        args.json.write_text(json.dumps({"repeat": args.repeat, "cached_bytecode": args.cached_bytecode, "cases": [
            {k: v for k, v in c.items() if k in ("label", "tree", "argv", "wall", "cpu", "runs")} for c in todo]},
            indent=1) + "\n")


if __name__ == "__main__":
    main()
