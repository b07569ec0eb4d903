"""Failure paths: each one a typed error whose message says what happened, then a call that works.

Async: a timeout, a killed worker, a generation error and a cancelled task through
``Engine.astream``/``agenerate``, ``ChatRyzenAI.astream``/``ainvoke`` and
``RyzenAILLM.astream_chat``/``achat``, in both execution modes. The worker: it cannot
start, its session cannot start, a write finds it gone, a call times out or fails in it,
an exception that does not pickle, a torn frame, ``Engine.close``/``close_all``.
Real OGA on the fixture models.
"""

from __future__ import annotations

import asyncio
import io
import os
import pickle
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from conftest import LASTING_MODEL, LASTING_TOKENS, TINY_LLAMA, close_engines_under, process_alive
from ryzenai_core import (
    ChatMessage,
    ConfigError,
    Engine,
    GenerationError,
    GenerationTimeoutError,
    InvalidRequestError,
    WorkerDiedError,
)
from ryzenai_core import workers as workers_module
from ryzenai_core.engine.client import WorkerClient
from ryzenai_core.engine.inline import InlineBackend
from ryzenai_core.errors import ContextWindowExceededError
from ryzenai_core.ipc import (
    Call,
    Delta,
    ProtocolError,
    Ready,
    Stream,
    portable_exception,
    read_frame,
    reap,
    write_frame,
)
from ryzenai_core.lifecycle import Registry
from ryzenai_core.options import validated_options

MSGS = [ChatMessage("user", "Tell me about the NPU.")]
LONG = LASTING_TOKENS  # of LASTING_MODEL: an answer that lasts seconds, stopped long before its end
SHORT = 3
# Output that cannot close within 5 tokens: the runtime stops, the engine raises GenerationError.
UNFINISHED = {
    "type": "json_schema",
    "data": {"type": "object", "properties": {"text": {"type": "string", "minLength": 50}}, "required": ["text"]},
}
SURFACES = [
    "Engine.astream",
    "Engine.agenerate",
    "ChatRyzenAI.astream",
    "ChatRyzenAI.ainvoke",
    "RyzenAILLM.astream_chat",
    "RyzenAILLM.achat",
]
EXECUTIONS = ["process", "inline"]


def _module_copy(tmp_path_factory, model: Path, name: str):
    import shutil

    folder = tmp_path_factory.mktemp(name)
    path = folder / model.name
    shutil.copytree(model, path)
    yield path
    close_engines_under(folder)


@pytest.fixture(scope="module")
def shared_copy(tmp_path_factory):
    """A copy of the fixture model for this module's calls that leave the model usable."""
    yield from _module_copy(tmp_path_factory, TINY_LLAMA, "failure-paths")


@pytest.fixture(scope="module")
def lasting_copy(tmp_path_factory):
    """A copy of the model whose longest answer lasts seconds (for timeouts that must come first)."""
    yield from _module_copy(tmp_path_factory, LASTING_MODEL, "failure-paths-lasting")


@pytest.fixture
def own_copy(copy_package, tmp_path):
    """A copy of the fixture model on its own worker (for tests that kill or break it)."""
    yield copy_package(TINY_LLAMA, "own-worker")
    close_engines_under(tmp_path)


@pytest.fixture
def own_lasting(copy_package, tmp_path):
    """A copy of LASTING_MODEL on its own worker (for tests that kill or break it mid-answer)."""
    yield copy_package(LASTING_MODEL, "own-worker")
    close_engines_under(tmp_path)


async def run(
    surface: str,
    path: Path,
    execution: str,
    *,
    max_tokens: int,
    timeout: float | None = None,
    guidance: dict[str, Any] | None = None,
) -> int:
    """One async call through ``surface``, read to the end: the new tokens it reports."""
    extra: dict[str, Any] = {"guidance": guidance} if guidance is not None else {}
    if surface.startswith("Engine."):
        engine = Engine.get(path, execution=execution)  # type: ignore[arg-type]
        options = validated_options(max_new_tokens=max_tokens, temperature=0, kv_reuse=False, **extra)
        if surface == "Engine.agenerate":
            return (await engine.agenerate(MSGS, options, timeout=timeout)).usage.completion_tokens
        last = None
        async for chunk in engine.astream(MSGS, options, timeout=timeout):
            last = chunk
        return last.usage.completion_tokens
    if surface.startswith("ChatRyzenAI."):
        from langchain_ryzenai import ChatRyzenAI

        llm = ChatRyzenAI(
            model=str(path), execution=execution, max_tokens=max_tokens, temperature=0, kv_reuse=False, timeout=timeout
        )
        if surface == "ChatRyzenAI.ainvoke":
            return (await llm.ainvoke(MSGS[0].content, **extra)).usage_metadata["output_tokens"]
        total = None
        async for chunk in llm.astream(MSGS[0].content, **extra):
            total = chunk if total is None else total + chunk
        return total.usage_metadata["output_tokens"]
    from llama_index.core.llms import ChatMessage as LIMessage

    from llamaindex_ryzenai import RyzenAILLM

    llm = RyzenAILLM(
        model=str(path), execution=execution, max_new_tokens=max_tokens, temperature=0, kv_reuse=False, timeout=timeout
    )
    messages = [LIMessage(role="user", content=MSGS[0].content)]
    if surface == "RyzenAILLM.achat":
        return (await llm.achat(messages, **extra)).additional_kwargs["completion_tokens"]
    responses = [r async for r in await llm.astream_chat(messages, **extra)]
    return responses[-1].additional_kwargs["completion_tokens"]


# _streaming and _idle read the worker client's tables of calls in flight (its private state): what they
# check, a call's progress and nothing left behind, has no public view, and an ainvoke shows no chunk.
def _streaming(engine: Engine) -> bool:
    """Whether a call on ``engine`` has delivered its first chunk to its caller."""
    backend = engine.backend
    if isinstance(backend, WorkerClient):
        return any(c.control.tokens for c in list(backend._streams.values()))
    if isinstance(backend, InlineBackend):
        holder = backend.session.scheduler.holder
        return holder is not None and holder.tokens > 0
    return False


async def _first_chunk(engine: Engine, task: asyncio.Task[Any]) -> None:
    while not _streaming(engine):
        assert not task.done(), task.exception() if not task.cancelled() else "cancelled"
        await asyncio.sleep(0.005)


def _idle(engine: Engine) -> None:
    """Nothing of a finished call is left behind."""
    backend = engine.backend
    if isinstance(backend, WorkerClient):
        assert not backend._handlers and not backend._streams and not backend._sent_to
    else:
        assert backend.session.scheduler.holder is None


# ---------------------------------------------------------------- async: timeout
@pytest.mark.parametrize("execution", EXECUTIONS)
@pytest.mark.parametrize("surface", SURFACES)
async def test_async_timeout_names_the_phase_and_the_next_call_works(lasting_copy, surface, execution):
    Engine.get(lasting_copy, execution=execution).load()  # type: ignore[arg-type]
    with pytest.raises(GenerationTimeoutError) as info:
        await run(surface, lasting_copy, execution, max_tokens=LONG, timeout=0.3)
    assert info.value.phase == "generating"
    assert "timeout=0.3 s while generating, after" in str(info.value)
    assert "was cancelled" in str(info.value)
    assert await run(surface, lasting_copy, execution, max_tokens=SHORT, timeout=30) == SHORT
    _idle(Engine.get(lasting_copy, execution=execution))  # type: ignore[arg-type]


# ---------------------------------------------------------------- async: generation error
@pytest.mark.parametrize("execution", EXECUTIONS)
@pytest.mark.parametrize("surface", SURFACES)
async def test_async_generation_error_is_typed_and_the_next_call_works(shared_copy, surface, execution):
    with pytest.raises(GenerationError) as info:
        await run(surface, shared_copy, execution, max_tokens=5, guidance=UNFINISHED)
    assert type(info.value) is GenerationError
    assert "constrained output (json_schema) was not complete after 5 tokens" in str(info.value)
    assert "raise max_new_tokens" in str(info.value) and "pass the schema as response_format" in str(info.value)
    assert await run(surface, shared_copy, execution, max_tokens=SHORT) == SHORT
    _idle(Engine.get(shared_copy, execution=execution))  # type: ignore[arg-type]


# ---------------------------------------------------------------- async: cancellation
@pytest.mark.parametrize("execution", EXECUTIONS)
@pytest.mark.parametrize("surface", SURFACES)
async def test_cancelling_the_task_mid_stream_frees_the_model(lasting_copy, surface, execution, monkeypatch):
    engine = Engine.get(lasting_copy, execution=execution)  # type: ignore[arg-type]
    engine.load()
    frames: list[str] = []  # what the worker sent: the cancelled generation must stop, not run to its end
    real = workers_module.parse_frame

    def counting(data):
        message = real(data)
        if message is not None:
            frames.append(type(message).__name__)
        return message

    monkeypatch.setattr(workers_module, "parse_frame", counting)
    task = asyncio.create_task(run(surface, lasting_copy, execution, max_tokens=LONG))
    await _first_chunk(engine, task)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await run(surface, lasting_copy, execution, max_tokens=SHORT) == SHORT
    _idle(engine)
    if execution == "process":
        assert frames.count("End") == 2 and frames.count("Delta") < LONG // 2


# ---------------------------------------------------------------- async: the worker dies
@pytest.mark.parametrize("surface", SURFACES)
async def test_worker_killed_mid_stream_is_worker_died_and_the_next_call_works(own_lasting, surface):
    engine = Engine.get(own_lasting, execution="process")
    engine.load()
    pid = engine.worker_pid()
    task = asyncio.create_task(run(surface, own_lasting, "process", max_tokens=LONG))
    await _first_chunk(engine, task)
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(WorkerDiedError) as info:
        await task
    assert f"the model worker process (pid {pid}) exited with code -9 during the call" in str(info.value)
    assert "the next call starts a new worker" in str(info.value)
    assert await run(surface, own_lasting, "process", max_tokens=SHORT) == SHORT
    assert engine.worker_pid() not in (None, pid)
    _idle(engine)


@pytest.mark.parametrize("execution", EXECUTIONS)
def test_a_stream_whose_event_loop_closed_does_not_break_the_model(lasting_copy, execution):
    """An async stream left open when its loop closes (no ``shutdown_asyncgens``): its chunks
    have nowhere to go; it must not take the worker's reader (or the inline producer) down with it."""
    engine = Engine.get(lasting_copy, execution=execution)  # type: ignore[arg-type]
    engine.load()
    loop = asyncio.new_event_loop()
    stream = engine.astream(MSGS, validated_options(max_new_tokens=LONG, temperature=0, kv_reuse=False))
    loop.run_until_complete(stream.__anext__())
    loop.close()
    out = engine.generate(MSGS, validated_options(max_new_tokens=SHORT, temperature=0), timeout=10)
    assert out.usage.completion_tokens == SHORT
    asyncio.run(stream.aclose())
    _idle(engine)


# ---------------------------------------------------------------- the worker cannot start
@pytest.fixture
def exiting_interpreter(tmp_path, monkeypatch):
    """sys.executable is a script that exits with code 3 at once (a broken interpreter)."""
    script = tmp_path / "broken-python"
    script.write_text("#!/bin/sh\nexit 3\n")
    script.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(script))
    return monkeypatch


def test_a_worker_that_cannot_start_is_a_generation_error_and_the_next_call_works(own_copy, exiting_interpreter):
    engine = Engine.get(own_copy, execution="process")
    for _ in range(5):  # the script may exit before or after the engine writes its first frame
        with pytest.raises(GenerationError) as info:
            engine.generate(MSGS, validated_options(max_new_tokens=SHORT))
        assert type(info.value) is GenerationError
        assert "the model worker failed to start (exit code 3)" in str(info.value)
        assert engine.worker_pid() is None
    exiting_interpreter.undo()
    assert engine.generate(MSGS, validated_options(max_new_tokens=SHORT)).usage.completion_tokens == SHORT


def test_a_worker_that_never_answers_is_stopped_after_the_start_timeout(own_copy, tmp_path, monkeypatch):
    """A worker that hangs before its first frame (a stuck interpreter start) is killed after
    RYZENAI_LLM_START_TIMEOUT and the call fails, instead of waiting forever; the next call works."""
    script = tmp_path / "silent-python"
    script.write_text("#!/bin/sh\nexec sleep 600\n")
    script.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(script))
    monkeypatch.setattr(workers_module, "START_TIMEOUT", 1.0)
    engine = Engine.get(own_copy, execution="process")
    with pytest.raises(GenerationError, match=r"did not start within 1 s \(RYZENAI_LLM_START_TIMEOUT\)"):
        engine.generate(MSGS, validated_options(max_new_tokens=SHORT))
    assert engine.worker_pid() is None
    monkeypatch.undo()
    assert engine.generate(MSGS, validated_options(max_new_tokens=SHORT)).usage.completion_tokens == SHORT


@pytest.mark.parametrize("execution", EXECUTIONS)
def test_a_session_that_cannot_start_is_the_typed_error_and_the_next_call_works(own_copy, execution):
    """The package breaks after the engine was made: the session (in the worker, or inline) cannot start."""
    engine = Engine.get(own_copy, execution=execution)  # type: ignore[arg-type]
    config = own_copy / "genai_config.json"
    good = config.read_text()
    config.write_text('{"model": [1,')
    for call in (lambda: engine.generate(MSGS, validated_options(max_new_tokens=SHORT)), lambda: engine.encode("hi")):
        with pytest.raises(ConfigError) as info:
            call()
        assert "not valid JSON" in str(info.value) and "genai_config.json" in str(info.value)
        assert info.value.path is not None and info.value.path.name == "genai_config.json"
    config.write_text(good)
    assert engine.generate(MSGS, validated_options(max_new_tokens=SHORT)).usage.completion_tokens == SHORT


# ---------------------------------------------------------------- writes to a dead worker
def test_a_write_to_a_worker_that_is_gone_is_worker_died(own_copy):
    engine = Engine.get(own_copy, execution="process")
    backend = engine.backend
    assert isinstance(backend, WorkerClient)
    # A live process that closed its end of the pipe: the write fails.
    gone = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import os, sys, time; os.close(0); sys.stdout.write('x'); sys.stdout.flush(); time.sleep(30)",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert gone.stdout is not None and gone.stdout.read(1) == b"x"  # stdin is closed by now
        # The connection's process is swapped for it (private): a real worker cannot be made to close its stdin.
        backend._proc = gone
        with pytest.raises(WorkerDiedError) as info:
            backend._send(Call(1, "load", ()))
        assert f"the model worker process (pid {gone.pid}) is gone" in str(info.value)
        assert "the next call starts a new worker" in str(info.value)
        backend._cancel(1)  # a cancel that cannot be delivered is not an error
    finally:
        backend._proc = None
        gone.kill()
        reap(gone)
    assert engine.generate(MSGS, validated_options(max_new_tokens=SHORT)).usage.completion_tokens == SHORT


def test_cancelling_on_a_dead_worker_does_not_start_a_new_one(own_copy):
    engine = Engine.get(own_copy, execution="process")
    engine.load()
    backend = engine.backend
    # Private: the process (waited for here, so it is dead for sure) and the cancel of an abandoned call,
    # which no public call reaches without first starting a new worker.
    proc = backend._proc
    proc.kill()
    proc.wait()
    backend._cancel(12345)
    assert backend.pid is None
    assert backend._proc is proc


# ---------------------------------------------------------------- calls in the worker
@pytest.mark.parametrize("execution", EXECUTIONS)
def test_a_call_that_fails_in_the_model_is_typed_and_the_next_call_works(shared_copy, execution):
    engine = Engine.get(shared_copy, execution=execution)  # type: ignore[arg-type]
    with pytest.raises(InvalidRequestError, match=r"the message list is empty; send at least one user message"):
        engine.count_tokens([])
    with pytest.raises(InvalidRequestError, match=r"lone surrogate"):
        engine.encode("a\ud800b")
    with pytest.raises(ContextWindowExceededError, match=r"prompt limit"):
        engine.generate([ChatMessage("user", "x " * 5000)], validated_options(max_new_tokens=3))
    assert engine.count_tokens(MSGS) == len(engine.encode(engine.render(MSGS)))
    assert engine.decode(engine.encode("hello world")) == "hello world"


def test_an_unknown_worker_call_is_refused_in_the_worker(shared_copy):
    backend = Engine.get(shared_copy, execution="process").backend
    with pytest.raises(ValueError, match=r"unknown worker call 'shutdown'"):
        backend.call("shutdown")
    pid = backend.pid
    assert backend.call("decode", backend.call("encode", "hello world")) == "hello world"
    assert backend.pid == pid  # the same worker serves on


def test_a_worker_call_that_times_out_names_the_call_and_the_next_call_works(shared_copy):
    engine = Engine.get(shared_copy, execution="process")
    engine.load()
    # About a second of template work: the call's timeout runs out first.
    slow = validated_options(
        chat_template="{% for i in range(30000) %}{% for j in range(60) %}{% endfor %}{% endfor %}{{ messages[0].content }}"
    )
    with pytest.raises(GenerationTimeoutError) as info:
        engine.backend.call("render", MSGS, slow, timeout=0.1)
    assert info.value.phase == "render" and "did not answer the call render() within 0.1 s (timeout)" in str(info.value)
    assert engine.render(MSGS).endswith(
        "Tell me about the NPU.<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
    )
    _idle(engine)


def test_a_worker_that_dies_during_a_call_is_worker_died(own_copy):
    engine = Engine.get(own_copy, execution="process")
    engine.load()
    backend = engine.backend
    pid = backend.pid
    slow = validated_options(
        chat_template="{% for i in range(100000) %}{% for j in range(60) %}{% endfor %}{% endfor %}{{ messages[0].content }}"
    )
    threading.Timer(0.3, os.kill, args=(pid, signal.SIGKILL)).start()
    with pytest.raises(WorkerDiedError, match=rf"pid {pid}\) exited with code -9 during the call"):
        engine.render(MSGS, slow)
    assert engine.count_tokens(MSGS) > 0 and backend.pid != pid


# ---------------------------------------------------------------- errors that cross the boundary
class _Unpicklable(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.callback = lambda: None  # a lambda does not pickle


class _NeedsTwo(Exception):
    def __init__(self, a: str, b: str) -> None:  # pickles, but unpickling calls it with one argument
        super().__init__(a)
        self.b = b


def test_an_exception_that_does_not_pickle_becomes_a_generation_error_with_its_text():
    out = portable_exception(_Unpicklable("the runtime's own object"))
    assert type(out) is GenerationError and str(out) == "_Unpicklable: the runtime's own object"
    out = portable_exception(_NeedsTwo("left", "right"))
    assert type(out) is GenerationError and str(out) == "_NeedsTwo: left"
    pickle.loads(pickle.dumps(out))


def test_typed_errors_cross_the_boundary_with_their_fields():
    timeout = GenerationTimeoutError("ran out", phase="prefill")
    assert portable_exception(timeout) is timeout
    back = pickle.loads(pickle.dumps(portable_exception(timeout)))
    assert type(back) is GenerationTimeoutError and back.phase == "prefill"
    window = ContextWindowExceededError("too long", prompt_tokens=9, limit=8, window=10)
    back = pickle.loads(pickle.dumps(portable_exception(window)))
    assert (back.prompt_tokens, back.limit, back.window) == (9, 8, 10)
    config = ConfigError("bad", path="/x/genai_config.json")
    assert pickle.loads(pickle.dumps(portable_exception(config))).path == Path("/x/genai_config.json")


# ---------------------------------------------------------------- frames
def _frames(*messages: Any) -> bytes:
    buf = io.BytesIO()
    for message in messages:
        write_frame(buf, message)
    return buf.getvalue()


@pytest.mark.parametrize("cut", [1, 3, 4, 5, -1])
def test_a_torn_frame_reads_as_the_end_of_the_stream(cut):
    data = _frames(Ready(), Delta(7, "text", [1, 2]))
    first = len(_frames(Ready()))
    stream = io.BytesIO(data[: first + cut] if cut > 0 else data[:cut])
    assert read_frame(stream) == Ready()
    assert read_frame(stream) is None
    assert read_frame(io.BytesIO(b"")) is None


def test_a_frame_is_a_named_message_and_anything_else_is_a_protocol_error():
    """A frame carries a plain tuple (it pickles fast) that reads back as its named message."""
    stream = io.BytesIO(_frames(Stream(4, [], None, 2.5), Delta(7, "text", [1, 2])))
    first, second = read_frame(stream), read_frame(stream)
    assert isinstance(first, Stream) and first.rid == 4 and first.timeout == 2.5
    assert isinstance(second, Delta) and (second.text, second.token_ids) == ("text", [1, 2])
    for raw in (("delta", 7, "text", [1]), (99, 1), (), "text"):
        body = pickle.dumps(raw)
        with pytest.raises(ProtocolError):
            read_frame(io.BytesIO(len(body).to_bytes(4, "little") + body))


def test_a_frame_that_does_not_unpickle_raises():
    body = b"not a pickle"
    with pytest.raises(pickle.UnpicklingError):
        read_frame(io.BytesIO(len(body).to_bytes(4, "little") + body))


def test_a_torn_frame_from_a_live_worker_ends_its_calls_and_the_next_call_works(own_lasting, monkeypatch):
    """The reader cannot trust the rest of the pipe after a frame it cannot read: the worker is replaced."""
    engine = Engine.get(own_lasting, execution="process")
    engine.load()
    pid = engine.worker_pid()
    real = workers_module.parse_frame
    deltas = []

    def tearing(data):
        message = real(data)
        if isinstance(message, Delta):
            deltas.append(message)
            if len(deltas) == 3:  # after output reached the caller: the call cannot be sent again
                raise pickle.UnpicklingError("pickle data was truncated")
        return message

    monkeypatch.setattr(workers_module, "parse_frame", tearing)
    with pytest.raises(WorkerDiedError, match=rf"pid {pid}\)"):
        engine.generate(MSGS, validated_options(max_new_tokens=LONG, temperature=0, kv_reuse=False), timeout=20)
    assert len(deltas) == 3
    assert engine.generate(MSGS, validated_options(max_new_tokens=SHORT)).usage.completion_tokens == SHORT
    assert engine.worker_pid() != pid


# ---------------------------------------------------------------- close
def test_close_ends_the_worker_and_the_next_call_starts_a_new_one(own_copy):
    engine = Engine.get(own_copy, execution="process")
    engine.load()
    old = engine.backend
    pid = old.pid
    engine.close()
    assert not process_alive(pid) and old.pid is None and engine.worker_pid() is None
    assert engine.backend is not old  # the closed connection is dropped: the next call makes a new one
    engine.close()  # closing twice is harmless
    assert engine.generate(MSGS, validated_options(max_new_tokens=SHORT)).usage.completion_tokens == SHORT
    assert engine.worker_pid() not in (None, pid)


def test_close_during_a_stream_ends_it_with_worker_died(own_lasting):
    engine = Engine.get(own_lasting, execution="process")
    stream = engine.stream(MSGS, validated_options(max_new_tokens=LONG, temperature=0, kv_reuse=False))
    next(stream)
    pid = engine.worker_pid()
    engine.close()
    with pytest.raises(WorkerDiedError, match=rf"pid {pid}\) exited with code 0 during the call"):
        for _ in stream:
            pass
    assert engine.generate(MSGS, validated_options(max_new_tokens=SHORT)).usage.completion_tokens == SHORT


@pytest.mark.slow
def test_close_all_closes_every_engine_and_each_starts_again(copy_package, tmp_path, monkeypatch):
    monkeypatch.setattr(Engine, "registry", Registry())
    a = Engine.get(copy_package(TINY_LLAMA, "a"), execution="process")
    b = Engine.get(copy_package(TINY_LLAMA, "b"), execution="process")
    inline = Engine.get(copy_package(TINY_LLAMA, "c"), execution="inline")
    try:
        pids = []
        for engine in (a, b, inline):
            engine.load()
            pids.append(engine.worker_pid() if engine.execution == "process" else None)
        inline.generate(MSGS, validated_options(max_new_tokens=SHORT))  # kv_reuse keeps a cached generator
        session = inline.inline_session()
        assert session.kv_cache.holds
        backends = {e: e.backend for e in (a, b, inline)}
        Engine.close_all()
        assert all(not process_alive(pid) for pid in pids if pid is not None)
        assert all(e.backend is not backends[e] for e in (a, b, inline))  # dropped: each call makes a new one
        assert not session.kv_cache.holds  # the inline session's generator is freed
        for engine in (a, b, inline):
            assert engine.generate(MSGS, validated_options(max_new_tokens=SHORT)).usage.completion_tokens == SHORT
        assert a.worker_pid() not in pids and b.worker_pid() not in pids
    finally:
        for engine in (a, b, inline):
            engine.close()


def test_a_worker_started_with_a_bad_first_frame_exits(tmp_path):
    """The worker serves only after an init frame; anything else (or nothing) ends it."""
    for data in (b"", _frames(Call(1, "load", ()))):
        done = subprocess.run(
            [sys.executable, "-m", "ryzenai_core.engine.worker"], input=data, capture_output=True, timeout=60
        )
        assert done.returncode == 0 and done.stdout == b""
