"""The worker's pipe: one reader thread per worker hands every frame to its call.

What that must hold: calls from the stream's own thread or another one while it streams,
async streams beside a sync one, a Ctrl-C at any moment (the worker stays), a worker that
dies, a torn frame, a close from another thread, a write to a worker that was just killed.
Real OGA on the fixture model; real pipes.
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
from ryzenai_core import workers as workers_module
from ryzenai_core.ipc import Delta, Stream, parse_frame
from ryzenai_core.options import validated_options

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


def _second_worker(engine: Engine) -> Engine:
    """A second worker on ``engine``'s model."""
    e = Engine(engine.key, "process")
    e.load()
    return e


@pytest.fixture(scope="module")
def reference(engine):
    """The greedy answer's deltas and ids."""
    return [(c.text, tuple(c.token_ids)) for c in engine.stream(MSGS, opts())]


def deltas(stream):
    return [(c.text, tuple(c.token_ids)) for c in stream]


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


@pytest.mark.slow
def test_ctrl_c_at_any_moment_of_a_stream_keeps_the_worker(engine, request):
    """A KeyboardInterrupt in the reading thread loses at most that stream's own frame: the pipe
    stays whole, so the worker is not replaced, and the next call streams the right answer."""
    # Python's own Ctrl-C handler, whatever started pytest: a shell without job control (`pytest &`
    # in a script, nohup) starts it with SIGINT ignored, and then no Ctrl-C would ever arrive.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    request.addfinalizer(lambda: signal.signal(signal.SIGINT, previous))
    pid = engine.worker_pid()
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
        assert sum(len(ids) for _, ids in out) == 6 and engine.worker_pid() == pid
    assert interrupted >= 10  # a LONG answer outlasts every timer


def test_a_worker_killed_mid_stream_is_an_error_and_the_next_call_works(engine):
    e = engine
    pid = e.worker_pid()
    stream = e.stream(MSGS, opts(LONG))
    next(stream)
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(WorkerDiedError, match=f"pid {pid}"):
        for _ in stream:
            pass
    assert sum(len(ids) for _, ids in deltas(e.stream(MSGS, opts(4)))) == 4
    assert e.worker_pid() != pid


def test_a_torn_frame_replaces_the_worker(engine, monkeypatch):
    e = engine
    pid = e.worker_pid()
    seen = []

    def tearing(data):
        message = parse_frame(data)
        if isinstance(message, Delta):
            seen.append(message)
            if len(seen) == 3:
                raise pickle.UnpicklingError("pickle data was truncated")
        return message

    monkeypatch.setattr(workers_module, "parse_frame", tearing)
    with pytest.raises(WorkerDiedError):
        for _ in e.stream(MSGS, opts(LONG)):
            pass
    assert len(seen) == 3  # nothing after the torn frame was read
    monkeypatch.undo()
    assert sum(len(ids) for _, ids in deltas(e.stream(MSGS, opts(4)))) == 4
    assert e.worker_pid() != pid


# ---------------------------------------------------------------- close() while a stream runs
@pytest.fixture
def second(engine):
    """A second worker on the same model (closed by its test)."""
    made = []

    def _make() -> Engine:
        made.append(_second_worker(engine))
        return made[-1]

    yield _make
    for e in made:
        e.close()


def test_close_while_a_stream_takes_a_frame_is_a_worker_error(second, monkeypatch):
    """close() from another thread between the look at a frame and taking it: the stream ends with
    WorkerDiedError (the worker is gone), not an error about a closed file."""
    e = second()
    real = workers_module.parse_frame
    seen = []

    def parse(data):
        msg = real(data)
        if isinstance(msg, Delta):
            seen.append(1)
            if len(seen) == 5:
                closer = threading.Thread(target=e.close)
                closer.start()
                closer.join()
        return msg

    monkeypatch.setattr(workers_module, "parse_frame", parse)
    with pytest.raises(WorkerDiedError):
        for _ in e.stream(MSGS, opts(LONG)):
            pass


def test_close_before_a_streams_first_output_starts_no_new_worker(second):
    """close() after a stream's request went to the worker, before any output: the call fails with
    WorkerDiedError instead of being sent to a new worker that the closed engine would never end."""
    e = second()
    backend = e.backend
    sent = threading.Event()
    # the moment the request is written to the worker: the connection's private send, wrapped
    real_send = backend._send

    def send(message, *deadline):
        real_send(message, *deadline)
        if isinstance(message, Stream):
            sent.set()

    backend._send = send
    closer = threading.Thread(target=lambda: sent.wait(10) and e.close())
    closer.start()
    with pytest.raises(WorkerDiedError):
        for _ in e.stream(MSGS, opts(LONG)):
            pass
    closer.join()
    assert backend.pid is None  # no new worker


@pytest.mark.slow
def test_a_call_right_after_a_kill_is_a_worker_error_or_resent_never_a_closed_file(engine):
    """Just after a kill the worker may still look alive (its reader thread is reaping it): a write
    to its closed pipe is WorkerDiedError (and resent, as the call never reached a worker)."""
    for _ in range(6):
        pid = engine.worker_pid()
        os.kill(pid, signal.SIGKILL)
        for _ in range(3):
            try:
                out = deltas(engine.stream(MSGS, opts(4)))
            except WorkerDiedError:
                continue
            assert sum(len(ids) for _, ids in out) == 4
