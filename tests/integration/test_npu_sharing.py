"""The three models of a RAG pipeline side by side, as on one NPU: an LLM (OGA, in its worker), an
embedder and a reranker (a worker per static shape each), called at once from threads and from
asyncio, give what each gives when it runs alone; and one NPU model is loaded by one worker."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import numpy as np
import pytest

from conftest import FIXTURES, REPLICAS, TINY_QWEN3, close_engines_under, process_alive
from langchain_ryzenai import ChatRyzenAI
from llamaindex_ryzenai import RyzenAILLM
from ryzenai_core import RuntimeNotAvailableError
from ryzenai_core.embeddings.embedding import EmbeddingEngine
from ryzenai_core.engine.engine import Engine
from ryzenai_core.messages import ChatMessage
from ryzenai_core.options import validated_options
from ryzenai_core.rerank.engine import RerankEngine

TINY_ST = FIXTURES / "embeddings" / "tiny-bert-st"
XLMR = FIXTURES / "rerank" / "tiny-xlmr-reranker"
QUESTIONS = ["Who is the director of the Vantor Lab?", "Where is the Orsk Foundry?", "What does Kessarine build?"]
PASSAGES = [
    "The Vantor Lab was founded in 2011. The director of the Vantor Lab is Ilsa Brandecott.",
    "The Orsk Foundry is located in Tamberlow. " * 4,
    "Kessarine Systems builds the Pellix accelerator.",
    "sparse attention",
]
OPTIONS = validated_options(temperature=0, max_new_tokens=24, kv_reuse=False)


def _messages(question: str) -> list[ChatMessage]:
    return [ChatMessage("user", f"Context: {PASSAGES[0]}\n\nQuestion: {question}")]


@pytest.mark.slow
def test_an_llm_an_embedder_and_a_reranker_side_by_side_from_threads_and_asyncio(tmp_path):
    llm = Engine.get(TINY_QWEN3, execution="process")
    embedder = EmbeddingEngine(TINY_ST, execution="process", shapes="static", buckets=[16, 64], cache_dir=tmp_path)
    reranker = RerankEngine(XLMR, execution="process", shapes="static", buckets=[32, 64], cache_dir=tmp_path)
    try:
        quiet_text = {q: llm.generate(_messages(q), OPTIONS).text for q in QUESTIONS}
        quiet_vectors = {q: embedder.embed([q, *PASSAGES], kind="query").vectors for q in QUESTIONS}
        quiet_scores = {q: reranker.rerank(q, PASSAGES).scores for q in QUESTIONS}
        assert len(embedder.worker_pids()) == 2 and len(reranker.worker_pids()) == 2

        wrong: list[str] = []
        errors: list[BaseException] = []

        def check(kind: str, question: str, got: object) -> None:
            if kind == "llm":
                ok = got == quiet_text[question]
            elif kind == "embed":
                ok = np.allclose(got, quiet_vectors[question], atol=1e-6)  # type: ignore[arg-type]
            else:
                ok = np.allclose(got, quiet_scores[question], atol=1e-6)  # type: ignore[arg-type]
            if not ok:
                wrong.append(f"{kind} {question!r}")

        def call(kind: str, question: str) -> object:
            if kind == "llm":
                return llm.generate(_messages(question), OPTIONS).text
            if kind == "embed":
                return embedder.embed([question, *PASSAGES], kind="query").vectors
            return reranker.rerank(question, PASSAGES).scores

        def worker(kind: str, rounds: int) -> None:
            try:
                for i in range(rounds):
                    question = QUESTIONS[i % len(QUESTIONS)]
                    check(kind, question, call(kind, question))
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        async def from_asyncio() -> None:
            async def one(kind: str, question: str) -> None:
                if kind == "llm":
                    got: object = (await llm.agenerate(_messages(question), OPTIONS)).text
                else:
                    got = await asyncio.to_thread(call, kind, question)
                check(kind, question, got)

            jobs = [one(kind, q) for q in QUESTIONS for kind in ("llm", "embed", "rerank")]
            await asyncio.gather(*jobs)

        threads = [
            threading.Thread(target=worker, args=(kind, 6)) for kind in ("llm", "embed", "rerank", "rerank", "embed")
        ]
        for t in threads:
            t.start()
        asyncio.run(from_asyncio())
        for t in threads:
            t.join(timeout=120)
        assert not any(t.is_alive() for t in threads)
        assert not errors, errors
        assert not wrong, wrong
        assert len(embedder.worker_pids()) == 2 and len(reranker.worker_pids()) == 2  # one worker per shape still
    finally:
        embedder.close()
        reranker.close()


# ---------------------------------------------------------------------- one NPU model, one worker
NPU_4K = REPLICAS / "Llama-3.2-1B_rai_1.8.0_npu_4K"  # rai_config: 2048 tokens up to 1.5.1, 4096 from 1.6.0


def test_two_adapters_on_one_npu_package_that_differ_in_threads_and_an_equal_release_share_one_worker(
    copy_package, tmp_path
):
    """num_threads does not change a generation on the NPU, and releases 1.6.0 and 1.8.0 (the folder
    name's) give the same prompt limit: the model is loaded onto the NPU once, by one worker."""
    folder = copy_package(NPU_4K)
    chat = ChatRyzenAI(model=str(folder), num_threads=2)
    # use_package_tokenizer=False: LlamaIndex keeps its own global tokenizer (this package cannot load here)
    llm = RyzenAILLM(model=str(folder), num_threads=4, release="1.6.0", use_package_tokenizer=False)
    try:
        # The CPU build here cannot load the package; the worker that would has started.
        with pytest.raises(RuntimeNotAvailableError, match="needs onnxruntime-genai with AMD's Ryzen AI EP library"):
            chat.get_num_tokens("hello")
        engine = Engine.get(str(folder), num_threads=2)  # the engine of the chat model's settings
        pid = engine.worker_pid()
        assert pid is not None and process_alive(pid)
        assert llm.engine is engine and llm.engine.worker_pid() == pid
        with pytest.raises(RuntimeNotAvailableError):
            llm.complete("hello")
        assert engine.worker_pid() == pid  # the same worker answered the second adapter
        assert llm.engine.budget.prompt_limit == engine.budget.prompt_limit == 4095

        older = RyzenAILLM(model=str(folder), release="1.5.0", use_package_tokenizer=False)  # another limit: own engine
        assert older.engine is not engine and older.engine.budget.prompt_limit == 2048
    finally:
        close_engines_under(tmp_path)
    assert not process_alive(pid)


def test_cpu_runs_keep_an_engine_per_thread_count(copy_package, tmp_path):
    """On the CPU the thread count is the run's speed: a Ryzen AI package forced onto the CPU, and a
    plain package, keep one engine per thread count."""
    folder = copy_package(NPU_4K)
    try:
        assert Engine.get(folder, provider="cpu", num_threads=1) is not Engine.get(
            folder, provider="cpu", num_threads=2
        )
        plain = copy_package(TINY_QWEN3)
        assert Engine.get(plain, num_threads=1) is not Engine.get(plain, num_threads=2)
        assert Engine.get(plain, num_threads=1) is Engine.get(plain, num_threads=1)
    finally:
        close_engines_under(tmp_path)


def test_an_npu_engine_forgotten_by_every_slot_is_not_shared_again(copy_package, tmp_path):
    """The registry hands the shared NPU engine to a new thread count only while a slot still holds it."""
    folder = copy_package(NPU_4K)
    try:
        two = Engine.get(folder, num_threads=2, execution="inline")
        assert Engine.get(folder, num_threads=4, execution="inline") is two
        Engine.registry.forget(
            lambda slot: slot.key.num_threads == 2 and Path(slot.key.path) == folder.resolve(), Engine
        )
        assert Engine.get(folder, num_threads=8, execution="inline") is two  # the num_threads=4 slot holds it
        Engine.registry.forget(lambda slot: Path(slot.key.path) == folder.resolve(), Engine)
        assert Engine.get(folder, num_threads=2, execution="inline") is not two
    finally:
        close_engines_under(tmp_path)
