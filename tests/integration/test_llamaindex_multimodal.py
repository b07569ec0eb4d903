"""LlamaIndex multimodal queries over ImageDocuments on the tiny Gemma 3 vision fixture (real OGA).

The image embedding model is test scaffolding: mean colour for images and colour words plus a
hashed bag of words for text, in one space, so "red" retrieves the red image.
"""

from __future__ import annotations

import base64
import hashlib
import inspect
import io
import math
from pathlib import Path
from typing import Any

import pytest
from PIL import Image, ImageStat

from conftest import MODELS
from ryzenai_core import Engine, InvalidRequestError
from ryzenai_core.options import validated_options

pytest.importorskip("llama_index.core")

from llama_index.core.base.llms.types import ChatMessage, ImageBlock, TextBlock  # noqa: E402
from llama_index.core.embeddings import MultiModalEmbedding  # noqa: E402
from llama_index.core.indices.multi_modal import MultiModalVectorStoreIndex  # noqa: E402
from llama_index.core.instrumentation import get_dispatcher  # type: ignore[attr-defined]  # noqa: E402
from llama_index.core.instrumentation.event_handlers import BaseEventHandler  # noqa: E402
from llama_index.core.instrumentation.events.llm import LLMChatEndEvent, LLMChatStartEvent  # noqa: E402
from llama_index.core.query_engine import RetrieverQueryEngine  # noqa: E402
from llama_index.core.schema import Document, ImageDocument, ImageNode, TextNode  # noqa: E402

from llamaindex_ryzenai import RyzenAILLM  # noqa: E402
from llamaindex_ryzenai._convert import to_core_messages  # noqa: E402

VISION = MODELS / "tiny-gemma3-vision"
QUERY = "Which is the red square?"
DIM = 32
COLOURS = {"red": 0, "green": 1, "blue": 2}
HAS_MULTIMODAL_SYNTHESIS = "multimodal" in inspect.signature(RetrieverQueryEngine.from_args).parameters


def unit(v: list[float]) -> list[float]:
    norm = math.sqrt(sum(x * x for x in v)) or 1.0
    return [x / norm for x in v]


class ColourEmbedding(MultiModalEmbedding):
    """Images: their mean colour; text: colour words on the same axes, other words hashed."""

    def _text(self, text: str) -> list[float]:
        v = [0.0] * DIM
        for word in text.lower().replace("?", " ").replace(".", " ").split():
            if word in COLOURS:
                v[COLOURS[word]] += 1.0
            else:
                v[3 + int(hashlib.sha1(word.encode()).hexdigest(), 16) % (DIM - 3)] += 0.1
        return unit(v)

    def _image(self, image: Any) -> list[float]:
        with Image.open(image) as im:
            return unit([*ImageStat.Stat(im.convert("RGB")).mean, *([0.0] * (DIM - 3))])

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._text(text)

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._text(query)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._text(query)

    def _get_image_embedding(self, img_file_path: Any) -> list[float]:
        return self._image(img_file_path)

    async def _aget_image_embedding(self, img_file_path: Any) -> list[float]:
        return self._image(img_file_path)


class ChatCalls(BaseEventHandler):
    """The messages and responses of every chat call (LlamaIndex instrumentation)."""

    calls: list[Any] = []

    @classmethod
    def class_name(cls) -> str:
        return "ChatCalls"

    def handle(self, event: Any, **kwargs: Any) -> None:
        if isinstance(event, (LLMChatStartEvent, LLMChatEndEvent)):
            self.calls.append(event)


@pytest.fixture
def chat_calls():
    handler = ChatCalls(calls=[])
    dispatcher = get_dispatcher()
    dispatcher.add_event_handler(handler)
    yield handler.calls
    dispatcher.event_handlers.remove(handler)


def png(colour: str) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (64, 48), colour).save(out, format="PNG")
    return out.getvalue()


def colour_of(block: ImageBlock) -> tuple[int, ...]:
    data = block.resolve_image(as_base64=False).read()
    with Image.open(io.BytesIO(data)) as im:
        return tuple(round(c) for c in ImageStat.Stat(im.convert("RGB")).mean)


def documents(tmp_path: Path) -> list[Document]:
    blue = tmp_path / "blue.png"
    blue.write_bytes(png("blue"))
    return [
        ImageDocument(image=base64.b64encode(png("red")).decode(), metadata={"name": "red square"}),
        ImageDocument(image_path=str(blue), metadata={"name": "blue square"}),
        Document(text="The red square is the warning sign."),
        Document(text="The blue square marks water."),
    ]


def index_of(tmp_path: Path) -> MultiModalVectorStoreIndex:
    embedding = ColourEmbedding()
    return MultiModalVectorStoreIndex.from_documents(
        documents(tmp_path), embed_model=embedding, image_embed_model=embedding
    )


def engine_answer(messages: list[ChatMessage]) -> str:
    options = validated_options(max_new_tokens=8, temperature=0)
    return Engine.get(VISION).generate(to_core_messages(messages), options).text


def check_call(llm: RyzenAILLM, calls: list[Any], answer: str) -> None:
    """One chat call: it carried the red image (256 image tokens in its usage) and its answer is the engine's."""
    starts = [c for c in calls if isinstance(c, LLMChatStartEvent)]
    ends = [c for c in calls if isinstance(c, LLMChatEndEvent)]
    assert len(starts) == len(ends) == 1
    messages = starts[0].messages
    images = [b for m in messages for b in m.blocks if isinstance(b, ImageBlock)]
    assert [colour_of(b) for b in images] == [(255, 0, 0)]
    usage = ends[0].response.additional_kwargs
    without = [
        m.model_copy(update={"blocks": [b for b in m.blocks if not isinstance(b, ImageBlock)]}) for m in messages
    ]
    image_tokens = llm.engine.package.image_tokens
    assert usage["prompt_tokens"] == llm.count_tokens(messages)
    assert image_tokens <= usage["prompt_tokens"] - llm.count_tokens(without) < image_tokens + 8
    assert answer == engine_answer(messages)


@pytest.mark.skipif(not HAS_MULTIMODAL_SYNTHESIS, reason="this llama-index-core has no multimodal synthesis")
def test_retriever_query_engine_multimodal_sends_the_retrieved_image(
    tmp_path: Path, chat_calls: list[Any], llamaindex_event_loop
) -> None:
    llm = RyzenAILLM(model=str(VISION), temperature=0, max_new_tokens=8)
    retriever = index_of(tmp_path).as_retriever(similarity_top_k=1, image_similarity_top_k=1)
    engine = RetrieverQueryEngine.from_args(retriever=retriever, llm=llm, multimodal=True)

    response = engine.query(QUERY)
    assert [type(n.node) for n in response.source_nodes] == [TextNode, ImageNode]
    assert response.source_nodes[1].node.metadata["name"] == "red square"
    check_call(llm, chat_calls, str(response))

    chat_calls.clear()
    awaited = llamaindex_event_loop.run_until_complete(engine.aquery(QUERY))
    check_call(llm, chat_calls, str(awaited))
    assert str(awaited) == str(response)


@pytest.mark.filterwarnings("ignore:Call to deprecated class SimpleMultiModalQueryEngine:DeprecationWarning")
def test_multimodal_index_query_engine_sends_the_retrieved_image(
    tmp_path: Path, chat_calls: list[Any], llamaindex_event_loop
) -> None:
    llm = RyzenAILLM(model=str(VISION), temperature=0, max_new_tokens=8)
    engine = index_of(tmp_path).as_query_engine(llm=llm, similarity_top_k=1, image_similarity_top_k=1)

    response = engine.query(QUERY)
    assert {n.node.metadata.get("name") for n in response.source_nodes if isinstance(n.node, ImageNode)} == {
        "red square"
    }
    check_call(llm, chat_calls, str(response))

    chat_calls.clear()
    awaited = llamaindex_event_loop.run_until_complete(engine.aquery(QUERY))
    check_call(llm, chat_calls, str(awaited))


@pytest.mark.filterwarnings("ignore:Call to deprecated class SimpleMultiModalQueryEngine:DeprecationWarning")
def test_a_web_image_document_is_refused(llamaindex_event_loop) -> None:
    llm = RyzenAILLM(model=str(VISION), temperature=0, max_new_tokens=8)
    embedding = ColourEmbedding()
    web = ImageNode(
        image_url="https://example.com/red.png",
        metadata={"name": "red square"},
        embedding=unit([1.0, 0.0, 0.0] + [0.0] * (DIM - 3)),  # embedded already: nothing fetches it
    )
    index = MultiModalVectorStoreIndex([web], embed_model=embedding, image_embed_model=embedding)
    engine = index.as_query_engine(llm=llm, similarity_top_k=1, image_similarity_top_k=1)
    with pytest.raises(InvalidRequestError, match="does not fetch from the network"):
        engine.query(QUERY)
    with pytest.raises(InvalidRequestError, match="does not fetch from the network"):
        llamaindex_event_loop.run_until_complete(engine.aquery(QUERY))


def test_complete_with_image_documents(tmp_path: Path, llamaindex_event_loop) -> None:
    llm = RyzenAILLM(model=str(VISION), temperature=0, max_new_tokens=8)
    path = tmp_path / "red.png"
    path.write_bytes(png("red"))
    question = "What is in the picture?"
    expected = engine_answer(
        [ChatMessage(role="user", blocks=[ImageBlock(image=png("red")), TextBlock(text=question)])]
    )
    forms = [
        ImageDocument(image=base64.b64encode(png("red")).decode()),
        ImageDocument(image_path=str(path)),
        ImageNode(image=base64.b64encode(png("red")).decode()),
        ImageNode(image_url=path.as_uri()),
        ImageBlock(image=png("red")),
    ]
    for form in forms:
        response = llm.complete(question, image_documents=[form])
        assert response.text == expected
        assert response.additional_kwargs["prompt_tokens"] > llm.engine.package.image_tokens
    streamed = list(llm.stream_complete(question, image_documents=forms[:1]))[-1].text

    async def both() -> tuple[str, str]:
        done = await llm.acomplete(question, image_documents=forms[:1])
        chunks = [r.text async for r in await llm.astream_complete(question, image_documents=forms[:1])]
        return done.text, chunks[-1]

    assert (streamed, *llamaindex_event_loop.run_until_complete(both())) == (expected, expected, expected)

    with pytest.raises(InvalidRequestError, match="does not fetch from the network"):
        llm.complete(question, image_documents=[ImageNode(image_url="https://example.com/red.png")])
    with pytest.raises(InvalidRequestError, match="not base64"):
        llm.complete(question, image_documents=[ImageNode(image="not base64!!")])
    with pytest.raises(InvalidRequestError, match="verbatim prompt"):
        llm.complete(question, formatted=True, image_documents=forms[:1])


def test_metadata_has_no_multimodal_field() -> None:
    """LLMMetadata has no field that says an LLM takes images; nothing claims one."""
    from llama_index.core.base.llms.types import LLMMetadata

    assert not [name for name in LLMMetadata.model_fields if "modal" in name or "image" in name or "vision" in name]
