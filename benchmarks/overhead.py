"""What the plugin adds on top of onnxruntime-genai, end to end, measured side by side in one run.

    python scripts/build_fixtures.py --bench-only   # once: builds benchmarks/models/bench-30m (needs torch)
    python benchmarks/overhead.py [--rounds 9] [--new-tokens 256] [--json benchmarks/results/overhead.json]

Several ways to stream the same answer, one after another in each round (the order rotates
from round to round), on the ~30M-parameter int4 model and on the tiny test fixture:

- ``raw_oga_loop``: the plain onnxruntime-genai loop a user would write (encode the rendered
  prompt, ``append_tokens``, then ``generate_next_token`` / ``get_next_tokens`` and
  ``TokenizerStream.decode`` per token);
- ``core_inline`` / ``core_worker``: ``Engine.stream`` in this process / through the worker process;
- ``langchain_stream``: ``ChatRyzenAI.stream``; ``llamaindex_stream``: ``RyzenAILLM.stream_chat``
  (both with their default, the worker process; with ``--inline-adapters`` also
  ``langchain_stream_inline`` and ``llamaindex_stream_inline``, ``execution="inline"``);
- three floors, with none of the plugin's code: ``floor_pipe``, the raw loop in a child process
  (started once) that writes each token's text to its stdout as a frame (4-byte length, UTF-8),
  read with ``os.read`` by the thread that consumes the stream: the least that keeping the model
  in another process costs; ``floor_langchain`` / ``floor_llamaindex``, that pipe behind a
  trivial LangChain ``BaseChatModel`` (``.stream``) / LlamaIndex ``LLM`` (``stream_chat``), one
  chunk per token and a last one with the usage, as the adapters send: what each framework
  costs per chunk.

Same prompt tokens, same number of new tokens (greedy; a fixed count, checked), the same runtime
threads, KV prefix reuse off (every call prefills cold). Each round times every method once;
its speed is raw time / its time in that round, and the reported figure is the median over the
rounds, with the lowest and highest. The time to first token is the time from the call to its
first text; its overhead is the method's minus the raw loop's in the same round, next to
the template render (the raw loop starts from the rendered prompt's text). CPU time (every
thread of this process, of the worker processes and of the floor's child, from the kernel's
accounting) is reported the same way, raw CPU time / the method's: it shows the work a method
adds even when other jobs on the machine make wall times jump. ``--threads`` sets the runtime
threads of every side.

The per-layer breakdown (where the time per token and per call goes) is in
``benchmarks/breakdown.py``.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import random
import statistics
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import onnxruntime_genai as og

from ryzenai_core import ChatMessage, Engine
from ryzenai_core.options import validated_options

ROOT = Path(__file__).resolve().parents[1]
MODELS = {
    "bench-30m": ROOT / "benchmarks" / "models" / "bench-30m",
    "tiny-llama": ROOT / "tests" / "fixtures" / "models" / "tiny-llama",
}
THREADS = 2
#: ONNX Runtime session options of every side (``--session-options``), e.g. no spinning threads.
SESSION_OPTIONS: dict[str, Any] = {}
#: Also time both adapters with ``execution="inline"`` (``--inline-adapters``).
INLINE_ADAPTERS = False
METHODS: list[str] = []  # only these (and the raw loop); empty: all
SYSTEM = "You answer questions about Ryzen AI model packages."
USER = "What is a prefill bucket and why is the prompt padded to it? " * 4

#: The floors: no plugin code (the pipe alone, then each framework over it).
FLOORS = ("floor_pipe", "floor_langchain", "floor_llamaindex")

#: One timed run: (seconds from the call to the end, seconds to the first text, new tokens).
Run = tuple[float, float, int]


def _overlay() -> str:
    """The genai_config overlay of the raw loop and the floor's child: the runtime threads and session options."""
    session_options = {"intra_op_num_threads": THREADS, **SESSION_OPTIONS}
    return json.dumps({"model": {"decoder": {"session_options": session_options}}})


def raw_method(model_path: Path, prompt: str, new: int) -> Callable[[], Run]:
    """The plain OGA streaming loop, from the rendered prompt's text."""
    cfg = og.Config(str(model_path))
    cfg.overlay(_overlay())
    model = og.Model(cfg)
    tokenizer = og.Tokenizer(model)

    def once() -> Run:
        t0 = time.perf_counter()
        ids = tokenizer.encode(prompt)
        stream = tokenizer.create_stream()
        params = og.GeneratorParams(model)
        params.set_search_options(max_length=len(ids) + new, do_sample=False)
        gen = og.Generator(model, params)
        gen.append_tokens(ids)
        first = None
        n = 0
        while not gen.is_done():
            gen.generate_next_token()
            text = stream.decode(gen.get_next_tokens()[0])
            n += 1
            if first is None and text:
                first = time.perf_counter()
        end = time.perf_counter()
        return end - t0, (first or end) - t0, n

    return once


#: The floor's child: ``python -c CHILD_SOURCE MODEL OVERLAY``. One JSON request a line on stdin
#: (``{"prompt": ..., "new": ...}``); the raw loop for it, each token's text a frame on stdout
#: (4-byte little-endian length, UTF-8), then the end frame (length 0xFFFFFFFF). Its own stdout
#: is moved to stderr, so nothing a library prints can land between the frames.
CHILD_SOURCE = """
import json, os, struct, sys
import onnxruntime_genai as og

out = os.dup(1)
os.dup2(2, 1)
cfg = og.Config(sys.argv[1])
cfg.overlay(sys.argv[2])
model = og.Model(cfg)
tokenizer = og.Tokenizer(model)
for line in sys.stdin:
    request = json.loads(line)
    ids = tokenizer.encode(request["prompt"])
    stream = tokenizer.create_stream()
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=len(ids) + request["new"], do_sample=False)
    gen = og.Generator(model, params)
    gen.append_tokens(ids)
    while not gen.is_done():
        gen.generate_next_token()
        data = stream.decode(gen.get_next_tokens()[0]).encode()
        os.write(out, struct.pack("<I", len(data)) + data)
    os.write(out, struct.pack("<I", 0xFFFFFFFF))
    del gen
"""
_HEADER = struct.Struct("<I")
_END = 0xFFFFFFFF


class FloorPipe:
    """The raw loop in a child process (started here, kept until :meth:`close`), read frame by frame."""

    def __init__(self, model_path: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", CHILD_SOURCE, str(model_path), _overlay()],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        self.pid = self.proc.pid

    def stream(self, prompt: str, new: int) -> Iterator[tuple[str, int]]:
        """(text, 1) per token, read with blocking ``os.read`` in the consuming thread (read it to the end)."""
        stdin, stdout = self.proc.stdin, self.proc.stdout
        assert stdin is not None and stdout is not None
        stdin.write(json.dumps({"prompt": prompt, "new": new}).encode() + b"\n")
        stdin.flush()
        fd = stdout.fileno()
        buf, pos = b"", 0
        while True:
            if len(buf) - pos >= 4:  # one read can hold several frames, or part of one
                (size,) = _HEADER.unpack_from(buf, pos)
                if size == _END:
                    return
                if len(buf) - pos - 4 >= size:
                    pos += 4 + size
                    yield buf[pos - size : pos].decode(), 1
                    continue
            data = os.read(fd, 65536)
            if not data:
                raise RuntimeError(f"the floor's child ended (exit code {self.proc.wait()})")
            buf, pos = buf[pos:] + data, 0

    def close(self) -> None:
        """End the child (its stdin closes: its loop ends)."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()


def _timed(pieces: Callable[[], Iterator[tuple[str, int]]]) -> Run:
    """Time one stream of (text, new tokens) pieces."""
    t0 = time.perf_counter()
    first = None
    n = 0
    for text, tokens in pieces():
        n += tokens
        if first is None and text:
            first = time.perf_counter()
    end = time.perf_counter()
    return end - t0, (first or end) - t0, n


def core_method(engine: Engine, new: int) -> Callable[[], Run]:
    """``Engine.stream``: every chunk's text and token count."""
    messages = [ChatMessage("system", SYSTEM), ChatMessage("user", USER)]
    opts = validated_options(max_new_tokens=new, temperature=0, kv_reuse=False)

    def pieces() -> Iterator[tuple[str, int]]:
        return ((c.text, len(c.token_ids)) for c in engine.stream(messages, opts))

    return lambda: _timed(pieces)


def adapter_streams(
    model: Path, new: int, execution: str | None = None, suffix: str = ""
) -> dict[str, Callable[[], Iterator[tuple[str, int]]]]:
    """``ChatRyzenAI.stream`` and ``RyzenAILLM.stream_chat`` (those installed) as (text, new tokens) pieces.

    The token count comes from the last chunk's usage. ``execution`` is the adapters' (None: their
    default, the worker process unless ``RYZENAI_LLM_EXECUTION`` says otherwise); ``suffix`` is
    added to the names.
    """
    streams: dict[str, Callable[[], Iterator[tuple[str, int]]]] = {}
    try:
        from langchain_core.messages import HumanMessage, SystemMessage

        from langchain_ryzenai import ChatRyzenAI

        llm = ChatRyzenAI(
            model=str(model),
            temperature=0,
            max_tokens=new,
            num_threads=THREADS,
            kv_reuse=False,
            session_options=SESSION_OPTIONS,
            execution=execution,
        )
        streams["langchain_stream" + suffix] = functools.partial(
            langchain_pieces, llm, [SystemMessage(SYSTEM), HumanMessage(USER)]
        )
    except ImportError:
        pass
    try:
        from llama_index.core.llms import ChatMessage as LIMessage

        from llamaindex_ryzenai import RyzenAILLM

        li = RyzenAILLM(
            model=str(model),
            temperature=0,
            max_new_tokens=new,
            num_threads=THREADS,
            kv_reuse=False,
            session_options=SESSION_OPTIONS,
            execution=execution,
        )
        streams["llamaindex_stream" + suffix] = functools.partial(
            llamaindex_pieces, li, [LIMessage(role="system", content=SYSTEM), LIMessage(role="user", content=USER)]
        )
    except ImportError:
        pass
    return streams


def langchain_pieces(llm: Any, messages: list[Any]) -> Iterator[tuple[str, int]]:
    """A LangChain chat model's ``.stream``: (text, new tokens) per chunk, the count from the last chunk's usage."""
    for c in llm.stream(messages):
        usage = c.usage_metadata
        yield str(c.content), (usage["output_tokens"] if usage else 0)


def llamaindex_pieces(llm: Any, messages: list[Any]) -> Iterator[tuple[str, int]]:
    """A LlamaIndex LLM's ``stream_chat``: (delta, new tokens) per response, the count from the last one's."""
    for r in llm.stream_chat(messages):
        yield r.delta or "", int(r.additional_kwargs.get("completion_tokens", 0))


def floor_streams(
    pipe: FloorPipe, prompt: str, new: int, prompt_tokens: int
) -> dict[str, Callable[[], Iterator[tuple[str, int]]]]:
    """The floors (those whose framework is installed) as (text, new tokens) pieces, read like the adapters."""
    streams: dict[str, Callable[[], Iterator[tuple[str, int]]]] = {"floor_pipe": lambda: pipe.stream(prompt, new)}
    with contextlib.suppress(ImportError):
        from langchain_core.messages import HumanMessage, SystemMessage

        llm = floor_chat_model(pipe, prompt, new, prompt_tokens)
        streams["floor_langchain"] = functools.partial(
            langchain_pieces, llm, [SystemMessage(SYSTEM), HumanMessage(USER)]
        )
    with contextlib.suppress(ImportError):
        from llama_index.core.llms import ChatMessage as LIMessage

        li = floor_llm(pipe, prompt, new)
        streams["floor_llamaindex"] = functools.partial(
            llamaindex_pieces, li, [LIMessage(role="system", content=SYSTEM), LIMessage(role="user", content=USER)]
        )
    return streams


def floor_chat_model(pipe: FloorPipe, prompt: str, new: int, prompt_tokens: int) -> Any:
    """A trivial LangChain chat model over the floor's pipe (the messages are the rendered ``prompt``'s).

    One chunk per token (each reported to the run manager), then a last chunk with the usage, as
    ``ChatRyzenAI`` streams.
    """
    from langchain_core.callbacks import CallbackManagerForLLMRun
    from langchain_core.language_models import BaseChatModel
    from langchain_core.language_models.chat_models import generate_from_stream
    from langchain_core.messages import AIMessageChunk, BaseMessage, UsageMetadata
    from langchain_core.outputs import ChatGenerationChunk, ChatResult

    class FloorChat(BaseChatModel):
        @property
        def _llm_type(self) -> str:
            return "floor-pipe"

        def _stream(
            self,
            messages: list[BaseMessage],
            stop: list[str] | None = None,
            run_manager: CallbackManagerForLLMRun | None = None,
            **kwargs: Any,
        ) -> Iterator[ChatGenerationChunk]:
            n = 0
            for text, _ in pipe.stream(prompt, new):
                n += 1
                chunk = ChatGenerationChunk(message=AIMessageChunk(content=text))
                if run_manager is not None:
                    run_manager.on_llm_new_token(text, chunk=chunk)
                yield chunk
            usage = UsageMetadata(input_tokens=prompt_tokens, output_tokens=n, total_tokens=prompt_tokens + n)
            chunk = ChatGenerationChunk(
                message=AIMessageChunk(content="", usage_metadata=usage, chunk_position="last"),
                generation_info={"finish_reason": "length"},
            )
            if run_manager is not None:
                run_manager.on_llm_new_token("", chunk=chunk)
            yield chunk

        def _generate(
            self,
            messages: list[BaseMessage],
            stop: list[str] | None = None,
            run_manager: CallbackManagerForLLMRun | None = None,
            **kwargs: Any,
        ) -> ChatResult:
            return generate_from_stream(self._stream(messages, stop=stop, run_manager=run_manager, **kwargs))

    return FloorChat()


def floor_llm(pipe: FloorPipe, prompt: str, new: int) -> Any:
    """A trivial LlamaIndex LLM over the floor's pipe (the messages are the rendered ``prompt``'s).

    ``chat`` / ``stream_chat`` decorated like ``RyzenAILLM``'s (``llm_chat_callback``; LlamaIndex's
    span mixin adds the span): one response per token with the text so far, then a last one with
    the token count, as ``RyzenAILLM`` streams. Completion comes from chat; the async methods run
    the sync ones.
    """
    from collections.abc import Sequence

    from llama_index.core.base.llms.generic_utils import (
        chat_to_completion_decorator,
        stream_chat_to_completion_decorator,
    )
    from llama_index.core.base.llms.types import (
        ChatMessage,
        ChatResponse,
        ChatResponseAsyncGen,
        ChatResponseGen,
        CompletionResponse,
        CompletionResponseAsyncGen,
        CompletionResponseGen,
        LLMMetadata,
    )
    from llama_index.core.llms.callbacks import llm_chat_callback, llm_completion_callback
    from llama_index.core.llms.llm import LLM

    def responses() -> ChatResponseGen:
        text, n = "", 0
        for piece, _ in pipe.stream(prompt, new):
            text += piece
            n += 1
            yield ChatResponse(message=ChatMessage(role="assistant", content=text), delta=piece)
        yield ChatResponse(
            message=ChatMessage(role="assistant", content=text), delta="", additional_kwargs={"completion_tokens": n}
        )

    class FloorLLM(LLM):
        @classmethod
        def class_name(cls) -> str:
            return "FloorLLM"

        @property
        def metadata(self) -> LLMMetadata:
            return LLMMetadata(is_chat_model=True, num_output=new, model_name="floor-pipe")

        @llm_chat_callback()
        def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
            *_, last = responses()
            return last

        @llm_chat_callback()
        def stream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseGen:
            return responses()

        @llm_completion_callback()
        def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
            return chat_to_completion_decorator(self.chat)(prompt, **kwargs)

        @llm_completion_callback()
        def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseGen:
            return stream_chat_to_completion_decorator(self.stream_chat)(prompt, **kwargs)

        @llm_chat_callback()
        async def achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
            response: ChatResponse = self.chat(messages, **kwargs)
            return response

        @llm_chat_callback()
        async def astream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseAsyncGen:
            async def gen() -> ChatResponseAsyncGen:
                for r in self.stream_chat(messages, **kwargs):
                    yield r

            return gen()

        @llm_completion_callback()
        async def acomplete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
            response: CompletionResponse = self.complete(prompt, formatted, **kwargs)
            return response

        @llm_completion_callback()
        async def astream_complete(
            self, prompt: str, formatted: bool = False, **kwargs: Any
        ) -> CompletionResponseAsyncGen:
            async def gen() -> CompletionResponseAsyncGen:
                for r in self.stream_complete(prompt, formatted, **kwargs):
                    yield r

            return gen()

    return FloorLLM()


def render_ms(engine: Engine, repeat: int = 50) -> float:
    """Median time to render the chat template for the benchmark's messages (in this process)."""
    from ryzenai_core.options import GenerationOptions

    session = engine.inline_session()
    messages = [ChatMessage("system", SYSTEM), ChatMessage("user", USER)]
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        session.render(messages, GenerationOptions())
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples) * 1000


def process_cpu(pid: int | None) -> float:
    """CPU seconds of every thread of process ``pid`` so far (0 without one)."""
    total = 0
    if pid is None:
        return 0.0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError):
            pass  # a thread that just ended
    return total / 1e9


def measure(name: str, path: Path, rounds: int, new: int) -> dict[str, Any]:
    """Every method on one model, ``rounds`` interleaved rounds."""
    opts = SESSION_OPTIONS or None
    inline = Engine.get(path, num_threads=THREADS, execution="inline", session_options=opts)
    worker = Engine.get(path, num_threads=THREADS, execution="process", session_options=opts)
    inline.load()
    worker.load()
    messages = [ChatMessage("system", SYSTEM), ChatMessage("user", USER)]
    prompt = inline.render(messages)
    prompt_tokens = len(inline.encode(prompt))
    live: dict[str, Callable[[], Run]] = {
        "raw_oga_loop": raw_method(path, prompt, new),
        "core_inline": core_method(inline, new),
        "core_worker": core_method(worker, new),
    }
    for k, pieces in adapter_streams(path, new).items():
        live[k] = functools.partial(_timed, pieces)
    if INLINE_ADAPTERS:
        for k, pieces in adapter_streams(path, new, "inline", "_inline").items():
            live[k] = functools.partial(_timed, pieces)
    pipe = FloorPipe(path) if not METHODS or set(METHODS) & set(FLOORS) else None  # the child: only when timed
    if pipe is not None:
        for k, pieces in floor_streams(pipe, prompt, new, prompt_tokens).items():
            live[k] = functools.partial(_timed, pieces)
    if METHODS:
        if unknown := set(METHODS) - set(live) - set(FLOORS):
            raise SystemExit(f"unknown --methods {sorted(unknown)}; known: {sorted({*live, *FLOORS})}")
        live = {k: fn for k, fn in live.items() if k == "raw_oga_loop" or k in METHODS}
    if missing := [k for k in FLOORS if k not in live and (not METHODS or k in METHODS)]:
        print(f"skipping {', '.join(missing)}: its framework is not installed")
    for fn in live.values():  # warm-up: loads models, compiles templates, fills caches
        fn()
    runs: dict[str, list[Run]] = {k: [] for k in live}
    cpu: dict[str, list[float]] = {k: [] for k in live}
    names = list(live)
    pids = (worker.worker_pid(), pipe.pid if pipe is not None else None)
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for k in order:
            time.sleep(0.2)  # let the previous run's runtime threads stop spinning (2 cores)
            c0 = time.process_time() + sum(map(process_cpu, pids))
            runs[k].append(live[k]())
            cpu[k].append(time.process_time() + sum(map(process_cpu, pids)) - c0)
    if pipe is not None:
        pipe.close()
    for k, rs in runs.items():
        counts = {n for _, _, n in rs}
        if counts != {new}:
            raise SystemExit(f"{name}/{k}: generated {sorted(counts)} tokens, expected {new} in every run")
    raw = runs["raw_oga_loop"]
    out: dict[str, Any] = {
        "prompt_tokens": prompt_tokens,
        "new_tokens": new,
        "rounds": rounds,
        "template_render_ms": render_ms(inline),
        "raw_ms_per_token": statistics.median(t / new for t, _, _ in raw) * 1000,
        "raw_ttft_ms": statistics.median(f for _, f, _ in raw) * 1000,
        "speed_vs_raw": {},
        "cpu_time_vs_raw": {},
        "ttft_overhead_ms": {},
        "overhead_us_per_token": {},
        "fastest_round_vs_raw": {},
        "rounds_s": {
            k: [[round(t, 5), round(f, 5), round(c, 5)] for (t, f, _), c in zip(rs, cpu[k], strict=True)]
            for k, rs in runs.items()
        },
    }
    for k, rs in runs.items():
        ratios = [rt / mt for (rt, _, _), (mt, _, _) in zip(raw, rs, strict=True)]
        ttft = [(mf - rf) * 1000 for (_, rf, _), (_, mf, _) in zip(raw, rs, strict=True)]
        per_token = [(mt - rt) / new * 1e6 for (rt, _, _), (mt, _, _) in zip(raw, rs, strict=True)]
        out["speed_vs_raw"][k] = {**_summary(ratios, 3), "median_90pct": _median_interval(ratios)}
        out["fastest_round_vs_raw"][k] = round(min(t for t, _, _ in raw) / min(t for t, _, _ in rs), 3)
        out["cpu_time_vs_raw"][k] = _summary([c / r for r, c in zip(cpu["raw_oga_loop"], cpu[k], strict=True)], 3)
        out["ttft_overhead_ms"][k] = _summary(ttft, 2)
        out["overhead_us_per_token"][k] = _summary(per_token, 1)
    return out


def _summary(values: list[float], digits: int) -> dict[str, float]:
    return {
        "median": round(statistics.median(values), digits),
        "min": round(min(values), digits),
        "max": round(max(values), digits),
    }


def _median_interval(values: list[float], resamples: int = 2000) -> list[float]:
    """A 90% bootstrap interval of the median: how far the reported median could move in a rerun
    under the same conditions (seeded, so a result file reproduces)."""
    rng = random.Random(0)
    medians = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(resamples))
    return [round(medians[int(0.05 * resamples)], 3), round(medians[int(0.95 * resamples) - 1], 3)]


def markdown_header(results: dict[str, Any]) -> list[str]:
    """The header of the table :func:`markdown_rows` fills (one column a method, as the rows have them)."""
    cols = [
        "run, conditions (`benchmarks/results/overhead-run*.json`)",
        "model, raw loop ms/token",
        "core in-process",
        "core via the worker",
        "`ChatRyzenAI.stream`",
        "`RyzenAILLM.stream_chat`",
    ]
    if results.get("inline_adapters"):
        cols += ["`ChatRyzenAI.stream`, inline", "`RyzenAILLM.stream_chat`, inline"]
    cols += ["floor: pipe", "floor: LangChain", "floor: LlamaIndex"]
    return ["| " + " | ".join(cols) + " |", "|" + " --- |" * len(cols)]


def markdown_rows(results: dict[str, Any]) -> list[str]:
    """One README table row per model: speed (lowest-highest), CPU time and TTFT overhead of each method
    (with ``--inline-adapters``, two more cells: the adapters with ``execution="inline"``), then the
    three floors ("-" for a method not timed)."""
    rows = []
    for name, res in results["models"].items():
        cells = []
        inline = ("langchain_stream_inline", "llamaindex_stream_inline") if results.get("inline_adapters") else ()
        methods = ("core_inline", "core_worker", "langchain_stream", "llamaindex_stream")
        for k in (*methods, *inline, *FLOORS):
            if k not in res["speed_vs_raw"]:
                cells.append("-")
                continue
            s, c, t = res["speed_vs_raw"][k], res["cpu_time_vs_raw"][k], res["ttft_overhead_ms"][k]
            band = (
                f"90% {s['median_90pct'][0]:.2f}-{s['median_90pct'][1]:.2f}"
                if "median_90pct" in s
                else (f"{s['min']:.2f}-{s['max']:.2f}")
            )
            cells.append(f"{s['median']:.2f}x ({band}); CPU {c['median']:.2f}x; TTFT {t['median']:+.1f} ms")
        head = (
            f"{results['label']}; {res['rounds']} rounds, {results['threads']} thread(s), load average "
            f"{results['load_average_before'][0]:.1f} / {results['load_average_after'][0]:.1f}"
        )
        rows.append(f"| {head} | {name}, {res['raw_ms_per_token']:.2f} | " + " | ".join(cells) + " |")
    return rows


def load_average() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


def main() -> None:
    global THREADS, INLINE_ADAPTERS, METHODS
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--new-tokens", type=int, default=256)
    parser.add_argument("--models", nargs="*", default=list(MODELS), choices=list(MODELS))
    parser.add_argument(
        "--json", type=Path, default=None, help="write the results here (e.g. benchmarks/results/overhead.json)"
    )
    parser.add_argument("--label", default="", help="a note stored with the results (e.g. the load on the machine)")
    parser.add_argument("--threads", type=int, default=2, help="runtime threads, the same on every side")
    parser.add_argument(
        "--session-options",
        type=json.loads,
        default={},
        help='ONNX Runtime session options of every side, as JSON (e.g. \'{"session.intra_op.allow_spinning": "0"}\')',
    )
    parser.add_argument(
        "--inline-adapters",
        action="store_true",
        help='also time both adapters with execution="inline" (no worker process)',
    )
    parser.add_argument(
        "--methods",
        nargs="*",
        default=[],
        help="time only these methods beside the raw loop (e.g. core_worker floor_pipe): "
        "fewer methods a round, so the methods of a round run closer together in time",
    )
    args = parser.parse_args()
    METHODS = args.methods
    THREADS = args.threads
    INLINE_ADAPTERS = args.inline_adapters
    SESSION_OPTIONS.update(args.session_options)
    results: dict[str, Any] = {
        "threads": THREADS,
        "session_options": SESSION_OPTIONS,
        "inline_adapters": INLINE_ADAPTERS,
        "methods": METHODS or "all",
        "cpus": os.cpu_count(),
        "onnxruntime_genai": og.__version__,
        "label": args.label,
        "load_average_before": load_average(),
        "models": {},
    }
    for name in args.models:
        path = MODELS[name]
        if not (path / "genai_config.json").exists():
            print(f"skipping {name}: {path} is missing (python scripts/build_fixtures.py --bench-only)")
            continue
        res = measure(name, path, args.rounds, args.new_tokens)
        results["models"][name] = res
        print(
            f"\n{name}: prompt {res['prompt_tokens']} tokens, {args.new_tokens} new, {THREADS} threads, "
            f"{args.rounds} rounds; raw loop {res['raw_ms_per_token']:.3f} ms/token, TTFT {res['raw_ttft_ms']:.1f} ms; "
            f"template render {res['template_render_ms']:.2f} ms"
        )
        print(
            f"  {'method':<26}{'speed vs raw (min-max; median 90%)':>42}{'us/token over raw':>20}"
            f"{'TTFT over raw, ms':>20}{'CPU time vs raw':>18}{'fastest rounds':>16}"
        )
        for k, s in res["speed_vs_raw"].items():
            o, t, c = res["overhead_us_per_token"][k], res["ttft_overhead_ms"][k], res["cpu_time_vs_raw"][k]
            lo, hi = s["median_90pct"]
            print(
                f"  {k:<26}{s['median']:>10.3f}x ({s['min']:.3f}-{s['max']:.3f}; {lo:.3f}-{hi:.3f}){o['median']:>14.1f}"
                f"{t['median']:>20.2f}{c['median']:>17.3f}x{res['fastest_round_vs_raw'][k]:>15.3f}x"
            )
        with contextlib.suppress(Exception):
            Engine.close_all()
    results["load_average_after"] = load_average()
    print("\nREADME rows:")
    for row in markdown_header(results) + markdown_rows(results):
        print(row)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2) + "\n")
        print(f"wrote {args.json}")
    Engine.close_all()


if __name__ == "__main__":
    sys.exit(main())
