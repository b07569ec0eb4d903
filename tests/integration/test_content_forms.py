"""Message content of both faces as the runtime receives it: text and images in the user's order.

The checks read what reaches onnxruntime-genai's multimodal processor (the prompt text and the
images, in order), so they hold whatever a random-weight model answers.
"""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime_genai as og
import pytest
from PIL import Image

from conftest import MODELS
from ryzenai_core import ChatMessage, Engine, InvalidRequestError
from ryzenai_core.generation.session import Session
from ryzenai_core.options import validated_options
from ryzenai_core.prompt.sources import builtin_template
from ryzenai_core.prompt.templates import ChatTemplate

VISION = MODELS / "tiny-gemma3-vision"
COLOURS = {"red": (255, 0, 0), "blue": (0, 0, 255), "green": (0, 128, 0)}
#: text, image, text, image, text, as Gemma 3's template renders it.
INTERLEAVED = (
    "<bos><start_of_turn>user\nFirst picture:<start_of_image>Second picture:<start_of_image>"
    "Which one is red?<end_of_turn>\n<start_of_turn>model\n"
)


def png(colour: str, size: tuple[int, int] = (64, 48)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, colour).save(out, format="PNG")
    return out.getvalue()


def b64(colour: str) -> str:
    return base64.b64encode(png(colour)).decode()


def colour_name(data: bytes) -> str:
    with Image.open(io.BytesIO(data)) as im:
        pixel = im.convert("RGB").getpixel((0, 0))
    return next(name for name, rgb in COLOURS.items() if rgb == pixel)


class Runtime:
    """What reached the runtime's multimodal processor: each call's prompt and its images' bytes."""

    def __init__(self) -> None:
        self.received: list[tuple[str, list[bytes]]] = []
        self._opened: list[bytes] = []

    @property
    def calls(self) -> list[tuple[str, list[str]]]:
        """Each call's prompt and the colours of its images, in order."""
        return [(prompt, [colour_name(d) for d in data]) for prompt, data in self.received]

    def open_bytes(self, original: Any) -> Any:
        def spy(*data: bytes) -> Any:
            self._opened = list(data)
            return original(*data)

        return staticmethod(spy)

    def processor(self, original: Any) -> Any:
        runtime = self

        class Spy:
            def __init__(self, real: Any) -> None:
                self.real = real

            def __call__(self, prompt: str, images: Any = None) -> Any:
                runtime.received.append((prompt, runtime._opened))
                return self.real(prompt, images=images)

        def wrapped(session: Session) -> Any:
            return Spy(original(session))

        return wrapped


@pytest.fixture
def runtime(monkeypatch: pytest.MonkeyPatch) -> Runtime:
    spy = Runtime()
    monkeypatch.setattr(og.Images, "open_bytes", spy.open_bytes(og.Images.open_bytes))
    # Session's private _processor makes the runtime's processor: the one place to see what reaches it
    monkeypatch.setattr(Session, "_processor", spy.processor(Session._processor))
    return spy


def lc_image(form: str, colour: str, tmp_path: Path) -> dict[str, Any]:
    """One image in each content-block form LangChain users write."""
    path = tmp_path / f"{colour}.png"
    path.write_bytes(png(colour))
    url = f"data:image/png;base64,{b64(colour)}"
    return {
        "image_url-dict": {"type": "image_url", "image_url": {"url": url}},
        "image_url-str": {"type": "image_url", "image_url": url},
        "image_url-detail": {"type": "image_url", "image_url": {"url": url, "detail": "high"}},
        "v1-base64": {"type": "image", "base64": b64(colour), "mime_type": "image/png"},
        "v1-url": {"type": "image", "url": url},
        "v1-file-url": {"type": "image", "url": path.as_uri(), "mime_type": "image/png"},
        "v0-base64": {"type": "image", "source_type": "base64", "data": b64(colour), "mime_type": "image/png"},
        "v0-url": {"type": "image", "source_type": "url", "url": url},
        "anthropic-base64": {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/png", "data": b64(colour)},
        },
        "anthropic-url": {"type": "image", "source": {"type": "url", "url": url}},
    }[form]


LC_FORMS = [
    "image_url-dict",
    "image_url-str",
    "image_url-detail",
    "v1-base64",
    "v1-url",
    "v1-file-url",
    "v0-base64",
    "v0-url",
    "anthropic-base64",
    "anthropic-url",
]


def lc_interleaved(form: str, tmp_path: Path) -> Any:
    from langchain_core.messages import HumanMessage

    return HumanMessage(
        content=[
            {"type": "text", "text": "First picture:"},
            lc_image(form, "red", tmp_path),
            {"type": "text", "text": "Second picture:"},
            lc_image(form, "blue", tmp_path),
            {"type": "text", "text": "Which one is red?"},
        ]
    )


def li_interleaved() -> Any:
    from llama_index.core.base.llms.types import ChatMessage, ImageBlock, TextBlock

    return ChatMessage(
        role="user",
        blocks=[
            TextBlock(text="First picture:"),
            ImageBlock(image=png("red")),
            TextBlock(text="Second picture:"),
            ImageBlock(image=png("blue")),
            TextBlock(text="Which one is red?"),
        ],
    )


@pytest.mark.parametrize("form", LC_FORMS)
def test_langchain_keeps_the_order_of_text_and_images_in_every_form(
    form: str, runtime: Runtime, tmp_path: Path
) -> None:
    from langchain_ryzenai import ChatRyzenAI

    llm = ChatRyzenAI(model=str(VISION), temperature=0, max_tokens=1, execution="inline")
    llm.invoke([lc_interleaved(form, tmp_path)])
    assert runtime.calls == [(INTERLEAVED, ["red", "blue"])]


def test_both_faces_send_the_runtime_the_same_prompt_and_images(
    runtime: Runtime, tmp_path: Path, llamaindex_event_loop
) -> None:
    from langchain_ryzenai import ChatRyzenAI
    from llamaindex_ryzenai import RyzenAILLM

    lc = ChatRyzenAI(model=str(VISION), temperature=0, max_tokens=4, execution="inline")
    li = RyzenAILLM(model=str(VISION), temperature=0, max_new_tokens=4, execution="inline")
    lc_answer = lc.invoke([lc_interleaved("v1-base64", tmp_path)]).content
    li_answer = li.chat([li_interleaved()]).message.content
    assert runtime.calls[0] == runtime.calls[1] == (INTERLEAVED, ["red", "blue"])
    assert lc_answer == li_answer


# ---------------------------------------------------------------- images larger than the model's input
def noise(size: tuple[int, int]) -> bytes:
    pixels = np.random.default_rng(sum(size)).integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="PNG", compress_level=1)
    return out.getvalue()


@pytest.mark.parametrize("size", [(1400, 1000), (2000, 300)])
def test_a_large_image_reaches_the_runtime_at_the_input_size_with_the_pixels_it_would_compute(
    size: tuple[int, int], runtime: Runtime
) -> None:
    """Scaled down on the host with the runtime's own resampling: the pixel values are the same."""
    engine = Engine.get(VISION, execution="inline")
    data = noise(size)
    message = ChatMessage("user", [{"type": "image", "image": data}, {"type": "text", "text": "?"}])
    out = engine.generate([message], validated_options(max_new_tokens=4, temperature=0))
    ((prompt, (sent,)),) = runtime.received
    with Image.open(io.BytesIO(sent)) as im:
        assert im.size == (min(size[0], 896), min(size[1], 896))
    processor = og.Model(str(VISION)).create_multimodal_processor()

    def pixels(image: bytes) -> np.ndarray:
        return processor(prompt, images=og.Images.open_bytes(image))["pixel_values"].as_numpy().copy()

    assert np.array_equal(pixels(sent), pixels(data))
    assert out.usage.prompt_tokens == engine.count_tokens(
        [ChatMessage("user", [{"type": "image", "image": sent}, {"type": "text", "text": "?"}])]
    )


# ---------------------------------------------------------------- images in a system message
SYSTEM_IMAGE = (
    r"message #0 \(system\) has an image, and the chat template of tiny-gemma3-vision \(gemma3\) renders no "
    r"images in a system message; put the image in the first user message"
)
# Gemma 3's template with a system message's parts rendered in order (its own keeps the first text only).
SYSTEM_PARTS_TEMPLATE = builtin_template("gemma-3-it.jinja").replace(
    "{%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}",
    "{%- set ns = namespace(prefix='') -%}"
    "{%- for item in messages[0]['content'] -%}"
    "{%- if item['type'] == 'image' -%}{%- set ns.prefix = ns.prefix + '<start_of_image>' -%}"
    "{%- else -%}{%- set ns.prefix = ns.prefix + item['text'] | trim -%}{%- endif -%}"
    "{%- endfor -%}"
    "{%- set first_user_prefix = ns.prefix + '\n\n' -%}",
)


def lc_system(image_first: bool) -> list[Any]:
    from langchain_core.messages import HumanMessage, SystemMessage

    parts = [
        {"type": "text", "text": "Compare with:"},
        {"type": "image", "base64": b64("red"), "mime_type": "image/png"},
    ]
    return [SystemMessage(content=parts[::-1] if image_first else parts), HumanMessage(content="What colour?")]


def li_system(image_first: bool) -> list[Any]:
    from llama_index.core.base.llms.types import ChatMessage as LIMessage
    from llama_index.core.base.llms.types import ImageBlock, TextBlock

    blocks = [TextBlock(text="Compare with:"), ImageBlock(image=png("red"))]
    return [
        LIMessage(role="system", blocks=blocks[::-1] if image_first else blocks),
        LIMessage(role="user", content="What colour?"),
    ]


@pytest.mark.parametrize("image_first", [False, True], ids=["text-image", "image-text"])
def test_an_image_in_a_system_message_is_refused_alike_by_both_faces(
    image_first: bool, runtime: Runtime, llamaindex_event_loop
) -> None:
    from langchain_ryzenai import ChatRyzenAI
    from llamaindex_ryzenai import RyzenAILLM

    lc = ChatRyzenAI(model=str(VISION), max_tokens=4, execution="inline")
    li = RyzenAILLM(model=str(VISION), max_new_tokens=4, execution="inline")
    with pytest.raises(InvalidRequestError, match=SYSTEM_IMAGE):
        lc.invoke(lc_system(image_first))
    with pytest.raises(InvalidRequestError, match=SYSTEM_IMAGE):
        li.chat(li_system(image_first))
    with pytest.raises(InvalidRequestError, match=SYSTEM_IMAGE):
        lc.get_num_tokens_from_messages(lc_system(image_first))
    assert runtime.received == []


def test_a_template_that_renders_system_images_gets_them_in_place(runtime: Runtime, llamaindex_event_loop) -> None:
    from langchain_ryzenai import ChatRyzenAI
    from llamaindex_ryzenai import RyzenAILLM

    assert ChatTemplate(SYSTEM_PARTS_TEMPLATE).renders_images("system")
    lc = ChatRyzenAI(model=str(VISION), max_tokens=4, execution="inline", chat_template=SYSTEM_PARTS_TEMPLATE)
    li = RyzenAILLM(model=str(VISION), max_new_tokens=4, execution="inline", chat_template=SYSTEM_PARTS_TEMPLATE)
    lc.invoke(lc_system(False))
    li.chat(li_system(False))
    expected = (
        "<bos><start_of_turn>user\nCompare with:<start_of_image>\n\nWhat colour?<end_of_turn>\n<start_of_turn>model\n"
    )
    assert runtime.calls == [(expected, ["red"])] * 2


def test_which_templates_render_images_in_which_messages() -> None:
    gemma = ChatTemplate(builtin_template("gemma-3-it.jinja"))
    assert gemma.renders_images("user") and gemma.renders_images("assistant")
    assert not gemma.renders_images("system")
    for name in ("chatml.jinja", "qwen3.jinja", "llama-3.2-instruct.jinja"):
        for role in ("system", "user", "assistant"):
            assert not ChatTemplate(builtin_template(name)).renders_images(role), (name, role)


def test_a_template_without_images_is_refused_before_the_runtime(runtime: Runtime, tmp_path: Path) -> None:
    from langchain_core.messages import HumanMessage

    from langchain_ryzenai import ChatRyzenAI

    llm = ChatRyzenAI(
        model=str(VISION), max_tokens=2, execution="inline", chat_template=builtin_template("chatml.jinja")
    )
    with pytest.raises(
        InvalidRequestError,
        match=r"message #0 \(user\) has an image, and the chat template of "
        r"tiny-gemma3-vision \(chatml\) renders no images in a user message; use the package's own",
    ):
        llm.invoke([HumanMessage(content=[lc_image("v1-base64", "red", tmp_path), {"type": "text", "text": "?"}])])
    assert runtime.received == []


# ---------------------------------------------------------------- more forms, long chats
def test_openai_responses_and_google_image_blocks(runtime: Runtime, tmp_path: Path) -> None:
    from langchain_core.messages import HumanMessage

    from langchain_ryzenai import ChatRyzenAI

    llm = ChatRyzenAI(model=str(VISION), temperature=0, max_tokens=1, execution="inline")
    responses = [
        {"type": "input_text", "text": "First picture:"},
        {"type": "input_image", "image_url": f"data:image/png;base64,{b64('red')}"},
        {"type": "input_text", "text": "Second picture:"},
        {"type": "input_image", "image_url": f"data:image/png;base64,{b64('blue')}", "detail": "auto"},
        {"type": "input_text", "text": "Which one is red?"},
    ]
    google = [
        "First picture:",
        {"type": "media", "mime_type": "image/png", "data": png("red")},
        "Second picture:",
        {"type": "media", "mime_type": "image/png", "data": b64("blue")},
        "Which one is red?",
    ]
    for content in (responses, google):
        llm.invoke([HumanMessage(content=content)])
    assert runtime.calls == [(INTERLEAVED, ["red", "blue"])] * 2
    with pytest.raises(InvalidRequestError, match=r"file id \('file-1'\)"):
        llm.invoke([HumanMessage(content=[{"type": "input_image", "file_id": "file-1"}, "?"])])
    with pytest.raises(InvalidRequestError, match="not audio, video, files and documents"):
        llm.invoke([HumanMessage(content=[{"type": "media", "mime_type": "video/mp4", "data": b"x"}, "?"])])


def test_a_llamaindex_cache_point_is_skipped(runtime: Runtime) -> None:
    from llama_index.core.base.llms.types import CacheControl, CachePoint
    from llama_index.core.base.llms.types import ChatMessage as LIMessage

    from llamaindex_ryzenai import RyzenAILLM

    llm = RyzenAILLM(model=str(VISION), temperature=0, max_new_tokens=1, execution="inline")
    blocks = li_interleaved().blocks
    llm.chat([LIMessage(role="user", blocks=[CachePoint(cache_control=CacheControl(type="ephemeral")), *blocks])])
    assert runtime.calls == [(INTERLEAVED, ["red", "blue"])]


def test_a_long_vision_chat_drops_whole_exchanges_and_their_images(copy_package, llamaindex_event_loop) -> None:
    """Over the limit with drop_oldest, the oldest question goes with its answer: Gemma 3's template
    needs the turns to alternate, and the dropped turns' images do not reach the runtime."""
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
    from llama_index.core.base.llms.types import ChatMessage as LIMessage
    from llama_index.core.base.llms.types import ImageBlock, TextBlock

    from langchain_ryzenai import ChatRyzenAI
    from langchain_ryzenai._convert import to_core_messages as lc_to_core
    from llamaindex_ryzenai import RyzenAILLM

    folder = copy_package(VISION, "small-vision")
    config = json.loads((folder / "genai_config.json").read_text())
    config["search"]["max_length"] = 700
    (folder / "genai_config.json").write_text(json.dumps(config))
    colours = ["red", "blue", "green", "red"]
    lc_history: list[Any] = [SystemMessage(content="Be brief.")]
    li_history = [LIMessage(role="system", content="Be brief.")]
    for n, colour in enumerate(colours):
        lc_history.append(
            HumanMessage(content=[{"type": "text", "text": f"Picture {n}:"}, lc_image("v1-base64", colour, folder)])
        )
        li_history.append(
            LIMessage(role="user", blocks=[TextBlock(text=f"Picture {n}:"), ImageBlock(image=png(colour))])
        )
        if n < len(colours) - 1:
            lc_history.append(AIMessage(content=f"Colour {n}."))
            li_history.append(LIMessage(role="assistant", content=f"Colour {n}."))
    lc = ChatRyzenAI(model=str(folder), temperature=0, max_tokens=4, execution="inline", overflow="drop_oldest")
    li = RyzenAILLM(model=str(folder), temperature=0, max_new_tokens=4, execution="inline", overflow="drop_oldest")
    lc_answer = lc.invoke(lc_history)
    li_answer = li.chat(li_history)
    dropped = lc_answer.response_metadata["dropped_messages"]
    assert dropped == li_answer.additional_kwargs["dropped_messages"] == 4  # two exchanges, with their two images
    kept = [lc_history[0], *lc_history[1 + dropped :]]
    assert lc_answer.usage_metadata["input_tokens"] == lc.get_num_tokens_from_messages(kept) <= 700
    assert li_answer.additional_kwargs["prompt_tokens"] == lc_answer.usage_metadata["input_tokens"]
    assert lc_answer.content == li_answer.message.content
    prompt = Engine.get(folder, execution="inline").render(lc_to_core(kept))
    assert prompt.startswith("<bos><start_of_turn>user\nBe brief.\n\nPicture 2:<start_of_image><end_of_turn>")
    assert prompt.count("<start_of_image>") == 2
