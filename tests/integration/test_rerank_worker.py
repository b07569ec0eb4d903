"""Reranker sessions in worker processes, and the shape sessions every encoder engine keeps:
the same scores, bad input that leaves the worker alive, a dead worker replaced, idle sessions
closed after idle_timeout, at most max_shapes open, and a session in use never closed under a call."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time

import numpy as np
import pytest

from conftest import FIXTURES, process_alive
from ryzenai_core import InvalidRequestError, MissingTokenizerError, UnsupportedModelError, WorkerDiedError
from ryzenai_core.embeddings.embedding import EmbeddingEngine
from ryzenai_core.rerank.engine import RerankEngine
from ryzenai_core.rerank.package import RerankPackage

BERT = FIXTURES / "rerank" / "tiny-bert-cross-encoder"
XLMR = FIXTURES / "rerank" / "tiny-xlmr-reranker"
TWO_LABELS = FIXTURES / "rerank" / "tiny-bert-2-labels"
TINY_ST = FIXTURES / "embeddings" / "tiny-bert-st"
QUERY = "Who is the director of the Vantor Lab?"
DOCS = [
    "x",
    "The Vantor Lab was founded in 2011. The director of the Vantor Lab is Ilsa Brandecott.",
    "The Orsk Foundry is located in Tamberlow. The Orsk Foundry was established in 1998. " * 3,
]
BUCKETS = [16, 32, 128]  # the three documents beside the query land in one bucket each


def _wait_until(condition, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


def test_a_worker_per_static_shape_gives_the_same_scores(tmp_path):
    worker = RerankEngine(XLMR, execution="process", shapes="static", buckets=BUCKETS, cache_dir=tmp_path)
    try:
        result = worker.rerank(QUERY, DOCS)
        assert [n for _, n in result.shapes] == BUCKETS
        np.testing.assert_allclose(result.scores, RerankEngine(XLMR).rerank(QUERY, DOCS).scores, atol=1e-5)
        pids = worker.worker_pids()
        assert len(pids) == 3 and os.getpid() not in pids and all(process_alive(p) for p in pids)
    finally:
        worker.close()
    assert not any(process_alive(p) for p in pids)


def test_bad_input_is_refused_before_the_worker_and_the_worker_survives(copy_package):
    engine = RerankEngine(BERT, execution="process")
    try:
        want = engine.rerank(QUERY, DOCS).scores
        (pid,) = engine.worker_pids()
        assert engine.rerank(QUERY, []).scores == []
        for query, docs in [(QUERY, ["\ud800"]), ("q\udfff", DOCS), (QUERY, [None]), ("v " * 600, DOCS)]:
            with pytest.raises(InvalidRequestError):
                engine.rerank(query, docs)
        with pytest.raises(InvalidRequestError, match="over tiny-bert-cross-encoder's maximum of 512"):
            engine.rerank(QUERY, ["vantor lab " * 300], on_overflow="error")
        assert engine.rerank(QUERY, ["cafe\u0301 \u200b 🧪 ヴァン"]).scores  # odd Unicode is just text
        assert len(engine.rerank(QUERY, ["vantor lab " * 300]).truncated) == 1
        folder = copy_package(BERT)
        (folder / "tokenizer.json").unlink()
        with pytest.raises(MissingTokenizerError):
            RerankPackage.open(folder)
        with pytest.raises(UnsupportedModelError, match="2 labels"):
            RerankPackage.open(TWO_LABELS)
        assert engine.worker_pids() == [pid] and process_alive(pid)
        np.testing.assert_allclose(engine.rerank(QUERY, DOCS).scores, want, atol=1e-6)
    finally:
        engine.close()


def test_a_worker_that_dies_during_a_call_fails_that_call_and_the_next_starts_a_new_one():
    engine = RerankEngine(XLMR, execution="process")
    try:
        want = engine.rerank(QUERY, DOCS).scores
        (pid,) = engine.worker_pids()
        os.kill(pid, signal.SIGKILL)  # an execution provider crash, as the caller sees it
        deadline = time.monotonic() + 30
        while process_alive(pid) and time.monotonic() < deadline:  # reaped by its reader thread
            time.sleep(0.05)
        engine.rerank(QUERY, DOCS)  # found dead between calls: replaced
        (second,) = engine.worker_pids()
        os.kill(second, signal.SIGSTOP)
        errors: list[BaseException] = []

        def call() -> None:
            try:
                engine.rerank(QUERY, DOCS)
            except BaseException as exc:  # noqa: BLE001
                errors.append(exc)

        t = threading.Thread(target=call)
        t.start()
        time.sleep(0.3)  # the call waits on the stopped worker
        os.kill(second, signal.SIGKILL)
        t.join(timeout=30)
        assert not t.is_alive() and len(errors) == 1 and isinstance(errors[0], WorkerDiedError)
        np.testing.assert_allclose(engine.rerank(QUERY, DOCS).scores, want, atol=1e-6)
        assert engine.worker_pids() not in ([pid], [second])
    finally:
        engine.close()


# -- sessions shared with the other models of the NPU -------------------------------------------


@pytest.mark.slow
def test_idle_workers_are_closed_after_idle_timeout_and_reopened_on_use(tmp_path):
    engine = RerankEngine(
        BERT, execution="process", shapes="static", buckets=BUCKETS, cache_dir=tmp_path, idle_timeout=0.5
    )
    try:
        want = engine.rerank(QUERY, DOCS).scores
        pids = engine.worker_pids()  # those not idle for 0.5 s yet (starting a worker can take longer here)
        assert pids and engine.describe()["idle_timeout"] == 0.5
        assert _wait_until(lambda: not engine.worker_pids()), engine.open_shapes()
        assert _wait_until(lambda: not any(process_alive(p) for p in pids))  # ended and reaped
        np.testing.assert_allclose(engine.rerank(QUERY, DOCS).scores, want, atol=1e-6)  # reopened
        assert engine.worker_pids() and not set(engine.worker_pids()) & set(pids)
    finally:
        engine.close()


def test_the_default_idle_timeout_keeps_sessions_between_calls(tmp_path):
    engine = EmbeddingEngine(TINY_ST, execution="process", shapes="static", buckets=[16, 64], cache_dir=tmp_path)
    try:
        engine.embed(["hello", "the vantor lab " * 8])
        pids = engine.worker_pids()
        time.sleep(0.5)
        assert engine.worker_pids() == pids and engine.idle_timeout == 300.0
        assert (
            engine.sessions.idle_timer is not None and engine.sessions.idle_timer.daemon
        )  # never keeps the program from exiting
    finally:
        engine.close()
    assert engine.sessions.idle_timer is None


def test_an_idle_embedding_session_in_this_process_closes_too(tmp_path):
    engine = EmbeddingEngine(TINY_ST, shapes="static", buckets=[16, 64], cache_dir=tmp_path, idle_timeout=0.3)
    engine.embed(["hello", "the vantor lab " * 8])
    assert engine.open_shapes() == [(1, 16), (1, 64)]
    assert _wait_until(lambda: engine.open_shapes() == [])


@pytest.mark.slow
def test_max_shapes_keeps_the_most_recently_used_sessions(tmp_path):
    engine = RerankEngine(BERT, execution="process", shapes="static", buckets=BUCKETS, cache_dir=tmp_path, max_shapes=1)
    try:
        want = RerankEngine(BERT).rerank(QUERY, DOCS).scores
        result = engine.rerank(QUERY, DOCS)
        np.testing.assert_allclose(result.scores, want, atol=1e-5)
        assert engine.open_shapes() == [(1, 128)] and len(engine.worker_pids()) == 1  # the last bucket used
        engine.rerank(QUERY, DOCS[:1])
        assert engine.open_shapes() == [(1, 16)]
    finally:
        engine.close()
    with pytest.raises(InvalidRequestError, match="max_shapes is 0"):
        RerankEngine(BERT, max_shapes=0)
    with pytest.raises(InvalidRequestError, match="idle_timeout is -1"):
        RerankEngine(BERT, idle_timeout=-1)


def test_a_session_in_use_is_not_closed_by_the_idle_timer_or_the_cap(tmp_path):
    engine = RerankEngine(
        BERT,
        execution="process",
        shapes="static",
        buckets=[16, 128],
        cache_dir=tmp_path,
        idle_timeout=0.2,
        max_shapes=1,
    )
    want = engine.rerank(QUERY, DOCS[2:]).scores
    (pid,) = engine.worker_pids()
    try:
        os.kill(pid, signal.SIGSTOP)  # the next call on (1, 128) waits on it
        out: list[list[float]] = []
        t = threading.Thread(target=lambda: out.append(engine.rerank(QUERY, DOCS[2:]).scores))
        t.start()
        time.sleep(0.6)  # past idle_timeout, with the call still running
        short = engine.rerank(QUERY, DOCS[:1]).scores  # another shape beyond max_shapes=1 meanwhile
        assert process_alive(pid) and pid in engine.worker_pids()
        os.kill(pid, signal.SIGCONT)
        t.join(timeout=30)
        np.testing.assert_allclose(out[0], want, atol=1e-6)
        assert len(short) == 1
        assert _wait_until(lambda: len(engine.open_shapes()) == 0)  # both idle now: closed
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
        engine.close()
