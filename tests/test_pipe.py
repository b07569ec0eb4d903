"""The worker's pipe: a sync stream alone reads its own frames; everything else goes through the reader thread.

A sync stream that is the only call in flight reads the worker's frames in its own thread
(POSIX), so a token wakes one thread of the caller instead of two. These tests hold what that
must not change: the same output as the reader thread's relay, calls from the stream's own
thread or another one while it streams, async streams beside it, a consumer that leaves the
pipe unread, a Ctrl-C at any moment (the worker stays), a worker that dies, a torn frame,
frames larger than one read. Real OGA on the fixture model; real pipes.
"""

from __future__ import annotations

import asyncio
import os
import pickle
import random
import shutil
import signal
import threading
import time

import pytest

from conftest import TINY_LLAMA, close_engines_under
from ryzenai_core import ChatMessage, Engine, WorkerDiedError
from ryzenai_core import engine as engine_module
from ryzenai_core._frames import EMPTY, PARTIAL, PIPE_BUFFER, FramePipe, parse_frame, write_frame
from ryzenai_core.engine import _WorkerBackend
from ryzenai_core.options import validated_options

pytestmark = pytest.mark.skipif(not engine_module.DIRECT_READ, reason="a stream reads for itself on POSIX only")

MSGS = [ChatMessage("user", "Tell me about the NPU.")]
N = 48


def opts(n: int = N):
    return validated_options(max_new_tokens=n, temperature=0, kv_reuse=False)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    folder = tmp_path_factory.mktemp("pipe")
    path = folder / "tiny-llama"
    shutil.copytree(TINY_LLAMA, path)
    yield path
    close_engines_under(folder)


@pytest.fixture(scope="module")
def engine(model):
    e = Engine.get(model, execution="process")
    e.load()
    return e


@pytest.fixture(scope="module")
def relay(engine):
    """A second worker on the same model whose frames all go through the reader thread (as on Windows)."""
    e = Engine(engine.key, "process")
    e.backend.direct_read = False
    e.load()
    yield e
    e.close()


@pytest.fixture(scope="module")
def reference(relay):
    """The greedy answer's deltas and ids through the relay."""
    return [(c.text, tuple(c.token_ids)) for c in relay.stream(MSGS, opts())]


def deltas(stream):
    return [(c.text, tuple(c.token_ids)) for c in stream]


def test_a_stream_alone_reads_for_itself_and_streams_what_the_relay_streams(engine, relay, reference):
    link = engine.backend._link
    owners = []
    out = []
    for c in engine.stream(MSGS, opts()):
        owners.append(link.owner)
        out.append((c.text, tuple(c.token_ids)))
    assert out == reference
    assert all(o is not None for o in owners[:-1])  # every chunk but the last came while it owned the pipe
    assert link.owner is None  # handed back at the end
    relayed = relay.backend._link
    assert relayed.pipe is None
    stream = relay.stream(MSGS, opts())
    first = next(stream)
    (rid,) = relay.backend._handlers
    assert not relay.backend._take_pipe(relayed, rid)  # alone, yet the reader thread reads for it
    assert [(first.text, tuple(first.token_ids)), *deltas(stream)] == reference


def test_a_call_from_the_streams_own_thread_mid_stream_is_answered(engine, reference):
    out, counts = [], []
    for i, c in enumerate(engine.stream(MSGS, opts())):
        out.append((c.text, tuple(c.token_ids)))
        if i in (1, 5):  # the stream owns the pipe between its chunks: the call must not wait for it
            counts.append(engine.count_tokens(MSGS))
    assert out == reference
    assert counts[0] == counts[1] > 0


def test_calls_from_another_thread_during_a_stream_are_answered_at_once(engine, reference):
    stop = threading.Event()
    answered: list[float] = []

    def encode_all_the_time():
        while not stop.is_set():
            t0 = time.monotonic()
            assert engine.encode("hello NPU")
            answered.append(time.monotonic() - t0)

    t = threading.Thread(target=encode_all_the_time)
    t.start()
    try:
        out = []
        for c in engine.stream(MSGS, opts()):
            out.append((c.text, tuple(c.token_ids)))
            time.sleep(0.005)
    finally:
        stop.set()
        t.join(30)
    assert out == reference
    assert len(answered) > 3
    assert max(answered) < 5  # never left waiting for the stream's next turn (seconds: a loaded machine)


def test_an_async_stream_beside_a_sync_one_gets_its_own_answer(engine, reference):
    sync_out: list = []

    def sync_stream():
        sync_out.extend(deltas(engine.stream(MSGS, opts())))

    async def both():
        t = threading.Thread(target=sync_stream)
        t.start()
        out = [(c.text, tuple(c.token_ids)) async for c in engine.astream(MSGS, opts())]
        await asyncio.to_thread(t.join, 60)
        return out

    assert asyncio.run(both()) == reference
    assert sync_out == reference


def test_a_consumer_that_leaves_the_pipe_unread_gets_it_taken_back_and_loses_nothing(engine, reference):
    link = engine.backend._link
    stream = engine.stream(MSGS, opts())
    out = [next(stream)]
    out[0] = (out[0].text, tuple(out[0].token_ids))
    assert link.owner is not None
    time.sleep(engine_module.AWAY * 5)  # busy elsewhere: the reader thread reads on (the worker is not held up)
    assert link.owner is None
    out += deltas(stream)
    assert out == reference


def test_a_frame_handed_over_just_before_the_stream_takes_the_pipe_is_not_missed(engine, reference, monkeypatch):
    """The reader thread may hand a frame to the stream between the stream's look at its queue and
    its turn on the pipe: the stream must find it there, not wait on the pipe for the next one."""
    real = _WorkerBackend._claim

    def late(self, link, rid):
        time.sleep(engine_module.AWAY * 3)  # meanwhile the reader thread takes the pipe back and hands the rest over
        return real(self, link, rid)

    monkeypatch.setattr(_WorkerBackend, "_claim", late)
    started = time.monotonic()
    assert deltas(engine.stream(MSGS, opts(), timeout=20)) == reference
    assert time.monotonic() - started < 10


def test_ctrl_c_at_any_moment_of_a_stream_keeps_the_worker(engine):
    """A KeyboardInterrupt in the reading thread loses at most that stream's own frame: the pipe
    stays whole, so the worker is not replaced, and the next call streams the right answer."""
    pid = engine.backend.pid
    rng = random.Random(7)
    interrupted = 0
    for _ in range(12):
        timer = threading.Timer(rng.uniform(0.005, 0.08), os.kill, (os.getpid(), signal.SIGINT))
        timer.start()
        try:
            for _ in engine.stream(MSGS, opts(3500)):
                pass
        except KeyboardInterrupt:
            interrupted += 1
        finally:
            timer.join()
        out = deltas(engine.stream(MSGS, opts(6)))
        assert sum(len(ids) for _, ids in out) == 6 and engine.backend.pid == pid
    assert interrupted >= 10  # a 3500-token answer outlasts every timer


@pytest.mark.parametrize("direct", [True, False], ids=["reads-for-itself", "relay"])
def test_a_worker_killed_mid_stream_is_an_error_and_the_next_call_works(engine, relay, direct):
    e = engine if direct else relay
    pid = e.backend.pid
    stream = e.stream(MSGS, opts(3500))
    next(stream)
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(WorkerDiedError, match=f"pid {pid}"):
        for _ in stream:
            pass
    assert sum(len(ids) for _, ids in deltas(e.stream(MSGS, opts(4)))) == 4
    assert e.backend.pid != pid


@pytest.mark.parametrize("direct", [True, False], ids=["reads-for-itself", "relay"])
def test_a_torn_frame_replaces_the_worker(engine, relay, direct, monkeypatch):
    e = engine if direct else relay
    pid = e.backend.pid
    seen = []

    def tearing(data):
        message = parse_frame(data)
        if message[0] == "delta":
            seen.append(message)
            if len(seen) == 3:
                raise pickle.UnpicklingError("pickle data was truncated")
        return message

    monkeypatch.setattr(engine_module, "parse_frame", tearing)
    with pytest.raises(WorkerDiedError):
        for _ in e.stream(MSGS, opts(3500)):
            pass
    assert len(seen) == 3  # nothing after the torn frame was read
    monkeypatch.undo()
    assert sum(len(ids) for _, ids in deltas(e.stream(MSGS, opts(4)))) == 4
    assert e.backend.pid != pid


# ---------------------------------------------------------------- FramePipe on a real pipe
def _frame(message) -> bytes:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return len(data).to_bytes(4, "little") + data


def test_frame_pipe_takes_whole_frames_and_waits_out_partial_ones():
    r, w = os.pipe()
    reader = open(r, "rb", buffering=PIPE_BUFFER)  # noqa: SIM115 - closed below
    try:
        pipe = FramePipe(reader)
        assert pipe.head() == EMPTY
        small = ("delta", 1, "héllo", [1, 2])
        os.write(w, _frame(small) + _frame(("end", 1)))
        size, body = pipe.head()
        assert parse_frame(body) == small
        pipe.consume(size)
        size, body = pipe.head()
        assert parse_frame(body) == ("end", 1)
        pipe.consume(size)
        assert pipe.head() == EMPTY

        big = ("chunk", 2, "x" * 200_000)  # larger than the pipe and the buffer: written in parts
        frame = _frame(big)
        os.write(w, frame[:3])
        assert pipe.head() == PARTIAL  # not even the header yet

        def rest():
            time.sleep(0.05)
            with open(w, "wb", closefd=False) as out:
                out.write(frame[3:])

        writer = threading.Thread(target=rest)
        writer.start()
        assert parse_frame(pipe.read_whole()) == big
        writer.join()
        assert pipe.head() == EMPTY

        with open(w, "wb", closefd=False) as out:
            write_frame(out, small)
        os.close(w)
        w = -1
        size, body = pipe.head()
        pipe.consume(size)
        assert pipe.head() == EMPTY and pipe.read_whole() is None  # the end
    finally:
        reader.close()
        if w >= 0:
            os.close(w)


def test_a_frame_still_arriving_is_left_to_the_reader_thread_and_nothing_is_lost(engine, reference, monkeypatch):
    """A frame that has not all arrived (larger than one read) is the reader thread's to wait for:
    the stream's thread, which a Ctrl-C can interrupt, never holds part of one."""
    real = FramePipe.head
    me = threading.get_ident()
    looks = []

    def arriving(self):
        head = real(self)
        if threading.get_ident() == me and not isinstance(head, str):
            looks.append(head[0])
            if len(looks) % 3 == 1:
                return PARTIAL  # as if the rest were still on its way
        return head

    monkeypatch.setattr(FramePipe, "head", arriving)
    assert deltas(engine.stream(MSGS, opts())) == reference
    assert looks  # the stream's thread met a frame "still arriving" (and left it to the reader thread)
