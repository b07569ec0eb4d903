"""The streaming overhead of this checkout and another, whole runs in alternating order.

    python benchmarks/overhead_ab.py --base DIR [--pairs 4] [--threads 1 2] [--rounds 5] [--json FILE]

``benchmarks/overhead.py`` measures one checkout in one process, so two versions of the plugin
cannot share its rounds. This runs each checkout's own ``overhead.py`` (its code, its worker, its
script; ``--base`` through a folder that names the other checkout's packages, as
``cold_start.py --base`` does) one after the other, in the order A B B A A B B A ...: neither side
always runs first, and the machine's drift falls on both alike.

What is compared, per round of every run: each face's time against its own floor in that round
(``langchain_stream`` / ``floor_langchain``, ``llamaindex_stream`` / ``floor_llamaindex``, the core's
``core_worker`` / ``floor_pipe``: above 1 is slower than the floor), and its CPU time (every thread
of the benchmark's process, of the workers and of the floor's child) against the same floor's.
The figure is the median over all rounds of all runs of a side, with the middle half.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
#: face -> its floor in overhead.py
PAIRS = {"langchain_stream": "floor_langchain", "llamaindex_stream": "floor_llamaindex", "core_worker": "floor_pipe"}


def run(checkout: Path, pythonpath: str | None, threads: int, rounds: int, tokens: int) -> dict[str, Any]:
    """One whole run of ``checkout``'s overhead.py on bench-30m; its results."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        cmd = [sys.executable, str(checkout / "benchmarks" / "overhead.py"), "--models", "bench-30m",
               "--rounds", str(rounds), "--new-tokens", str(tokens), "--threads", str(threads), "--json", str(out)]
        env = None if pythonpath is None else {**os.environ, "PYTHONPATH": pythonpath}
        subprocess.run(cmd, check=True, env=env, cwd=pythonpath, capture_output=True, text=True, timeout=1800)  # noqa: S603
        result: dict[str, Any] = json.loads(out.read_text())
    return result["models"]["bench-30m"]


def ratios(model: dict[str, Any]) -> dict[str, dict[str, list[float]]]:
    """face -> {"time": [face / floor per round], "cpu": [...]}."""
    rounds = model["rounds_s"]
    out: dict[str, dict[str, list[float]]] = {}
    for face, floor in PAIRS.items():
        pairs = zip(rounds[face], rounds[floor], strict=True)
        rows = [(f[0] / g[0], f[2] / g[2]) for f, g in pairs]
        out[face] = {"time": [t for t, _ in rows], "cpu": [c for _, c in rows]}
    return out


def summary(values: list[float]) -> dict[str, float]:
    q = statistics.quantiles(values, n=4) if len(values) > 1 else [values[0]] * 3
    return {"median": round(statistics.median(values), 3), "q1": round(q[0], 3), "q3": round(q[2], 3), "n": len(values)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", type=Path, required=True, help="the other checkout (e.g. a worktree of an older commit)")
    parser.add_argument("--pairs", type=int, default=4, help="runs of each side per thread count")
    parser.add_argument("--threads", type=int, nargs="*", default=[1, 2])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from cold_start import base_path

    models = args.base / "benchmarks" / "models"
    if not (models / "bench-30m").exists():
        models.mkdir(parents=True, exist_ok=True)
        (models / "bench-30m").symlink_to(ROOT / "benchmarks" / "models" / "bench-30m", target_is_directory=True)
    sides = {"this": (ROOT, None), "base": (args.base, base_path(args.base))}
    results: dict[str, Any] = {}
    for threads in args.threads:
        got: dict[str, dict[str, dict[str, list[float]]]] = {s: {f: {"time": [], "cpu": []} for f in PAIRS} for s in sides}
        order = [s for i in range(args.pairs) for s in (("this", "base") if i % 2 == 0 else ("base", "this"))]
        for i, side in enumerate(order, 1):
            checkout, pythonpath = sides[side]
            print(f"threads {threads}: run {i}/{len(order)} ({side})", flush=True)
            for face, values in ratios(run(checkout, pythonpath, threads, args.rounds, args.new_tokens)).items():
                for key in ("time", "cpu"):
                    got[side][face][key].extend(values[key])
        results[str(threads)] = {s: {f: {k: summary(v) for k, v in d.items()} for f, d in faces.items()}
                                 for s, faces in got.items()}
        print(f"\n{threads} runtime thread(s): face / its floor, median over {args.pairs} runs x {args.rounds} rounds "
              "(middle half); above 1 is slower")
        print(f"  {'face':<20} {'time, this':>22} {'time, base':>22} {'CPU, this':>22} {'CPU, base':>22}")
        for face in PAIRS:
            cells = []
            for key in ("time", "cpu"):
                for side in ("this", "base"):
                    s = results[str(threads)][side][face][key]
                    cells.append(f"{s['median']:.3f} ({s['q1']:.3f}-{s['q3']:.3f})")
            print(f"  {face:<20} {cells[0]:>22} {cells[1]:>22} {cells[2]:>22} {cells[3]:>22}")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"base": str(args.base), "rounds": args.rounds, "pairs": args.pairs,
                                         "new_tokens": args.new_tokens, "results": results}, indent=2) + "\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
