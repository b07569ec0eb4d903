"""Where the plugin's time goes, per token and per call, layer by layer.

    python benchmarks/breakdown.py [--model bench-30m|tiny-llama] [--json benchmarks/results/breakdown.json]

Per token (microseconds):

- the runtime's own step (``generate_next_token`` + ``get_next_tokens``), for scale;
- the generation loop's pieces, replayed on the tokens of a real generation with the objects
  the loop builds (incremental detokenizer, output parser with and without stop strings or
  reasoning markers, the Chunk);
- the worker frames: a delta frame out (the wire tuple, pickle, length header) and in (read,
  unpickle, Chunk), and, from real streams through the worker, the CPU time per token of the
  caller's reader thread (pipe wakeup, frame, hand-over to its call) and of the thread that
  reads the stream;
- the adapters: building the LangChain / LlamaIndex chunk, and the CPU time per token of
  ``ChatRyzenAI.stream`` / ``RyzenAILLM.stream_chat`` over the core stream they wrap
  (callbacks and the frameworks' own per-chunk work included).

Per call (milliseconds), the time to first token's parts: template render, tokenize, the rest
of preparing (checks, budget plan), a round trip to the worker process, and each adapter's
own preparation of a call. Medians (replays: the fastest of several repeats, so the machine's
load counts as little as it can); CPU times come from the kernel's per-thread accounting.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import sys
import threading
import time
import timeit
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import onnxruntime_genai as og

from ryzenai_core import ChatMessage, Engine
from ryzenai_core.engine.worker import chunk_message
from ryzenai_core.generation.streaming import Chunk, OutputParser
from ryzenai_core.ipc import read_frame, write_frame
from ryzenai_core.options import GenerationOptions, validated_options

sys.path.insert(0, str(Path(__file__).parent))
import overhead  # noqa: E402  (sibling script)
from overhead import MODELS, SYSTEM, THREADS, USER, adapter_streams  # noqa: E402

MESSAGES = [ChatMessage("system", SYSTEM), ChatMessage("user", USER)]


def per_item(fn: Callable[[], object], items: int, repeat: int = 15) -> float:
    """Microseconds per item of ``fn`` (which handles ``items`` items): the fastest of ``repeat`` runs."""
    return min(timeit.repeat(fn, number=1, repeat=repeat)) / items * 1e6


def runtime_step_us(path: Path, prompt: str, new: int) -> float:
    """The runtime's decode step per token (median of 5 raw runs)."""
    cfg = og.Config(str(path))
    cfg.overlay(json.dumps({"model": {"decoder": {"session_options": {"intra_op_num_threads": THREADS}}}}))
    model = og.Model(cfg)
    ids = og.Tokenizer(model).encode(prompt)
    samples = []
    for _ in range(5):
        params = og.GeneratorParams(model)
        params.set_search_options(max_length=len(ids) + new, do_sample=False)
        gen = og.Generator(model, params)
        gen.append_tokens(ids)
        t0 = time.perf_counter()
        while not gen.is_done():
            gen.generate_next_token()
            gen.get_next_tokens()
        samples.append((time.perf_counter() - t0) / new * 1e6)
    return statistics.median(samples)


def loop_pieces(engine: Engine, tokens: list[int]) -> dict[str, float]:
    """The generation loop's and the frames' pure-Python pieces, replayed on ``tokens``."""
    session = engine.inline_session()
    n = len(tokens)
    decoder = session.incremental_decoder()
    texts = [decoder.feed(t) for t in tokens]

    def detokenize() -> None:
        d = session.incremental_decoder()
        for t in tokens:
            d.feed(t)

    def parse(**kw: Any) -> Callable[[], None]:
        def run() -> None:
            p = OutputParser(**kw)
            for x in texts:
                p.feed(x)

        return run

    def chunks() -> None:
        for i, x in enumerate(texts):
            Chunk(x, "", token_ids=[tokens[i]])

    out_frames = io.BytesIO()

    def frame_out() -> None:
        out_frames.seek(0)
        out_frames.truncate()
        for i, x in enumerate(texts):
            write_frame(out_frames, chunk_message(1, Chunk(x, "", token_ids=[tokens[i]])))

    frame_out()
    data = out_frames.getvalue()

    def frame_in() -> None:
        stream = io.BytesIO(data)
        for _ in texts:
            msg = read_frame(stream)
            Chunk(text=msg.text, token_ids=msg.token_ids)

    core_chunks = [Chunk(x, "", token_ids=[tokens[i]]) for i, x in enumerate(texts)]
    out = {
        "detokenize (IncrementalDecoder.feed)": per_item(detokenize, n),
        "output parser, plain text": per_item(parse(), n),
        "output parser, 2 stop strings": per_item(parse(stop=["\n\n", "User:"]), n),
        "output parser, reasoning markers": per_item(parse(reasoning_markers=("<think>", "</think>")), n),
        "Chunk object": per_item(chunks, n),
        "delta frame out (wire tuple, pickle, header)": per_item(frame_out, n),
        "delta frame in (read, unpickle, Chunk)": per_item(frame_in, n),
    }
    try:
        from langchain_ryzenai._convert import generation_chunk

        out["LangChain chunk (generation_chunk)"] = per_item(lambda: [generation_chunk(c, "m") for c in core_chunks], n)
    except ImportError:
        pass
    try:
        from llamaindex_ryzenai._convert import ResponseFold

        def fold() -> None:
            f = ResponseFold("m")
            for c in core_chunks:
                f.add(c)

        out["LlamaIndex response (ResponseFold.add)"] = per_item(fold, n)
    except ImportError:
        pass
    return out


def _thread_cpu(thread: threading.Thread) -> float:
    """CPU seconds of another thread of this process."""
    assert thread.ident is not None
    return time.clock_gettime(time.pthread_getcpuclockid(thread.ident))


def _first_and_count(chunks: Iterator[object]) -> float:
    """Seconds to the first item of ``chunks`` (read to the end)."""
    t0 = time.perf_counter()
    first = None
    for _ in chunks:
        if first is None:
            first = time.perf_counter()
    return (first or time.perf_counter()) - t0


def thread_cpu(path: Path, new: int, rounds: int) -> tuple[dict[str, float], dict[str, float]]:
    """CPU microseconds per token of the caller's threads; milliseconds to the first chunk over the core's.

    The streams go through the worker (``Engine.stream``, ``ChatRyzenAI.stream``,
    ``RyzenAILLM.stream_chat``) and, for the caller's side of the in-process hand-over, the
    inline engine; one of each per round.
    """
    worker = Engine.get(path, num_threads=THREADS, execution="process")
    worker.load()
    (reader,) = (t for t in threading.enumerate() if t.name == f"ryzenai-reader-{worker.worker_pid()}")
    inline = Engine.get(path, num_threads=THREADS, execution="inline")
    inline.load()
    opts = validated_options(max_new_tokens=new, temperature=0, kv_reuse=False)
    streams: dict[str, Callable[[], Iterator[object]]] = {
        "Engine.stream (worker)": lambda: worker.stream(MESSAGES, opts),
        "Engine.stream (inline)": lambda: inline.stream(MESSAGES, opts),
    }
    readers = {"Engine.stream (worker)": reader}
    names = {"langchain_stream": "ChatRyzenAI.stream", "llamaindex_stream": "RyzenAILLM.stream_chat"}
    for k, pieces in adapter_streams(path, new).items():
        streams[names[k]] = pieces
    for fn in streams.values():
        _first_and_count(fn())
    consumer: dict[str, list[float]] = {k: [] for k in streams}
    first: dict[str, list[float]] = {k: [] for k in streams}
    reading: dict[str, list[float]] = {k: [] for k in readers}
    for _ in range(rounds):
        for k, fn in streams.items():
            time.sleep(0.1)
            r0 = {r: _thread_cpu(t) for r, t in readers.items()}
            c0 = time.thread_time()
            first[k].append(_first_and_count(fn()))
            consumer[k].append((time.thread_time() - c0) / new * 1e6)
            if k in readers:
                reading[k].append((_thread_cpu(readers[k]) - r0[k]) / new * 1e6)
    per_token = {f"caller's reader thread, {k}": statistics.median(v) for k, v in reading.items()}
    per_token.update({f"thread reading {k}": statistics.median(v) for k, v in consumer.items()})
    core = first["Engine.stream (worker)"]
    per_call = {
        f"first chunk, {k} over Engine.stream (worker)": statistics.median(
            (a - b) * 1000 for a, b in zip(v, core, strict=True)
        )
        for k, v in first.items()
        if k != "Engine.stream (worker)"
    }
    return per_token, per_call


def median_ms(fn: Callable[[], object], repeat: int = 30) -> float:
    fn()
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples) * 1000


def call_costs(path: Path) -> dict[str, float]:
    """Milliseconds per call of the steps before the first token that the raw loop does not take."""
    inline = Engine.get(path, num_threads=THREADS, execution="inline")
    inline.load()
    session = inline.inline_session()
    worker = Engine.get(path, num_threads=THREADS, execution="process")
    worker.load()
    opts = GenerationOptions()
    prompt = session.render(MESSAGES, opts)
    out = {
        "template render": median_ms(lambda: session.render(MESSAGES, opts)),
        "tokenize": median_ms(lambda: session.encode(prompt)),
        "prepare (render, tokenize, checks, budget plan)": median_ms(lambda: session.prompts.prepare(MESSAGES, opts)),
        "worker round trip (a small call)": median_ms(lambda: worker.backend.call("encode", "x")),
    }
    return out


def main() -> None:
    global THREADS
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="*", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--new-tokens", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", type=Path, default=None, help="write the results here")
    parser.add_argument("--threads", type=int, default=2, help="runtime threads, the same on every side")
    args = parser.parse_args()
    THREADS = overhead.THREADS = args.threads
    results: dict[str, Any] = {
        "threads": THREADS,
        "onnxruntime_genai": og.__version__,
        "load_average": list(os.getloadavg()),
        "models": {},
    }
    for name in args.models:
        path = MODELS[name]
        if not (path / "genai_config.json").exists():
            print(f"skipping {name}: {path} is missing (python scripts/build_fixtures.py --bench-only)")
            continue
        inline = Engine.get(path, num_threads=THREADS, execution="inline")
        inline.load()
        opts = validated_options(max_new_tokens=args.new_tokens, temperature=0, kv_reuse=False)
        tokens = inline.generate(MESSAGES, opts).token_ids
        prompt = inline.render(MESSAGES)
        threads, firsts = thread_cpu(path, args.new_tokens, args.rounds)
        res = {
            "per_token_us": {
                "runtime step (generate_next_token + get_next_tokens)": runtime_step_us(path, prompt, args.new_tokens),
                **loop_pieces(inline, tokens),
                **threads,
            },
            "per_call_ms": {**call_costs(path), **firsts},
        }
        results["models"][name] = res
        step = res["per_token_us"]["runtime step (generate_next_token + get_next_tokens)"]
        print(f"\n{name}, {THREADS} threads, {len(tokens)} tokens: microseconds per token (% of the runtime step)")
        for k, v in res["per_token_us"].items():
            print(f"  {k:<58}{v:>10.2f}{100 * v / step:>9.2f}%")
        print("  milliseconds per call")
        for k, v in res["per_call_ms"].items():
            print(f"  {k:<58}{v:>10.3f}")
        Engine.close_all()
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2) + "\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
