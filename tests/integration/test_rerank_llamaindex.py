"""RyzenAIRerank in LlamaIndex: a node postprocessor, and a query engine that retrieves wide,
reranks and packs the prompt to the NPU's bucket (a replica of a Ryzen AI package, run on the CPU)."""

from __future__ import annotations

import asyncio
import threading

import pytest
from llama_index.core import Settings, VectorStoreIndex
from llama_index.core.callbacks import CallbackManager, CBEventType
from llama_index.core.callbacks.base_handler import BaseCallbackHandler
from llama_index.core.schema import NodeWithScore, TextNode

from conftest import FIXTURES, REPLICAS
from llamaindex_ryzenai import BucketPackingPostprocessor, RyzenAIEmbedding, RyzenAILLM, RyzenAIRerank
from llamaindex_ryzenai.postprocessor import REPORT_KEY
from ryzenai_cli.demo import DEMO_DOCS, load_documents
from ryzenai_core import InvalidRequestError
from ryzenai_core.rerank.engine import RerankEngine

BERT = FIXTURES / "rerank" / "tiny-bert-cross-encoder"
XLMR = FIXTURES / "rerank" / "tiny-xlmr-reranker"
TINY_ST = FIXTURES / "embeddings" / "tiny-bert-st"
QWEN_NPU = REPLICAS / "Qwen3-4B_rai_1.8.0_npu_4K"
QUERY = "Who is the director of the Vantor Lab?"


def _nodes(texts):
    return [
        NodeWithScore(node=TextNode(text=t, id_=f"doc-{i}", metadata={"n": i}), score=0.5) for i, t in enumerate(texts)
    ]


TEXTS, _ = load_documents(DEMO_DOCS)


@pytest.mark.parametrize("folder", [BERT, XLMR], ids=lambda f: f.name)
def test_scores_are_replaced_best_first_and_top_n_kept(folder):
    nodes = _nodes(TEXTS)
    out = RyzenAIRerank(model=str(folder), top_n=3).postprocess_nodes(nodes, query_str=QUERY)
    result = RerankEngine(folder).rerank(QUERY, [n.node.get_content(metadata_mode="embed") for n in nodes])
    assert [n.node.node_id for n in out] == [f"doc-{i}" for i in result.top(3)]
    assert [n.score for n in out] == pytest.approx([result.scores[i] for i in result.top(3)])
    assert all(n.score == 0.5 for n in nodes)  # the retriever's nodes keep their own scores


def test_a_query_engine_retrieves_wide_reranks_and_packs_to_the_bucket(llamaindex_event_loop):
    llm = RyzenAILLM(model=str(QWEN_NPU), provider="cpu", max_new_tokens=1, temperature=0, use_package_tokenizer=False)
    Settings.tokenizer = llm.tokenizer
    index = VectorStoreIndex([n.node for n in _nodes(TEXTS)], embed_model=RyzenAIEmbedding(model=str(TINY_ST)))
    reranker = RyzenAIRerank(model=str(XLMR), top_n=4)
    packer = BucketPackingPostprocessor(llm=llm, default_top_n=2)
    engine = index.as_query_engine(llm=llm, similarity_top_k=len(TEXTS), node_postprocessors=[reranker, packer])
    response = engine.query(QUERY)
    wide = index.as_retriever(similarity_top_k=len(TEXTS)).retrieve(QUERY)
    ranked = reranker.postprocess_nodes(wide, query_str=QUERY)
    scores = {n.node.node_id: n.score for n in ranked}
    sources = response.source_nodes
    assert sources and all(n.node.node_id in scores for n in sources)  # only the reranker's top 4 reach the LLM
    assert [n.score for n in sources] == pytest.approx([scores[n.node.node_id] for n in sources])
    assert [n.node.node_id for n in sources] == [n.node.node_id for n in ranked][: len(sources)]  # best first
    assert all(REPORT_KEY in n.node.metadata for n in sources) and packer.last_report is not None

    async def run():
        return await engine.aquery(QUERY)

    again = asyncio.run(run())
    assert [n.node.node_id for n in again.source_nodes] == [n.node.node_id for n in sources]


def test_callbacks_see_a_reranking_event():
    seen: list = []

    class Handler(BaseCallbackHandler):
        def __init__(self) -> None:
            super().__init__([], [])

        def on_event_start(self, event_type, payload=None, event_id="", parent_id="", **kwargs):
            seen.append(("start", event_type, payload))
            return event_id

        def on_event_end(self, event_type, payload=None, event_id="", **kwargs):
            seen.append(("end", event_type, payload))

        def start_trace(self, trace_id=None) -> None: ...

        def end_trace(self, trace_id=None, trace_map=None) -> None: ...

    reranker = RyzenAIRerank(model=str(BERT), top_n=2, callback_manager=CallbackManager([Handler()]))
    out = reranker.postprocess_nodes(_nodes(TEXTS), query_str=QUERY)
    kinds = [(phase, kind) for phase, kind, _ in seen]
    assert kinds == [("start", CBEventType.RERANKING), ("end", CBEventType.RERANKING)]
    assert seen[1][2]["nodes"] == out and seen[0][2]["query_str"] == QUERY


def test_no_nodes_no_query_and_bad_input():
    reranker = RyzenAIRerank(model=str(BERT))
    assert reranker.postprocess_nodes([], query_str=QUERY) == []
    with pytest.raises(InvalidRequestError, match="needs the query to rank nodes against"):
        reranker.postprocess_nodes(_nodes(TEXTS))
    assert len(reranker.postprocess_nodes(_nodes(TEXTS), query_str=QUERY)) == 3


def test_unknown_fields_get_the_closest_names():
    with pytest.raises(
        ValueError,
        match=r"RyzenAIRerank got unknown field\(s\) 'topn' \(did you mean 'top_n'\?\); accepted fields: .*top_n",
    ):
        RyzenAIRerank(model=str(BERT), topn=2)
    with pytest.raises(ValueError, match="max_tokens"):  # the LLM's alias is not the reranker's
        RyzenAIRerank(model=str(BERT), max_tokens=2)


async def test_async_postprocessing_runs_off_the_event_loop_thread():
    reranker = RyzenAIRerank(model=str(BERT), top_n=2)
    seen: list[int] = []
    original = reranker.engine.rerank

    def spy(*args, **kwargs):
        seen.append(threading.get_ident())
        return original(*args, **kwargs)

    reranker.engine.rerank = spy  # type: ignore[method-assign]
    try:
        out = await reranker.apostprocess_nodes(_nodes(TEXTS), query_str=QUERY)
    finally:
        del reranker.engine.rerank
    assert len(out) == 2 and seen and threading.get_ident() not in seen


def test_serialisation_and_copies():
    import copy

    reranker = RyzenAIRerank(model=str(XLMR), top_n=2)
    assert reranker.class_name() == "RyzenAIRerank" and copy.deepcopy(reranker).engine is reranker.engine
    again = RyzenAIRerank.from_dict(reranker.to_dict())
    assert again.engine is reranker.engine and again.top_n == 2
    nodes = _nodes(TEXTS)
    assert [n.node.node_id for n in again.postprocess_nodes(nodes, query_str=QUERY)] == [
        n.node.node_id for n in reranker.postprocess_nodes(nodes, query_str=QUERY)
    ]


def test_instrumentation_sees_rerank_start_and_end_events(llamaindex_events):
    from llama_index.core.instrumentation.events.rerank import ReRankEndEvent, ReRankStartEvent

    out = RyzenAIRerank(model=str(BERT), top_n=2).postprocess_nodes(_nodes(TEXTS), query_str=QUERY)
    (start,) = [e for e in llamaindex_events if isinstance(e, ReRankStartEvent)]
    (end,) = [e for e in llamaindex_events if isinstance(e, ReRankEndEvent)]
    assert (start.top_n, start.model_name, len(start.nodes), start.query.query_str) == (2, str(BERT), len(TEXTS), QUERY)
    assert end.nodes == out
