"""Encoder sessions in worker processes: same vectors, errors come back, a dead or hung worker is replaced."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from tokenizers import Tokenizer

from conftest import FIXTURES, process_alive
from ryzenai_core import GenerationError, GenerationTimeoutError, UnsupportedModelError, WorkerDiedError, workers
from ryzenai_core.embeddings.embedding import EmbeddingEngine
from ryzenai_core.rerank.engine import RerankEngine

TINY_ST = FIXTURES / "embeddings" / "tiny-bert-st"
CROSS = FIXTURES / "rerank" / "tiny-bert-cross-encoder"
TEXTS = ["Who is the director of the Vantor Lab?", "hello", "sparse attention"]


def test_a_worker_per_static_shape_gives_the_same_vectors(tmp_path):
    worker = EmbeddingEngine(TINY_ST, execution="process", shapes="static", buckets=[16], cache_dir=tmp_path)
    try:
        result = worker.embed(TEXTS)
        assert sorted(set(result.shapes)) == [(1, 16)]
        np.testing.assert_allclose(result.vectors, EmbeddingEngine(TINY_ST).embed(TEXTS).vectors, atol=1e-5)
        (pid,) = worker.worker_pids()
        assert pid != os.getpid() and process_alive(pid)
    finally:
        worker.close()
    assert not process_alive(pid)  # close() ended and reaped it


def test_an_error_in_the_worker_is_the_call_s_and_the_worker_survives(copy_package):
    folder = copy_package(TINY_ST)
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    small = max(tok.encode("1").ids) + 1  # a table that holds "1" and the specials, not "vantor"
    assert max(tok.encode("vantor").ids) >= small
    table = numpy_helper.from_array(np.ones((small, 4), np.float32), "table")
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "input_ids"], ["last_hidden_state"])],
        "g",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["b", "s"])],
        [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["b", "s", 4])],
        [table],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save_model(model, str(folder / "onnx" / "model.onnx"))
    engine = EmbeddingEngine(folder, execution="process")
    try:
        assert len(engine.embed(["1"]).vectors[0]) == 4
        (pid,) = engine.worker_pids()
        with pytest.raises(GenerationError, match=r"onnxruntime failed on a batch of shape \[1, 3\] of model.onnx"):
            engine.embed(["vantor"])
        assert engine.worker_pids() == [pid] and process_alive(pid)
        assert len(engine.embed(["1"]).vectors[0]) == 4
    finally:
        engine.close()


def _in_a_thread(call):
    """Run ``call`` in a thread; its exceptions in the list returned with it."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            call()
        except BaseException as exc:  # noqa: BLE001 - the test reads it
            errors.append(exc)

    t = threading.Thread(target=run)
    t.start()
    return t, errors


def test_a_worker_that_dies_during_a_call_fails_that_call_and_the_next_starts_a_new_one():
    engine = EmbeddingEngine(TINY_ST, execution="process")
    try:
        want = engine.embed(TEXTS).vectors
        (pid,) = engine.worker_pids()
        (backend,) = engine.sessions.backends().values()
        os.kill(pid, signal.SIGSTOP)  # the worker cannot answer: the call below waits on it
        t, errors = _in_a_thread(lambda: engine.embed(TEXTS))
        while not backend._handlers and t.is_alive():  # the call has sent its batch (not found the worker dead)
            time.sleep(0.01)
        os.kill(pid, signal.SIGKILL)  # an execution provider crash, as the caller sees it
        t.join(timeout=30)
        assert not t.is_alive()
        assert len(errors) == 1 and isinstance(errors[0], WorkerDiedError)
        assert f"encoder worker process (pid {pid}) exited with code -9 during the call" in str(errors[0])
        assert "the next call starts a new worker" in str(errors[0])
        np.testing.assert_allclose(engine.embed(TEXTS).vectors, want, atol=1e-6)
        assert engine.worker_pids() != [pid]
    finally:
        engine.close()


def test_a_worker_that_died_between_calls_is_replaced(caplog):
    engine = EmbeddingEngine(TINY_ST, execution="process")
    try:
        engine.embed(TEXTS)
        (pid,) = engine.worker_pids()
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while process_alive(pid) and time.monotonic() < deadline:  # reaped by its reader thread
            time.sleep(0.05)
        assert len(engine.embed(TEXTS).vectors) == 3
        assert f"the encoder worker (pid {pid}) had exited; starting a new one" in caplog.text
    finally:
        engine.close()


@pytest.mark.parametrize("kind", ["embed", "rerank"])
def test_a_hung_worker_times_out_with_the_typed_error_and_is_replaced(kind, monkeypatch):
    """A worker that stops answering (a stand-in: the process stopped) fails the call after
    RYZENAI_LLM_CALL_TIMEOUT with GenerationTimeoutError, is killed, and the next call gets a new one."""
    if kind == "embed":
        engine = EmbeddingEngine(TINY_ST, execution="process")
        call = lambda: engine.embed(TEXTS).vectors  # noqa: E731
    else:
        engine = RerankEngine(CROSS, execution="process")
        call = lambda: engine.rerank(TEXTS[0], TEXTS).scores  # noqa: E731
    try:
        want = call()
        (pid,) = engine.worker_pids()
        os.kill(pid, signal.SIGSTOP)  # hung: alive, never answering
        monkeypatch.setattr(workers, "CALL_TIMEOUT", 0.5)
        with pytest.raises(GenerationTimeoutError) as info:
            call()
        message = str(info.value)
        assert f"the encoder worker (pid {pid}) did not answer a batch of 3 x " in message
        assert (
            "within 0.5 s (RYZENAI_LLM_CALL_TIMEOUT); it was stopped, and the next call starts a new worker" in message
        )
        assert info.value.phase == "batch" and isinstance(info.value, TimeoutError)
        monkeypatch.undo()
        np.testing.assert_allclose(call(), want, atol=1e-6)  # a new worker
        (new,) = engine.worker_pids()
        assert new != pid
        deadline = time.monotonic() + 30
        while process_alive(pid) and time.monotonic() < deadline:  # killed, and reaped by its reader thread
            time.sleep(0.05)
        assert not process_alive(pid)
    finally:
        engine.close()


def test_a_hung_worker_that_does_not_read_a_large_batch_times_out_too(monkeypatch):
    """A batch larger than the pipe holds waits for the worker to read it: that wait has the deadline too."""
    texts = ["the vantor lab builds speech models " * 30] * 32  # 32 x 128 tokens: ~100 KB of arrays
    engine = EmbeddingEngine(TINY_ST, execution="process")
    try:
        want = engine.embed(texts[:1]).vectors
        (pid,) = engine.worker_pids()
        os.kill(pid, signal.SIGSTOP)
        monkeypatch.setattr(workers, "CALL_TIMEOUT", 0.5)
        with pytest.raises(
            GenerationTimeoutError,
            match=rf"the encoder worker \(pid {pid}\) did not read a batch of 32 x 128 tokens .*within 0.5 s \(RYZENAI_LLM_CALL_TIMEOUT\)",
        ):
            engine.embed(texts)
        monkeypatch.undo()
        np.testing.assert_allclose(engine.embed(texts[:1]).vectors, want, atol=1e-6)
        assert engine.worker_pids() != [pid]
    finally:
        engine.close()


def test_a_worker_that_does_not_start_within_the_load_timeout_is_stopped(tmp_path, monkeypatch):
    script = tmp_path / "silent-python"
    script.write_text("#!/bin/sh\nexec sleep 600\n")
    script.chmod(0o755)
    engine = EmbeddingEngine(TINY_ST, execution="process")
    try:
        monkeypatch.setattr(sys, "executable", str(script))
        monkeypatch.setattr(workers, "LOAD_TIMEOUT", 1.0)
        with pytest.raises(
            GenerationError, match=r"the encoder worker did not start within 1 s \(RYZENAI_LLM_LOAD_TIMEOUT\)"
        ):
            engine.embed(TEXTS)
        assert engine.worker_pids() == []
        monkeypatch.undo()
        assert len(engine.embed(TEXTS).vectors) == 3
    finally:
        engine.close()


def test_a_model_onnxruntime_cannot_open_is_a_typed_error_from_the_worker(copy_package):
    folder = copy_package(TINY_ST)
    model = onnx.load(str(folder / "onnx" / "model.onnx"))
    model.graph.node[0].op_type = "NoSuchOp"
    onnx.save_model(model, str(folder / "onnx" / "model.onnx"))
    engine = EmbeddingEngine(folder, execution="process")
    try:
        with pytest.raises(UnsupportedModelError, match=r"could not open .*model.onnx on \['CPUExecutionProvider'\]"):
            engine.embed(TEXTS)
        assert engine.worker_pids() == []  # the worker exited after saying why
    finally:
        engine.close()
