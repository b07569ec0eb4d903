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

from conftest import LASTING_MODEL, close_engines_under
from ryzenai_core import ChatMessage, Engine, WorkerDiedError
from ryzenai_core import engine as engine_module
from ryzenai_core._frames import EMPTY, PARTIAL, PIPE_BUFFER, FramePipe, parse_frame, write_frame
from ryzenai_core.engine import _WorkerBackend
from ryzenai_core.options import validated_options

pytestmark = pytest.mark.skipif(not engine_module.DIRECT_READ, reason="a stream reads for itself on POSIX only")

MSGS = [ChatMessage("user", "Tell me about the NPU.")]
N = 48
LONG = 3500  # about 1.3 s of LASTING_MODEL's answer (it has no date line that could make it end early)


def opts(n: int = N):
    return validated_options(max_new_tokens=n, temperature=0, kv_reuse=False)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    folder = tmp_path_factory.mktemp("pipe")
    path = folder / LASTING_MODEL.name  # its long answers outlast every timer here, on any day
    shutil.copytree(LASTING_MODEL, path)
    yield path
    close_engines_under(folder)


@pytest.fixture(scope="module")
def engine(model):
    e = Engine.get(model, execution="process")
    e.load()
    return e


def _second_worker(engine: Engine, direct: bool) -> Engine:
    """A second worker on ``engine``'s model, reading for itself or with every frame relayed."""
    e = Engine(engine.key, "process")
    e.backend.direct_read = direct
    e.load()
    return e


@pytest.fixture(scope="module")
def relay(engine):
    """A second worker on the same model whose frames all go through the reader thread (as on Windows)."""
    e = _second_worker(engine, direct=False)
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


def test_a_ctrl_c_after_any_call_of_the_streams_own_reading_leaves_the_pipe_usable(engine, reference, monkeypatch):
    """A KeyboardInterrupt right after each call, in turn, of the code by which a stream reads the
    pipe for itself (where Python raises a signal's exception: when a call returns): the pipe's
    turn is never left taken (the reader thread and every later call would wait for it forever),
    the pipe is never left in the middle of a frame, and the next stream streams the right answer
    on the same worker."""
    pid = engine.backend.pid
    me = threading.get_ident()
    calls = {"n": 0, "at": 0}

    def interrupting(real):
        def call(*args, **kwargs):
            out = real(*args, **kwargs)
            if threading.get_ident() == me:
                calls["n"] += 1
                if calls["n"] == calls["at"]:
                    raise KeyboardInterrupt
            return out

        return call

    for owner, name in [
        (_WorkerBackend, "_claim"),
        (_WorkerBackend, "_take_pipe"),
        (_WorkerBackend, "_read_own"),
        (_WorkerBackend, "_dispatch"),
        (_WorkerBackend, "_step_back"),
        (FramePipe, "head"),
        (FramePipe, "consume"),
        (engine_module, "parse_frame"),
        (engine_module, "Chunk"),
    ]:
        monkeypatch.setattr(owner, name, interrupting(getattr(owner, name)))
    interrupted = 0
    for at in range(1, 80):
        calls.update(n=0, at=at)
        try:
            for _ in engine.stream(MSGS, opts()):
                pass
        except KeyboardInterrupt:
            interrupted += 1
        calls["at"] = 0
        # A turn left taken would stop the reader thread and every later stream, which would
        # wait for it forever: the next one runs in a thread of its own, given 30 s.
        out: list = []
        after = threading.Thread(target=lambda out=out: out.append(deltas(engine.stream(MSGS, opts()))), daemon=True)
        after.start()
        after.join(30)
        assert out == [reference], f"the stream after an interrupt at call {at} did not stream the answer"
    assert interrupted == 79
    assert engine.backend.pid == pid


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
            for _ in engine.stream(MSGS, opts(LONG)):
                pass
        except KeyboardInterrupt:
            interrupted += 1
        finally:
            timer.join()
        out = deltas(engine.stream(MSGS, opts(6)))
        assert sum(len(ids) for _, ids in out) == 6 and engine.backend.pid == pid
    assert interrupted >= 10  # a LONG answer outlasts every timer


@pytest.mark.parametrize("direct", [True, False], ids=["reads-for-itself", "relay"])
def test_a_worker_killed_mid_stream_is_an_error_and_the_next_call_works(engine, relay, direct):
    e = engine if direct else relay
    pid = e.backend.pid
    stream = e.stream(MSGS, opts(LONG))
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
        for _ in e.stream(MSGS, opts(LONG)):
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


# ---------------------------------------------------------------- close() while a stream runs
@pytest.fixture
def second(engine):
    """A second worker on the same model (closed by its test), reading for itself or relayed."""
    made = []

    def _make(direct: bool) -> Engine:
        made.append(_second_worker(engine, direct))
        return made[-1]

    yield _make
    for e in made:
        e.close()


@pytest.mark.parametrize("direct", [True, False], ids=["reads-for-itself", "relay"])
def test_close_while_a_stream_takes_a_frame_is_a_worker_error(second, direct, monkeypatch):
    """close() from another thread between the look at a frame and taking it: the stream ends with
    WorkerDiedError (the worker is gone), not an error about a closed file."""
    e = second(direct)
    real = engine_module.parse_frame
    seen = []

    def parse(data):
        msg = real(data)
        if msg[0] == "delta":
            seen.append(1)
            if len(seen) == 5:
                closer = threading.Thread(target=e.close)
                closer.start()
                closer.join()
        return msg

    monkeypatch.setattr(engine_module, "parse_frame", parse)
    with pytest.raises(WorkerDiedError):
        for _ in e.stream(MSGS, opts(LONG)):
            pass


@pytest.mark.parametrize("direct", [True, False], ids=["reads-for-itself", "relay"])
def test_close_before_a_streams_first_output_starts_no_new_worker(second, direct):
    """close() after a stream's request went to the worker, before any output: the call fails with
    WorkerDiedError instead of being sent to a new worker that the closed engine would never end."""
    e = second(direct)
    backend = e.backend
    sent = threading.Event()
    real_send = backend._send

    def send(message):
        real_send(message)
        if message[0] == "stream":
            sent.set()

    backend._send = send
    closer = threading.Thread(target=lambda: sent.wait(10) and e.close())
    closer.start()
    with pytest.raises(WorkerDiedError):
        for _ in e.stream(MSGS, opts(LONG)):
            pass
    closer.join()
    assert backend._proc is None and backend.pid is None
