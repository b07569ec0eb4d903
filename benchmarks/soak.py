"""Soak: many mixed calls on one shared model; memory must not grow.

    python benchmarks/soak.py [--calls 500] [--model PATH] [--json benchmarks/results/soak.json]

Mixes sync and async generation, streaming closed early, cancelled async tasks,
timeouts, stop strings, tool calls and JSON-schema output, token counting, and calls that
fail (prompt over the limit). Resident memory of the worker process and of the caller is
read after a warm-up (the first 10% of calls) and at the end; growth over 5% fails.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import time
from pathlib import Path

from ryzenai_core import ChatMessage, ContextWindowExceededError, Engine, GenerationTimeoutError
from ryzenai_core.options import validated_options
from ryzenai_core.prompt.structured import json_schema_guidance, tool_call_guidance

ROOT = Path(__file__).resolve().parents[1]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "look a word up",
            "parameters": {"type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"]},
        },
    }
]
SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "string"}, "score": {"type": "integer"}},
    "required": ["answer", "score"],
}


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def one_call(engine: Engine, rng: random.Random, i: int) -> str:
    msgs = [
        ChatMessage("system", "You are terse."),
        ChatMessage("user", f"Question {i}: " + "why " * rng.randint(1, 60)),
    ]
    kind = rng.choice(
        ["generate", "stream_close", "async", "async_cancel", "timeout", "stop", "tools", "json", "count", "overflow"]
    )
    if kind == "generate":
        engine.generate(msgs, validated_options(max_new_tokens=rng.randint(1, 24), temperature=0.7, seed=i))
    elif kind == "stream_close":
        it = engine.stream(msgs, validated_options(max_new_tokens=200))
        next(it)
        it.close()  # type: ignore[attr-defined]
    elif kind == "async":
        asyncio.run(engine.agenerate(msgs, validated_options(max_new_tokens=12)))
    elif kind == "async_cancel":

        async def cancel() -> None:
            task = asyncio.create_task(engine.agenerate(msgs, validated_options(max_new_tokens=400)))
            await asyncio.sleep(0.01)
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass

        asyncio.run(cancel())
    elif kind == "timeout":
        try:
            engine.generate(msgs, validated_options(max_new_tokens=3000), timeout=0.02)
        except GenerationTimeoutError:
            pass
    elif kind == "stop":
        engine.generate(msgs, validated_options(max_new_tokens=30, stop=["e", "a"]))
    elif kind == "tools":
        g = tool_call_guidance(engine.template.family, TOOLS, 48)
        engine.generate(msgs, validated_options(max_new_tokens=48, tools=TOOLS, guidance=g))
    elif kind == "json":
        engine.generate(msgs, validated_options(max_new_tokens=64, guidance=json_schema_guidance(SCHEMA, 64)))
    elif kind == "count":
        engine.count_tokens(msgs)
    elif kind == "overflow":
        try:
            engine.generate([ChatMessage("user", "word " * 5000)], validated_options(max_new_tokens=4))
        except ContextWindowExceededError:
            pass
    return kind


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--model", type=Path, default=ROOT / "tests" / "fixtures" / "models" / "tiny-qwen3")
    parser.add_argument("--json", type=Path, default=ROOT / "benchmarks" / "results" / "soak.json")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    engine = Engine.get(args.model, execution="process")
    engine.load()
    warm = max(1, args.calls // 10)
    counts: dict[str, int] = {}
    t0 = time.perf_counter()
    base_worker = base_caller = float("nan")
    for i in range(args.calls):
        kind = one_call(engine, rng, i)
        counts[kind] = counts.get(kind, 0) + 1
        if i + 1 == warm:
            base_worker, base_caller = rss_mb(engine.worker_pid()), rss_mb(os.getpid())
    end_worker, end_caller = rss_mb(engine.worker_pid()), rss_mb(os.getpid())
    growth_w = (end_worker - base_worker) / base_worker
    growth_c = (end_caller - base_caller) / base_caller
    result = {
        "calls": args.calls,
        "seconds": round(time.perf_counter() - t0, 1),
        "mix": counts,
        "worker_rss_mb": {"after_warmup": base_worker, "end": end_worker, "growth": growth_w},
        "caller_rss_mb": {"after_warmup": base_caller, "end": end_caller, "growth": growth_c},
    }
    print(json.dumps(result, indent=2))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    Engine.close_all()
    if growth_w > 0.05 or growth_c > 0.05:
        sys.exit(f"memory grew more than 5% after warm-up: worker {growth_w:.1%}, caller {growth_c:.1%}")


if __name__ == "__main__":
    main()
