"""Timeouts, stuck calls and unread streams: the model stays usable for the next call.

Real OGA on the fixture models, through the worker process (the default) and inline.
"""

from __future__ import annotations

import asyncio
import threading

import pytest

from conftest import LASTING_MODEL, LASTING_TOKENS, TINY_LLAMA
from ryzenai_core import ChatMessage, ChatTemplateError, Engine, GenerationTimeoutError, StreamAbandonedError
from ryzenai_core.engine import client as client_module
from ryzenai_core.generation import scheduler as scheduler_module
from ryzenai_core.options import validated_options

MSGS = [ChatMessage("user", "Tell me about the NPU.")]
LONG = validated_options(max_new_tokens=LASTING_TOKENS, kv_reuse=False, temperature=0)  # seconds on any machine
SHORT = validated_options(max_new_tokens=3, temperature=0)
# Template work that stops only at the 5 s render bound (wall time), on a machine of any speed:
# the worker is busy well past a 0.2 s timeout plus its report margin and the stuck grace.
SLOW_TEMPLATE = (
    "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
    "{% for m in messages %}{{ m.content }}{% endfor %}"
)


@pytest.fixture(autouse=True)
def _quick_unread_grace(monkeypatch) -> None:
    """Unread streams are stopped after 0.2 s here (2 s by default), looked at every 0.05 s.

    The streams left unread give the longest answer of the fixtures (LASTING_MODEL), which lasts
    seconds: they are stopped long before they could end by themselves.
    """
    monkeypatch.setattr(scheduler_module, "ABANDON_AFTER", 0.2)
    monkeypatch.setattr(scheduler_module, "QUEUED_POLL", 0.05)


@pytest.fixture
def fresh(copy_package):
    """An engine on its own worker process (nothing loaded yet), closed after the test."""
    made: list[Engine] = []

    def _make(execution: str = "process", name: str = "own-worker") -> Engine:
        engine = Engine.get(copy_package(LASTING_MODEL, name), execution=execution)  # type: ignore[arg-type]
        made.append(engine)
        return engine

    yield _make
    for engine in made:
        engine.close()


# ---------------------------------------------------------------- what the timeout covers
@pytest.mark.parametrize("execution", ["process", "inline"])
def test_first_call_timeout_does_not_count_the_model_load(fresh, execution: str) -> None:
    """The one-time load (a process start and the model load) is not part of a call's timeout."""
    engine = fresh(execution)
    out = engine.generate(MSGS, SHORT, timeout=0.2)
    assert out.usage is not None and out.usage.completion_tokens == 3


@pytest.mark.parametrize("execution", ["process", "inline"])
def test_timeout_while_generating_names_the_phase_and_the_tokens(fresh, execution: str) -> None:
    engine = fresh(execution)
    engine.load()
    with pytest.raises(GenerationTimeoutError) as info:
        engine.generate(MSGS, LONG, timeout=0.3)
    assert info.value.phase == "generating"
    assert "timeout=0.3 s while generating, after" in str(info.value)
    assert "not the one-time model load" in str(info.value)
    assert engine.generate(MSGS, SHORT).usage.completion_tokens == 3


@pytest.mark.parametrize("execution", ["process", "inline"])
def test_timeout_while_queued_names_the_phase(fresh, execution: str) -> None:
    engine = fresh(execution)
    engine.load()
    started = threading.Event()
    stop = threading.Event()

    def busy() -> None:
        for _ in engine.stream(MSGS, LONG):
            started.set()
            if stop.is_set():
                break

    worker = threading.Thread(target=busy)
    worker.start()
    try:
        assert started.wait(30)
        with pytest.raises(GenerationTimeoutError) as info:
            engine.generate(MSGS, SHORT, timeout=0.3)
        assert info.value.phase == "queued"
        assert "while it waited behind other calls on this model" in str(info.value)
    finally:
        stop.set()
        worker.join(60)
    assert not worker.is_alive()
    assert engine.generate(MSGS, SHORT).usage.completion_tokens == 3


def test_timeout_while_preparing_names_the_phase(fresh) -> None:
    engine = fresh("process")
    engine.load()
    slow = validated_options(max_new_tokens=3, chat_template=SLOW_TEMPLATE)
    with pytest.raises(GenerationTimeoutError) as info:
        engine.generate(MSGS, slow, timeout=0.3)
    assert info.value.phase == "preparing"
    assert "while the chat template and tokenizer prepared the prompt" in str(info.value)


# ---------------------------------------------------------------- a stuck call does not stick
@pytest.mark.slow
def test_a_call_stuck_outside_the_token_loop_frees_the_model(fresh, monkeypatch) -> None:
    """The worker cannot stop a call stuck in the template; after a short grace it is replaced."""
    monkeypatch.setattr(client_module, "STUCK_GRACE", 0.3)
    engine = fresh("process")
    engine.load()
    pid = engine.worker_pid()
    slow = validated_options(max_new_tokens=3, chat_template=SLOW_TEMPLATE)
    with pytest.raises(GenerationTimeoutError):
        engine.generate(MSGS, slow, timeout=0.2)
    # The stuck worker would be busy for seconds more; the next call goes to a new one (a
    # generous timeout: starting a worker and loading the model take time on a busy machine; the
    # worker that served it shows it was not the stuck one).
    out = engine.generate(MSGS, SHORT, timeout=30)
    assert out.usage.completion_tokens == 3
    assert engine.worker_pid() != pid


@pytest.mark.slow
def test_calls_queued_behind_a_replaced_worker_go_to_the_new_one(fresh, monkeypatch) -> None:
    monkeypatch.setattr(client_module, "STUCK_GRACE", 0.3)
    engine = fresh("process")
    engine.load()
    slow = validated_options(max_new_tokens=3, chat_template=SLOW_TEMPLATE)
    results: list[object] = []

    def queued() -> None:
        try:
            results.append(engine.generate(MSGS, SHORT).usage.completion_tokens)
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            results.append(exc)

    stuck_error: list[BaseException] = []

    def stuck() -> None:
        try:
            engine.generate(MSGS, slow, timeout=0.2)
        except GenerationTimeoutError as exc:
            stuck_error.append(exc)

    first = threading.Thread(target=stuck)
    first.start()
    # the worker client's running stream (private): no public signal says a call reached the worker
    while engine.backend._running is None and first.is_alive():  # the stuck call has started
        threading.Event().wait(0.01)
    second = threading.Thread(target=queued)
    second.start()
    first.join(30)
    second.join(30)
    assert stuck_error and results == [3]


@pytest.mark.parametrize(
    ("template", "what"),
    [
        ("{{ 'a' * 10**9 }}", "repeats a str of 1 items 1000000000 times"),
        ("{{ 'x'.ljust(10**9) }}", "pads a string to 1,000,000,000 characters"),
        ("{{ 7 ** 100000000 }}", "computes 7 ** 100000000"),
        ("{% for i in range(100000) %}{{ 'many words ' * 20 }}{% endfor %}", "its output passed"),
        ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "ran for more than 5 s"),
    ],
)
@pytest.mark.slow
def test_template_rendering_is_bounded(template: str, what: str) -> None:
    engine = Engine.get(TINY_LLAMA, execution="process")
    options = validated_options(max_new_tokens=3, chat_template=template)
    with pytest.raises(ChatTemplateError) as info:
        engine.generate(MSGS, options, timeout=30)
    assert what in str(info.value) and "was stopped" in str(info.value)
    assert engine.generate(MSGS, SHORT).usage.completion_tokens == 3


# ---------------------------------------------------------------- unread streams
@pytest.mark.parametrize("execution", ["process", "inline"])
def test_an_unread_stream_does_not_block_the_next_call(fresh, execution: str) -> None:
    """`g = llm.stream(...)`, a few chunks, then another call from the same thread."""
    engine = fresh(execution)
    stream = engine.stream(MSGS, LONG)
    first = [next(stream) for _ in range(3)]
    done: list[int] = []
    caller = threading.Thread(target=lambda: done.append(engine.generate(MSGS, SHORT).usage.completion_tokens))
    caller.start()
    caller.join(60)  # inline, this used to wait forever: the unread stream held the model
    assert done == [3]
    rest = []
    with pytest.raises(StreamAbandonedError, match=r"was not read for 0.2 s while another call waited"):
        for chunk in stream:
            rest.append(chunk)
    assert all(c.finish_reason is None for c in first + rest)  # stopped, not finished


@pytest.mark.parametrize("execution", ["process", "inline"])
def test_an_unread_async_stream_does_not_block_the_next_call(fresh, execution: str) -> None:
    engine = fresh(execution)

    async def main() -> tuple[int, type[BaseException] | None]:
        stream = engine.astream(MSGS, LONG)
        await stream.__anext__()
        out = await asyncio.wait_for(engine.agenerate(MSGS, SHORT), 60)
        raised: type[BaseException] | None = None
        try:
            async for _ in stream:
                pass
        except StreamAbandonedError as exc:
            raised = type(exc)
        return out.usage.completion_tokens, raised

    tokens, raised = asyncio.run(main())
    assert tokens == 3 and raised is StreamAbandonedError


@pytest.mark.slow
def test_a_slow_reader_is_not_stopped_when_nobody_waits(fresh) -> None:
    engine = fresh("process")
    options = validated_options(max_new_tokens=40, temperature=0)
    chunks = []
    for i, chunk in enumerate(engine.stream(MSGS, options)):
        chunks.append(chunk)
        if i == 1:
            threading.Event().wait(1.5)  # longer than the unread-stream grace
    assert chunks[-1].finish_reason in ("stop", "length")


def test_langchain_stream_left_unread_does_not_block_invoke() -> None:
    from langchain_ryzenai import ChatRyzenAI

    llm = ChatRyzenAI(model=str(LASTING_MODEL), max_tokens=LASTING_TOKENS, temperature=0, kv_reuse=False)
    stream = llm.stream("Tell me about the NPU.")
    next(stream)
    answer = llm.invoke("hi", max_tokens=3)
    assert answer.usage_metadata["output_tokens"] == 3
    with pytest.raises(StreamAbandonedError):
        for _ in stream:
            pass
