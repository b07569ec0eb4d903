"""Cancels, deadlines and worker kills under load: no wait outlives its call's deadline.

A seeded, bounded storm: threads and an asyncio task group share one worker, with mixed sync,
async and stream calls, small timeouts, cancels and a worker kill. Every call ends by its
deadline plus a margin, and every greedy answer that completes equals a quiet run's. Real
OGA on the fixture model.
"""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import signal
import threading
import time

import pytest

from conftest import LASTING_MODEL, close_engines_under
from ryzenai_core import ChatMessage, Engine
from ryzenai_core.errors import GenerationError
from ryzenai_core.options import validated_options

LONG = 3000  # LASTING_MODEL's answer outlasts every cancel below


def opts(n: int):
    return validated_options(max_new_tokens=n, temperature=0, kv_reuse=False)


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    folder = tmp_path_factory.mktemp("storm")
    path = folder / LASTING_MODEL.name
    shutil.copytree(LASTING_MODEL, path)
    e = Engine.get(path, execution="process")
    e.load()
    yield e
    close_engines_under(folder)


async def _cancelled_after_first_chunk(stream_factory, rounds: int = 10) -> int:
    """How many of `rounds` tasks, each cancelled after its first chunk, end cancelled."""

    async def one() -> bool:
        first = asyncio.Event()

        async def consume() -> None:
            async for _ in await stream_factory():
                first.set()

        task = asyncio.create_task(consume())
        await first.wait()
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            return True
        return False

    return sum([await one() for _ in range(rounds)])


def test_cancelling_a_task_after_its_first_chunk_always_cancels_with_a_timeout(engine):
    """asyncio.wait_for can return the item and swallow the cancel when both come at once."""
    msgs = [ChatMessage("user", "Tell me about the NPU.")]

    async def stream():
        return engine.astream(msgs, opts(LONG), timeout=20)

    assert asyncio.run(_cancelled_after_first_chunk(stream, rounds=20)) == 20


def test_cancelling_a_langchain_astream_after_its_first_chunk_cancels_with_a_timeout(engine):
    from langchain_ryzenai import ChatRyzenAI

    lc = ChatRyzenAI(model=str(engine.package.path), timeout=20, max_tokens=LONG, temperature=0, kv_reuse=False)

    async def stream():
        return lc.astream("Tell me about the NPU.")

    assert asyncio.run(_cancelled_after_first_chunk(stream)) == 10


def test_cancelling_a_llamaindex_astream_chat_after_its_first_chunk_cancels_with_a_timeout(engine):
    from llama_index.core.llms import ChatMessage as LIMessage

    from llamaindex_ryzenai import RyzenAILLM

    li = RyzenAILLM(model=str(engine.package.path), timeout=20, max_new_tokens=LONG, temperature=0, kv_reuse=False)

    async def stream():
        return await li.astream_chat([LIMessage(role="user", content="Tell me about the NPU.")])

    assert asyncio.run(_cancelled_after_first_chunk(stream)) == 10


def test_a_storm_of_mixed_calls_ends_every_call_by_its_deadline_and_answers_as_a_quiet_run(engine):
    rng = random.Random(2027)
    prompts = [[ChatMessage("user", q)] for q in ("Name a prefill bucket.", "What is an NPU?", "Say hi.")]
    quiet = {i: engine.generate(p, opts(8)).text for i, p in enumerate(prompts)}
    margin = 3.0  # the model's own report (0.5 s), a loaded machine's scheduling
    late: list[str] = []
    wrong: list[str] = []
    done = [0]
    lock = threading.Lock()

    def record(kind: str, timeout: float, started: float, text: str | None, i: int) -> None:
        took = time.monotonic() - started
        with lock:
            done[0] += 1
            if took > timeout + margin:
                late.append(f"{kind} took {took:.1f} s with timeout={timeout}")
            if text is not None and text != quiet[i]:
                wrong.append(f"{kind}: {text!r} != {quiet[i]!r}")

    def sync_call(seed: int) -> None:
        r = random.Random(seed)
        i = r.randrange(len(prompts))
        timeout = r.choice((0.3, 1.0, 4.0))
        kind = r.choice(("generate", "stream", "stream-closed"))
        started = time.monotonic()
        text = None
        try:
            if kind == "generate":
                text = engine.generate(prompts[i], opts(8), timeout=timeout).text
            elif kind == "stream":
                text = "".join(c.text for c in engine.stream(prompts[i], opts(8), timeout=timeout))
            else:
                stream = engine.stream(prompts[i], opts(LONG), timeout=timeout)
                next(stream, None)
                stream.close()
        except GenerationError:
            text = None
        record(kind, timeout, started, text, i)

    async def async_call(seed: int) -> None:
        r = random.Random(seed)
        i = r.randrange(len(prompts))
        timeout = r.choice((0.3, 1.0, 4.0))
        cancel = r.random() < 0.3
        started = time.monotonic()
        text = None

        async def run() -> str:
            return "".join(
                [c.text async for c in engine.astream(prompts[i], opts(LONG if cancel else 8), timeout=timeout)]
            )

        task = asyncio.ensure_future(run())
        try:
            if cancel:
                await asyncio.sleep(r.uniform(0.0, 0.3))
                task.cancel()
            text = await task
        except (GenerationError, asyncio.CancelledError):
            text = None
        record("async-cancel" if cancel else "astream", timeout, started, text, i)

    def threads_part(base: int) -> None:
        for k in range(20):
            sync_call(base + k)

    async def async_part() -> None:
        async with asyncio.TaskGroup() as tg:
            for k in range(60):
                tg.create_task(async_call(10_000 + k))
                await asyncio.sleep(0.01)

    def killer() -> None:
        time.sleep(rng.uniform(1.0, 2.0))
        pid = engine.worker_pid()
        if pid is not None:
            os.kill(pid, signal.SIGKILL)

    t0 = time.monotonic()
    workers = [threading.Thread(target=threads_part, args=(1000 * n,)) for n in range(4)]
    workers.append(threading.Thread(target=killer))
    for t in workers:
        t.start()
    asyncio.run(async_part())
    for t in workers:
        t.join(120)
    assert not any(t.is_alive() for t in workers), "a sync call outlived every deadline"
    assert done[0] == 140
    assert not late, late
    assert not wrong, wrong
    assert time.monotonic() - t0 < 120
    assert engine.generate(prompts[0], opts(8)).text == quiet[0]
