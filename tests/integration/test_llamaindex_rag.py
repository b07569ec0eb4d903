"""RyzenAILLM inside LlamaIndex pipelines on real OGA: query engines and a chat engine over
documents larger than the window, with LlamaIndex's default tokenizer and with the package's;
bucket-aware packing on replicas of Ryzen AI NPU packages (run on the CPU)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import random
import shutil

import llama_index.core
import pytest
from llama_index.core import Document, Settings, SummaryIndex, VectorStoreIndex
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.chat_engine import CondensePlusContextChatEngine
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.instrumentation.events.llm import LLMChatEndEvent, LLMCompletionEndEvent
from llama_index.core.memory import ChatMemoryBuffer
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.schema import MetadataMode

from conftest import REPLICAS, TINY_LLAMA
from llamaindex_ryzenai import BucketPackingPostprocessor, PackageTokenizer, RyzenAILLM
from llamaindex_ryzenai.postprocessor import REPORT_KEY
from ryzenai_core import ContextWindowExceededError

QWEN_NPU = REPLICAS / "Qwen3-4B_rai_1.8.0_npu_4K"
LLAMA_NPU = REPLICAS / "Llama-3.2-1B_rai_1.8.0_npu_4K"


class HashEmbedding(BaseEmbedding):
    """A deterministic local embedding: hashed bag of words (no downloads)."""

    dim: int = 64

    @classmethod
    def class_name(cls) -> str:
        return "HashEmbedding"

    def _vector(self, text: str) -> list[float]:
        v = [0.0] * self.dim
        for word in text.lower().split():
            v[int(hashlib.md5(word.encode()).hexdigest(), 16) % self.dim] += 1.0
        norm = math.sqrt(sum(x * x for x in v)) or 1.0
        return [x / norm for x in v]

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._vector(query)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._vector(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._vector(text)


class Calls(BaseEventHandler):
    """The usage and budget plan of every LLM call (from the responses' raw data)."""

    raws: list = []

    @classmethod
    def class_name(cls) -> str:
        return "Calls"

    texts: list = []

    def handle(self, event, **kwargs) -> None:
        if isinstance(event, LLMChatEndEvent) and event.response is not None:
            self.raws.append(event.response.raw)
            self.texts.append(event.response.message.content or "")
        elif isinstance(event, LLMCompletionEndEvent):
            self.raws.append(event.response.raw)
            self.texts.append(event.response.text)

    @property
    def prompts(self) -> list[int]:
        return [r["usage"]["prompt_tokens"] for r in self.raws]


# Mixed text: English, German compounds, Russian, code: several times more package tokens than
# tiktoken tokens with the fixtures' small tokenizer.
EN = "the npu pads every prompt to a precompiled prefill bucket so a prompt of one thousand tokens costs more".split()
DE = "Gesundheitsversorgung Zusammenarbeit Krankenhäuser Rechenleistung Speicherbandbreite Zwischenspeicher".split()
RU = "процессор память модель запуск ноутбук задержка пропускная способность кэш окно".split()
CODE = "def prefill_bucket(n: int) -> int: return min(b for b in BUCKETS if b >= n) # 1024 2048 0x1f".split()


def documents(n: int = 10, words: int = 180, seed: int = 7) -> list[Document]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        sentences = []
        while sum(len(s.split()) for s in sentences) < words:
            pool = rng.choice([EN, EN, DE, RU, CODE])
            sentences.append(" ".join(rng.choice(pool) for _ in range(rng.randint(6, 16))).capitalize() + ".")
        out.append(Document(text=" ".join(sentences), metadata={"title": f"note {i}"}))
    return out


DOCS = documents()


pytestmark = pytest.mark.usefixtures("llamaindex_event_loop")


@pytest.fixture(autouse=True)
def _fresh_settings(monkeypatch):
    """Each test starts with LlamaIndex's default tokenizer (tiktoken, bundled with llama-index-core)."""
    monkeypatch.setattr(llama_index.core, "global_tokenizer", None)


@pytest.fixture
def calls():
    handler = Calls(raws=[], texts=[])
    get_dispatcher().add_event_handler(handler)
    yield handler
    get_dispatcher().event_handlers.remove(handler)


@pytest.fixture(scope="module")
def llama():
    # the module's fixtures keep LlamaIndex's default tokenizer unless a test sets the package's
    return RyzenAILLM(
        model=str(TINY_LLAMA), max_new_tokens=16, temperature=0, execution="process", use_package_tokenizer=False
    )


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """tiny-llama with a 1024-token window."""
    folder = tmp_path_factory.mktemp("models") / "tiny-llama-1k"
    shutil.copytree(TINY_LLAMA, folder)
    cfg = json.loads((folder / "genai_config.json").read_text())
    cfg["search"]["max_length"] = 1024
    (folder / "genai_config.json").write_text(json.dumps(cfg))
    return RyzenAILLM(
        model=str(folder), max_new_tokens=16, temperature=0, execution="process", use_package_tokenizer=False
    )


@pytest.fixture(scope="module")
def qwen_npu():
    return RyzenAILLM(
        model=str(QWEN_NPU),
        provider="cpu",
        max_new_tokens=1,
        temperature=0,
        execution="process",
        use_package_tokenizer=False,
    )


def assert_every_call_fits(llm, calls, at_least=1):
    budget = llm.budget
    assert len(calls.raws) >= at_least
    for raw in calls.raws:
        plan = raw["budget_plan"]
        assert plan["prompt_tokens"] <= budget.max_prompt_tokens
        assert plan["prompt_tokens"] + plan["max_new_tokens"] <= budget.window
        assert plan["clamped"] is False  # the output budget was never cut to make room


def run_query(engine, face: str, question: str) -> str:
    if face == "sync":
        return str(engine.query(question))
    if face == "async":
        return str(asyncio.run(engine.aquery(question)))
    response = engine.query(question)
    return "".join(response.response_gen)


# ---------------------------------------------------------------------- default tokenizer
def test_the_documents_are_larger_than_the_window(llama):
    total = sum(len(llama.tokenizer(d.text)) for d in DOCS)
    assert total > 1.5 * llama.budget.window
    assert llama.tokenizer is llama.tokenizer  # one tokenizer object per LLM (identity matters to Settings)


@pytest.mark.parametrize("face", ["sync", "async", "stream"])
@pytest.mark.parametrize("mode", ["compact", "refine"])
def test_query_engines_never_overflow_with_the_default_tokenizer(llama, calls, mode, face):
    assert llama_index.core.global_tokenizer is None  # nothing set: LlamaIndex's tiktoken default
    if mode == "compact":
        index = VectorStoreIndex.from_documents(DOCS, embed_model=HashEmbedding())
        engine = index.as_query_engine(
            llm=llama, similarity_top_k=len(DOCS), response_mode=mode, streaming=face == "stream"
        )
    else:
        engine = SummaryIndex.from_documents(DOCS).as_query_engine(
            llm=llama, response_mode=mode, streaming=face == "stream"
        )
    answer = run_query(engine, face, "Which prefill bucket does a prompt of one thousand tokens cost?")
    assert answer.strip() == calls.texts[-1].strip()  # the answer is the last call's output, whole
    assert_every_call_fits(llama, calls, at_least=3)  # the context really had to be split


@pytest.mark.slow
def test_condense_plus_context_chat_engine(llama, calls):
    index = VectorStoreIndex.from_documents(DOCS, embed_model=HashEmbedding())
    # ChatMemoryBuffer, as LlamaIndex sizes it (context_window - 256): the default Memory keeps an
    # aiosqlite connection that it never closes (a ResourceWarning from LlamaIndex at exit).
    memory = ChatMemoryBuffer.from_defaults(token_limit=llama.metadata.context_window - 256)
    engine = CondensePlusContextChatEngine.from_defaults(
        index.as_retriever(similarity_top_k=2), llm=llama, memory=memory, system_prompt="Answer from the notes."
    )
    first = engine.chat("What does the NPU pad?")
    assert first.source_nodes and first.response.strip() == calls.texts[-1].strip()
    second = engine.chat("And how much does that cost?")  # condensed with the history (a completion)
    assert second.response.strip() == calls.texts[-1].strip()
    streamed = engine.stream_chat("Which bucket?")
    assert "".join(streamed.response_gen).strip() == streamed.response.strip()

    async def run():
        a = await engine.achat("What about the cache?")
        s = await engine.astream_chat("And the window?")
        text = "".join([t async for t in s.async_response_gen()])
        return a.response, text

    n = len(calls.texts)
    a, text = asyncio.run(run())
    assert len(calls.texts) >= n + 2 and text.strip() == calls.texts[-1].strip()
    assert a.strip() in [t.strip() for t in calls.texts[n:]]
    assert len(engine.chat_history) == 10
    assert_every_call_fits(llama, calls, at_least=8)


# ---------------------------------------------------------------------- the package's tokenizer
def test_with_the_package_tokenizer_packing_is_exact_and_tight(llama, calls):
    docs = DOCS[:5]
    assert sum(len(llama.tokenizer(d.text)) for d in docs) > llama.budget.window
    engine = VectorStoreIndex.from_documents(docs, embed_model=HashEmbedding()).as_query_engine(
        llm=llama, similarity_top_k=len(docs)
    )
    engine.query("What does the NPU pad?")
    default_prompts = calls.prompts
    calls.raws.clear()

    Settings.tokenizer = llama.tokenizer
    engine = VectorStoreIndex.from_documents(docs, embed_model=HashEmbedding()).as_query_engine(
        llm=llama, similarity_top_k=len(docs)
    )
    engine.query("What does the NPU pad?")
    exact_prompts = calls.prompts
    assert_every_call_fits(llama, calls, at_least=2)
    room = min(llama.budget.max_prompt_tokens, llama.budget.window - 16)
    # only LlamaIndex's own reserve (500 tokens of response padding in compact mode) stays free
    assert exact_prompts[0] > room - 600
    assert len(exact_prompts) < len(default_prompts) and max(default_prompts) < exact_prompts[0]


@pytest.fixture(scope="module")
def small_index(small):
    """An index chunked in the small model's own tokens."""
    llama_index.core.global_tokenizer = None
    Settings.tokenizer = small.tokenizer
    try:
        return VectorStoreIndex.from_documents(
            DOCS[:6], embed_model=HashEmbedding(), transformations=[SentenceSplitter(chunk_size=256, chunk_overlap=0)]
        )
    finally:
        llama_index.core.global_tokenizer = None


@pytest.mark.slow
@pytest.mark.parametrize("face", ["sync", "async", "stream"])
def test_a_small_window_with_the_package_tokenizer(small, small_index, calls, face):
    Settings.tokenizer = small.tokenizer
    assert small.budget.window == 1024
    assert sum(len(small.tokenizer(d.text)) for d in DOCS[:6]) > 4 * small.budget.window
    engine = small_index.as_query_engine(llm=small, similarity_top_k=8, streaming=face == "stream")
    run_query(engine, face, "What does the NPU pad?")
    assert_every_call_fits(small, calls, at_least=2)


def test_a_long_chat_history_drops_old_turns_when_asked(small):
    turn = " ".join(EN)
    history = [
        ChatMessage(role="user" if i % 2 == 0 else "assistant", content=f"{i}: {turn} {turn}") for i in range(21)
    ]
    assert small.count_tokens(history) > small.budget.window
    with pytest.raises(ContextWindowExceededError, match="prompt limit"):
        small.chat(history)
    dropping = RyzenAILLM(model=small.model, max_new_tokens=8, overflow="drop_oldest")
    response = dropping.chat(history)
    assert response.additional_kwargs["dropped_messages"] > 0
    assert response.additional_kwargs["prompt_tokens"] + 8 <= small.budget.window


# ---------------------------------------------------------------------- bucket-aware packing
QUESTIONS = [
    "Which prefill bucket does a prompt cost?",
    "What is the cache window of the laptop?",
    "How does the processor start the model?",
    "Where are the hospitals?",
    "Which bucket holds one thousand tokens?",
    "What does min return?",
]


@pytest.fixture(scope="module")
def npu_index(qwen_npu):
    Settings.tokenizer = qwen_npu.tokenizer
    try:
        docs = documents(n=24, words=90, seed=11)
        return VectorStoreIndex.from_documents(
            docs, embed_model=HashEmbedding(), transformations=[SentenceSplitter(chunk_size=160, chunk_overlap=0)]
        )
    finally:
        llama_index.core.global_tokenizer = None


def test_bucket_packing_lands_on_bucket_edges_on_a_replica(qwen_npu, npu_index, calls):
    Settings.tokenizer = qwen_npu.tokenizer
    packer = BucketPackingPostprocessor(llm=qwen_npu, default_top_n=4)
    plain = npu_index.as_query_engine(llm=qwen_npu, similarity_top_k=4)
    packed = npu_index.as_query_engine(llm=qwen_npu, similarity_top_k=10, node_postprocessors=[packer])
    saved = []
    for question in QUESTIONS:
        calls.raws.clear()
        plain.query(question)
        (default_plan,) = [r["budget_plan"] for r in calls.raws]
        calls.raws.clear()
        response = packed.query(question)
        (plan,) = [r["budget_plan"] for r in calls.raws]  # still one call: PromptHelper did not split it
        report = packer.last_report
        # the report is exact: it is the prompt the NPU got, and the default is what it would have got
        assert (report["prompt_tokens"], report["padding"]) == (plan["prompt_tokens"], plan["padding"])
        assert (report["default_prompt_tokens"], report["default_padding"]) == (
            default_plan["prompt_tokens"],
            default_plan["padding"],
        )
        assert plan["prefill_bucket"] <= default_plan["prefill_bucket"]
        assert plan["padding"] <= default_plan["padding"] and report["padding_saved"] >= 0
        assert plan["prompt_tokens"] <= qwen_npu.budget.max_prompt_tokens
        for node in response.source_nodes:
            assert node.node.metadata[REPORT_KEY] == report
            assert REPORT_KEY not in node.node.get_content(metadata_mode=MetadataMode.LLM)
            assert REPORT_KEY not in node.node.get_content(metadata_mode=MetadataMode.EMBED)
        saved.append(report["padding_saved"])
    assert sum(saved) > 0 and any(s > 0 for s in saved)
    # the nodes in the index were not changed (the packer works on copies)
    assert all(REPORT_KEY not in n.metadata for n in npu_index.docstore.docs.values())


def test_bucket_packing_async_and_with_the_default_tokenizer(qwen_npu, npu_index, calls):
    packer = BucketPackingPostprocessor(llm=qwen_npu, default_top_n=4, max_context_loss=0.2)
    engine = npu_index.as_query_engine(llm=qwen_npu, similarity_top_k=10, node_postprocessors=[packer])

    async def run():
        return [await engine.aquery(q) for q in QUESTIONS[:3]]

    asyncio.run(run())  # default tokenizer: the packer also keeps within what PromptHelper accepts
    assert len(calls.raws) == 3  # one LLM call per query: nothing was split
    for (raw,) in zip(calls.raws):
        assert raw["budget_plan"]["prompt_tokens"] <= qwen_npu.budget.max_prompt_tokens
    assert packer.last_report is not None and packer.last_report["padding_saved"] >= 0


def test_packages_without_buckets_keep_default_packing(llama):
    index = VectorStoreIndex.from_documents(DOCS, embed_model=HashEmbedding())
    nodes = index.as_retriever(similarity_top_k=5).retrieve("NPU")
    packer = BucketPackingPostprocessor(llm=llama, default_top_n=3)
    assert [n.node.node_id for n in packer.postprocess_nodes(nodes, query_str="NPU")] == [
        n.node.node_id for n in nodes[:3]
    ]


def test_packing_without_buckets_is_reported_and_logged(llama, caplog, calls):
    import logging

    index = VectorStoreIndex.from_documents(DOCS, embed_model=HashEmbedding())
    packer = BucketPackingPostprocessor(llm=llama, default_top_n=2)
    engine = index.as_query_engine(llm=llama, similarity_top_k=5, node_postprocessors=[packer])
    with caplog.at_level(logging.INFO, logger="llamaindex_ryzenai"):
        response = engine.query("NPU")
        engine.query("NPU again")
    report = packer.last_report
    assert report is not None and report["strategy"] == "no_buckets" and report["prefill_bucket"] is None
    assert report["nodes"] == report["default_nodes"] == 2 and report["padding"] == 0 and report["partial"] is False
    assert report["limit"] == min(llama.budget.prompt_limit, llama.budget.window - 16)
    assert report["prompt_tokens"] <= report["limit"]
    assert all(n.node.metadata["ryzenai_packing"]["strategy"] == "no_buckets" for n in response.source_nodes)
    assert caplog.text.count("has no prefill buckets") == 1  # once per postprocessor, not per query
    assert "BucketPackingPostprocessor sends the top 2 nodes as they are" in caplog.text


@pytest.mark.slow
def test_the_llama_npu_replica_answers_within_its_release_limit(calls):
    llm = RyzenAILLM(model=str(LLAMA_NPU), provider="cpu", max_new_tokens=4)
    assert llm.budget.prompt_limit == 4095 and llm.budget.prefill_buckets[0] == 128
    engine = VectorStoreIndex.from_documents(DOCS, embed_model=HashEmbedding()).as_query_engine(
        llm=llm, similarity_top_k=len(DOCS)
    )
    engine.query("What does the NPU pad?")
    assert_every_call_fits(llm, calls, at_least=2)
    assert all(r["budget_plan"]["prefill_bucket"] in llm.budget.prefill_buckets for r in calls.raws)


@pytest.mark.parametrize("mode", ["compact", "refine"])
def test_default_settings_count_with_the_package_tokenizer(calls, mode):
    """No Settings.tokenizer, default RyzenAILLM: LlamaIndex ends up counting exactly and every call fits."""
    llm = RyzenAILLM(model=str(TINY_LLAMA), max_new_tokens=16, temperature=0)
    engine = SummaryIndex.from_documents(DOCS).as_query_engine(llm=llm, response_mode=mode)
    engine.query("Which prefill bucket does a prompt of one thousand tokens cost?")
    assert isinstance(llama_index.core.global_tokenizer.__self__, PackageTokenizer)
    assert_every_call_fits(llm, calls, at_least=2)
