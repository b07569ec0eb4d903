"""The streaming overhead of this checkout and another, whole runs in alternating order.

    python benchmarks/overhead_ab.py --base DIR [--pairs 4] [--threads 1 2] [--rounds 5] [--model bench-30m] [--json FILE]

``benchmarks/overhead.py`` measures one checkout in one process, so two versions of the plugin
cannot share its rounds. This runs each checkout's own ``overhead.py`` (its code, its worker, its
script; ``--base`` through a folder that names the other checkout's packages, as
``cold_start.py --base`` does) one after the other, in the order A B B A A B B A ...: neither side
always runs first, and the machine's drift falls on both alike.

What is compared, per round of every run: each face's time against its own floor in that round
(``langchain_stream`` / ``floor_langchain``, ``llamaindex_stream`` / ``floor_llamaindex``, the core's
``core_worker`` / ``floor_pipe``: above 1 is slower than the floor), and its CPU time (every thread
of the benchmark's process, of the workers and of the floor's child) against the same floor's.
The figure is the median over all rounds of all runs of a side, with the middle half; each
face's and floor's CPU time per token (microseconds, the same threads) is given beside it.
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


def run(checkout: Path, pythonpath: str | None, threads: int, rounds: int, tokens: int, model: str) -> dict[str, Any]:
    """One whole run of ``checkout``'s overhead.py on ``model``; its results."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        cmd = [
            sys.executable,
            str(checkout / "benchmarks" / "overhead.py"),
            "--models",
            model,
            "--rounds",
            str(rounds),
            "--new-tokens",
            str(tokens),
            "--threads",
            str(threads),
            "--json",
            str(out),
        ]
        env = None if pythonpath is None else {**os.environ, "PYTHONPATH": pythonpath}
        subprocess.run(cmd, check=True, env=env, cwd=pythonpath, capture_output=True, text=True, timeout=1800)  # noqa: S603
        result: dict[str, Any] = json.loads(out.read_text())
    models: dict[str, Any] = result["models"]
    return models[model]


def ratios(model: dict[str, Any], tokens: int) -> dict[str, dict[str, list[float]]]:
    """face -> {"time": [face / floor per round], "cpu": [...], "cpu_us": [face's CPU µs a token], "floor_cpu_us": [...]}."""
    rounds = model["rounds_s"]
    out: dict[str, dict[str, list[float]]] = {}
    for face, floor in PAIRS.items():
        pairs = list(zip(rounds[face], rounds[floor], strict=True))
        out[face] = {
            "time": [f[0] / g[0] for f, g in pairs],
            "cpu": [f[2] / g[2] for f, g in pairs],
            "cpu_us": [f[2] / tokens * 1e6 for f, _ in pairs],
            "floor_cpu_us": [g[2] / tokens * 1e6 for _, g in pairs],
        }
    return out


def summary(values: list[float]) -> dict[str, float]:
    q = statistics.quantiles(values, n=4) if len(values) > 1 else [values[0]] * 3
    return {"median": round(statistics.median(values), 3), "q1": round(q[0], 3), "q3": round(q[2], 3), "n": len(values)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--base", type=Path, required=True, help="the other checkout (e.g. a worktree of an older commit)"
    )
    parser.add_argument("--pairs", type=int, default=4, help="runs of each side per thread count")
    parser.add_argument("--threads", type=int, nargs="*", default=[1, 2])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument(
        "--model", default="bench-30m", help="overhead.py's model (bench-30m, or the tiny-llama fixture)"
    )
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from cold_start import base_path

    models = args.base / "benchmarks" / "models"
    if args.model == "bench-30m" and not (models / "bench-30m").exists():
        models.mkdir(parents=True, exist_ok=True)
        (models / "bench-30m").symlink_to(ROOT / "benchmarks" / "models" / "bench-30m", target_is_directory=True)
    sides = {"this": (ROOT, None), "base": (args.base, base_path(args.base))}
    results: dict[str, Any] = {}
    for threads in args.threads:
        keys = ("time", "cpu", "cpu_us", "floor_cpu_us")
        got: dict[str, dict[str, dict[str, list[float]]]] = {
            s: {f: {k: [] for k in keys} for f in PAIRS} for s in sides
        }
        order = [s for i in range(args.pairs) for s in (("this", "base") if i % 2 == 0 else ("base", "this"))]
        for i, side in enumerate(order, 1):
            checkout, pythonpath = sides[side]
            print(f"threads {threads}: run {i}/{len(order)} ({side})", flush=True)
            model = run(checkout, pythonpath, threads, args.rounds, args.new_tokens, args.model)
            for face, values in ratios(model, args.new_tokens).items():
                for key in keys:
                    got[side][face][key].extend(values[key])
        results[str(threads)] = {
            s: {f: {k: summary(v) for k, v in d.items()} for f, d in faces.items()} for s, faces in got.items()
        }
        print(
            f"\n{threads} runtime thread(s): face / its floor, median over {args.pairs} runs x {args.rounds} rounds "
            "(middle half); above 1 is slower"
        )
        print(f"  {'face':<20} {'time, this':>22} {'time, base':>22} {'CPU, this':>22} {'CPU, base':>22}")
        for face in PAIRS:
            cells = []
            for key in ("time", "cpu"):
                for side in ("this", "base"):
                    s = results[str(threads)][side][face][key]
                    cells.append(f"{s['median']:.3f} ({s['q1']:.3f}-{s['q3']:.3f})")
            print(f"  {face:<20} {cells[0]:>22} {cells[1]:>22} {cells[2]:>22} {cells[3]:>22}")
        print("  CPU a token, µs (median): face this / base; its floor this / base")
        for face, floor in PAIRS.items():
            cpu = {side: results[str(threads)][side][face] for side in sides}
            print(
                f"  {face:<20} {cpu['this']['cpu_us']['median']:>8.1f} / {cpu['base']['cpu_us']['median']:<8.1f}"
                f"  {floor}: {cpu['this']['floor_cpu_us']['median']:.1f} / {cpu['base']['floor_cpu_us']['median']:.1f}"
            )
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps(
                {
                    "base": str(args.base),
                    "model": args.model,
                    "rounds": args.rounds,
                    "pairs": args.pairs,
                    "new_tokens": args.new_tokens,
                    "results": results,
                },
                indent=2,
            )
            + "\n"
        )
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
