"""The three models of a RAG pipeline side by side, as on one NPU: an LLM (OGA, in its worker), an
embedder and a reranker (a worker per static shape each), called at once from threads and from
asyncio, give what each gives when it runs alone."""

from __future__ import annotations

import asyncio
import threading

import numpy as np

from conftest import FIXTURES, TINY_QWEN3
from ryzenai_core.embeddings import EmbeddingEngine
from ryzenai_core.engine import Engine
from ryzenai_core.messages import ChatMessage
from ryzenai_core.options import validated_options
from ryzenai_core.rerank import RerankEngine

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


def test_an_llm_an_embedder_and_a_reranker_side_by_side_from_threads_and_asyncio(tmp_path):
    llm = Engine.get(TINY_QWEN3, execution="process")
    embedder = EmbeddingEngine(TINY_ST, isolation="process", shapes="static", buckets=[16, 64], cache_dir=tmp_path)
    reranker = RerankEngine(XLMR, isolation="process", shapes="static", buckets=[32, 64], cache_dir=tmp_path)
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

        threads = [threading.Thread(target=worker, args=(kind, 6)) for kind in ("llm", "embed", "rerank", "rerank", "embed")]
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
