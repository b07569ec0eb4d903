"""Images through both faces on the tiny Gemma 3 multimodal fixture (real OGA)."""

from __future__ import annotations

import asyncio
import base64
import io
from pathlib import Path

import pytest
from PIL import Image

from conftest import MODELS, TINY_GEMMA3
from ryzenai_core import ChatMessage, Engine, InvalidRequestError
from ryzenai_core.options import validated_options

VISION = MODELS / "tiny-gemma3-vision"
QUESTION = "What is in the picture?"


def png(color: str) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (64, 48), color).save(out, format="PNG")
    return out.getvalue()


def b64(color: str) -> str:
    return base64.b64encode(png(color)).decode()


def core_answer(color: str) -> str:
    engine = Engine.get(VISION)
    messages = [ChatMessage("user", [{"type": "image", "image": png(color)}, {"type": "text", "text": QUESTION}])]
    return engine.generate(messages, validated_options(max_new_tokens=8, temperature=0)).text


# ---------------------------------------------------------------- LangChain
def lc_blocks(color: str) -> list[dict]:
    return [
        {"type": "image", "base64": b64(color), "mime_type": "image/png"},  # v1 standard block
        {"type": "image", "source_type": "base64", "data": b64(color), "mime_type": "image/png"},  # older form
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{b64(color)}"}},  # OpenAI's form
        {"type": "image_url", "image_url": f"data:image/png;base64,{b64(color)}"},
    ]


@pytest.mark.parametrize("form", range(4))
def test_langchain_image_blocks_in_every_form(form: int) -> None:
    from langchain_core.messages import HumanMessage

    from langchain_ryzenai import ChatRyzenAI

    llm = ChatRyzenAI(model=str(VISION), temperature=0, max_tokens=8)
    answers = {}
    for color in ("red", "blue"):
        message = HumanMessage(content=[lc_blocks(color)[form], {"type": "text", "text": QUESTION}])
        answer = llm.invoke([message])
        assert answer.usage_metadata["input_tokens"] == llm.get_num_tokens_from_messages([message])
        answers[color] = answer.content
    assert answers == {"red": core_answer("red"), "blue": core_answer("blue")}
    assert answers["red"] != answers["blue"]


def test_langchain_stream_and_async_with_an_image() -> None:
    from langchain_core.messages import HumanMessage

    from langchain_ryzenai import ChatRyzenAI

    llm = ChatRyzenAI(model=str(VISION), temperature=0, max_tokens=8)
    message = HumanMessage(content=[lc_blocks("red")[0], {"type": "text", "text": QUESTION}])
    streamed = "".join(str(c.content) for c in llm.stream([message]))
    awaited = asyncio.run(llm.ainvoke([message])).content
    assert streamed == awaited == core_answer("red")


@pytest.mark.parametrize(
    ("block", "fragment"),
    [
        ({"type": "image", "url": "https://example.com/cat.png"}, "does not fetch from the network"),
        ({"type": "image", "file_id": "file-123"}, "file id"),
        ({"type": "image", "base64": "not base64!!", "mime_type": "image/png"}, "base64 data that is not valid"),
    ],
)
def test_langchain_bad_image_blocks_are_typed_errors(block: dict, fragment: str) -> None:
    from langchain_core.messages import HumanMessage

    from langchain_ryzenai import ChatRyzenAI

    llm = ChatRyzenAI(model=str(VISION), temperature=0, max_tokens=4)
    with pytest.raises(InvalidRequestError, match=fragment):
        llm.invoke([HumanMessage(content=[block, {"type": "text", "text": QUESTION}])])


def test_langchain_image_to_a_text_package_is_refused() -> None:
    from langchain_core.messages import HumanMessage

    from langchain_ryzenai import ChatRyzenAI

    llm = ChatRyzenAI(model=str(TINY_GEMMA3), max_tokens=4)
    with pytest.raises(InvalidRequestError, match="has no vision model"):
        llm.invoke([HumanMessage(content=[lc_blocks("red")[0], {"type": "text", "text": QUESTION}])])


# ---------------------------------------------------------------- LlamaIndex
def li_blocks(color: str, tmp_path: Path) -> list:
    from llama_index.core.base.llms.types import ImageBlock

    path = tmp_path / f"{color}.png"
    path.write_bytes(png(color))
    return [
        ImageBlock(image=png(color)),
        ImageBlock(path=path),
        ImageBlock(url=f"data:image/png;base64,{b64(color)}"),
        ImageBlock(url=path.as_uri()),
    ]


@pytest.mark.slow
def test_llamaindex_image_blocks_sync_async_and_streaming(tmp_path: Path, llamaindex_event_loop) -> None:
    from llama_index.core.base.llms.types import ChatMessage as LIMessage
    from llama_index.core.base.llms.types import TextBlock

    from llamaindex_ryzenai import RyzenAILLM

    llm = RyzenAILLM(model=str(VISION), temperature=0, max_new_tokens=8)
    for color in ("red", "blue"):
        expected = core_answer(color)
        for block in li_blocks(color, tmp_path):
            message = LIMessage(role="user", blocks=[block, TextBlock(text=QUESTION)])
            assert llm.chat([message]).message.content == expected
        message = LIMessage(role="user", blocks=[li_blocks(color, tmp_path)[0], TextBlock(text=QUESTION)])
        assert list(llm.stream_chat([message]))[-1].message.content == expected

        async def both(message=message):
            chat = await llm.achat([message])
            contents = [r.message.content async for r in await llm.astream_chat([message])]
            return chat.message.content, contents[-1]

        assert llamaindex_event_loop.run_until_complete(both()) == (expected, expected)


def test_llamaindex_web_image_is_refused(llamaindex_event_loop) -> None:
    from llama_index.core.base.llms.types import ChatMessage as LIMessage
    from llama_index.core.base.llms.types import ImageBlock, TextBlock

    from llamaindex_ryzenai import RyzenAILLM

    llm = RyzenAILLM(model=str(VISION), max_new_tokens=4)
    message = LIMessage(role="user", blocks=[ImageBlock(url="https://example.com/a.png"), TextBlock(text=QUESTION)])
    with pytest.raises(InvalidRequestError, match="does not fetch from the network"):
        llm.chat([message])


@pytest.mark.slow
def test_both_faces_never_generate_image_markers(marker_eager_vision, llamaindex_event_loop) -> None:
    """A model that prefers its image placeholder token answers through both faces (no runtime failure)."""
    from langchain_core.messages import HumanMessage
    from llama_index.core.base.llms.types import ChatMessage as LIMessage
    from llama_index.core.base.llms.types import ImageBlock, TextBlock

    from langchain_ryzenai import ChatRyzenAI
    from llamaindex_ryzenai import RyzenAILLM

    folder, _ = marker_eager_vision
    expected = Engine.get(folder).generate(
        [ChatMessage("user", [{"type": "image", "image": png("red")}, {"type": "text", "text": QUESTION}])],
        validated_options(max_new_tokens=8, temperature=0),
    )
    assert expected.finish_reason == "length" and expected.text
    chat = ChatRyzenAI(model=str(folder), temperature=0, max_tokens=8)
    message = HumanMessage(content=[lc_blocks("red")[0], {"type": "text", "text": QUESTION}])
    assert "".join(str(c.content) for c in chat.stream([message])) == expected.text
    llm = RyzenAILLM(model=str(folder), temperature=0, max_new_tokens=8)
    li = LIMessage(role="user", blocks=[ImageBlock(image=png("red")), TextBlock(text=QUESTION)])
    assert llm.chat([li]).message.content == expected.text


def test_consecutive_messages_of_one_role_are_merged_for_alternating_templates() -> None:
    engine = Engine.get(VISION)
    doubled = [
        ChatMessage("system", "a"),
        ChatMessage("system", "b"),
        ChatMessage("user", "c"),
        ChatMessage("user", "d"),
    ]
    merged = [ChatMessage("system", "a\n\nb"), ChatMessage("user", "c\n\nd")]
    assert engine.render(doubled) == engine.render(merged)
