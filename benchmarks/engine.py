"""Core engine benchmarks, measured side by side in one run on the ~30M-parameter model.

    python scripts/build_fixtures.py --bench-only   # once: builds benchmarks/models/bench-30m (needs torch)
    python benchmarks/engine.py [--model PATH] [--json benchmarks/results/engine.json]

Reports ratios, never absolute goals:
- decode tokens/s of the core stream (inline and worker process) vs a plain OGA loop;
- time to first token of a second chat turn with KV prefix reuse vs without;
- the longest asyncio event-loop stall while a 2K-token prompt prefills (worker vs inline);
- resident memory of two adapters on one folder (one shared model) vs one.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import onnxruntime_genai as og

from ryzenai_core import ChatMessage, Engine
from ryzenai_core.options import validated_options

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_MODEL = ROOT / "benchmarks" / "models" / "bench-30m"
THREADS = 2


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def raw_sampler(model_path: Path, prompt_ids: list[int], new: int) -> Callable[[], float]:
    """One run of the plainest OGA loop (same threads, greedy): decode tokens/s after the first token."""
    cfg = og.Config(str(model_path))
    cfg.overlay(json.dumps({"model": {"decoder": {"session_options": {"intra_op_num_threads": THREADS}}}}))
    model = og.Model(cfg)

    def once() -> float:
        params = og.GeneratorParams(model)
        params.set_search_options(max_length=len(prompt_ids) + new, do_sample=False)
        gen = og.Generator(model, params)
        gen.append_tokens(prompt_ids)
        gen.generate_next_token()
        t0 = time.perf_counter()
        n = 0
        while not gen.is_done():
            gen.generate_next_token()
            gen.get_next_tokens()
            n += 1
        return n / (time.perf_counter() - t0)

    return once


def core_sampler(engine: Engine, messages: list[ChatMessage], new: int) -> Callable[[], float]:
    """One core stream: decode tokens/s after the first token, as the engine reports it."""
    opts = validated_options(max_new_tokens=new, temperature=0, kv_reuse=False)

    def once() -> float:
        c = engine.generate(messages, opts)
        assert c.usage is not None and c.usage.completion_tokens == new, c.usage
        return (c.timings.decode_tokens_per_second or 0.0) if c.timings else 0.0

    return once


def framework_sampler(kind: str, model: Path, question: list[ChatMessage], new: int) -> Callable[[], float] | None:
    """One LangChain or LlamaIndex stream: chunks/s after the first, as the caller sees them."""
    system, user = question[0].text, question[1].text
    try:
        if kind == "langchain":
            from langchain_core.messages import HumanMessage, SystemMessage

            from langchain_ryzenai import ChatRyzenAI

            llm = ChatRyzenAI(model=str(model), temperature=0, max_tokens=new, num_threads=THREADS, kv_reuse=False)

            def pieces() -> Iterator[str]:
                return (str(c.content) for c in llm.stream([SystemMessage(system), HumanMessage(user)]))
        else:
            from llama_index.core.llms import ChatMessage as LIMessage

            from llamaindex_ryzenai import RyzenAILLM

            li = RyzenAILLM(model=str(model), temperature=0, max_new_tokens=new, num_threads=THREADS, kv_reuse=False)
            msgs = [LIMessage(role="system", content=system), LIMessage(role="user", content=user)]

            def pieces() -> Iterator[str]:
                return (r.delta or "" for r in li.stream_chat(msgs))
    except ImportError:
        return None
    for _ in pieces():  # warm-up (loads the model)
        pass

    def once() -> float:
        first, n = None, 0
        for piece in pieces():
            if piece:
                n += 1
                first = first or time.perf_counter()
        return (n - 1) / (time.perf_counter() - first) if first is not None and n > 1 else 0.0

    return once


def ttft(engine: Engine, messages: list[ChatMessage], reuse: bool) -> float:
    """Median TTFT of turn 2 after turn 1 ran on the same engine."""
    samples = []
    for i in range(5):
        first = engine.generate(messages, validated_options(max_new_tokens=32, temperature=0, kv_reuse=reuse))
        turn2 = [*messages, ChatMessage("assistant", first.text), ChatMessage("user", f"And what about case {i}?")]
        c = engine.generate(turn2, validated_options(max_new_tokens=4, temperature=0, kv_reuse=reuse))
        samples.append(c.timings.time_to_first_token)
    return statistics.median(samples)


async def _stall(engine: Engine, messages: list[ChatMessage]) -> tuple[float, int]:
    gaps: list[float] = []
    done = asyncio.Event()

    async def ticker() -> None:
        last = time.perf_counter()
        while not done.is_set():
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0.01)
    c = await engine.agenerate(messages, validated_options(max_new_tokens=8, temperature=0, kv_reuse=False))
    done.set()
    await task
    return max(gaps), c.usage.prompt_tokens


def stall(engine: Engine, messages: list[ChatMessage]) -> tuple[float, int]:
    return asyncio.run(_stall(engine, messages))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    parser.add_argument("--json", type=Path, default=ROOT / "benchmarks" / "results" / "engine.json")
    parser.add_argument("--new-tokens", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    if not (args.model / "genai_config.json").exists():
        sys.exit(
            f"{args.model} is missing: build it with `python scripts/build_fixtures.py --bench-only` (needs torch)"
        )

    question = [
        ChatMessage("system", "You answer questions about Ryzen AI model packages."),
        ChatMessage("user", "What is a prefill bucket and why is the prompt padded to it? " * 4),
    ]
    inline = Engine.get(args.model, num_threads=THREADS, execution="inline")
    worker = Engine.get(args.model, num_threads=THREADS, execution="process")
    inline.load()
    worker.load()
    prompt_ids = inline.encode(inline.render(question))

    rows: dict[str, object] = {"model": args.model.name, "threads": THREADS, "prompt_tokens": len(prompt_ids)}
    samplers = {
        "raw_oga_loop": raw_sampler(args.model, prompt_ids, args.new_tokens),
        "core_inline": core_sampler(inline, question, args.new_tokens),
        "core_worker": core_sampler(worker, question, args.new_tokens),
        "langchain_stream": framework_sampler("langchain", args.model, question, args.new_tokens),
        "llamaindex_stream": framework_sampler("llamaindex", args.model, question, args.new_tokens),
    }
    # Round robin, so slow phases of a noisy machine hit every method alike; medians.
    samples: dict[str, list[float]] = {name: [] for name, fn in samplers.items() if fn is not None}
    for _ in range(args.rounds):
        for name, fn in samplers.items():
            if fn is not None:
                time.sleep(0.3)  # let the previous run's runtime threads stop spinning (2 cores)
                samples[name].append(fn())
    rates = {name: statistics.median(v) for name, v in samples.items()}
    raw = rates["raw_oga_loop"]
    rows["decode_tok_s"] = rates
    rows["decode_ratio_vs_raw"] = {name: r / raw for name, r in rates.items()}
    rows["decode_rounds"] = args.rounds

    long_doc = "The NPU pads each prompt to a prefill bucket; decode steps use token buckets. " * 120
    chat = [ChatMessage("system", "Answer from the document.\n\n" + long_doc), ChatMessage("user", "What is padded?")]
    cold, warm = ttft(worker, chat, reuse=False), ttft(worker, chat, reuse=True)
    rows["second_turn_ttft_s"] = {
        "cold": cold,
        "warm_kv_reuse": warm,
        "ratio": warm / cold,
        "prompt_tokens": worker.count_tokens(chat),
    }

    big = [ChatMessage("user", "Summarise: " + "bucket padding window prefill decode " * 400)]
    big_tokens = worker.count_tokens(big)
    stall_worker, _ = stall(worker, big)
    stall_inline, _ = stall(inline, big)
    rows["event_loop_stall_ms"] = {
        "prompt_tokens": big_tokens,
        "worker": stall_worker * 1000,
        "inline": stall_inline * 1000,
    }

    pid = worker.worker_pid()
    one = rss_mb(pid) if pid else float("nan")
    again = Engine.get(args.model, num_threads=THREADS, execution="process")
    again.generate(question, validated_options(max_new_tokens=4))
    two = rss_mb(pid) if pid else float("nan")
    rows["memory_mb"] = {
        "worker_rss_one_adapter": one,
        "worker_rss_two_adapters": two,
        "shared_engine": again is worker,
        "caller_rss": rss_mb(os.getpid()),
    }

    print(f"model {args.model.name}, {THREADS} threads, prompt {len(prompt_ids)} tokens, {args.new_tokens} new tokens")
    print(f"decode tokens/s, median of {args.rounds} round-robin rounds:")
    for name, r in rates.items():
        print(f"  {name:<20}{r:>8.0f}   {r / raw:>5.2f}x raw")
    print(
        f"second-turn TTFT ({rows['second_turn_ttft_s']['prompt_tokens']} tokens): cold {cold * 1000:.1f} ms, "
        f"warm {warm * 1000:.1f} ms, ratio {warm / cold:.2f}"
    )
    print(
        f"event-loop stall, {big_tokens}-token prefill: worker {stall_worker * 1000:.1f} ms, "
        f"inline {stall_inline * 1000:.1f} ms"
    )
    print(f"worker RSS: one adapter {one:.0f} MB, two adapters {two:.0f} MB (one shared model: {again is worker})")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(rows, indent=2) + "\n")
    print(f"wrote {args.json.relative_to(ROOT) if args.json.is_relative_to(ROOT) else args.json}")
    Engine.close_all()


if __name__ == "__main__":
    main()
