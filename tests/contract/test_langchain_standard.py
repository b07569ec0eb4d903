"""langchain-tests' standard suites for ChatRyzenAI, on the tiny Qwen3 fixture (real OGA, random weights).

The weights are random, so the model never understands a prompt. Tool calls and structured
output still work where the call constrains the output (tool_choice="any", a tool name,
with_structured_output): the grammar forces the format. The tests that additionally need
the model to *understand* the prompt (an argument must be 3, a string must contain given
words, an agent must decide by itself to call a tool, JSON mode must pick the keys the
prompt names) are xfailed, strictly, with that reason. Nothing is xfailed for another cause.
"""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage
from langchain_tests.integration_tests import ChatModelIntegrationTests
from langchain_tests.unit_tests import ChatModelUnitTests
from syrupy.assertion import SnapshotAssertion

from conftest import ROOT, TINY_LLAMA, TINY_QWEN3
from langchain_ryzenai import ChatRyzenAI

NEEDS_UNDERSTANDING = "random-weight fixture model: needs a model that understands its prompt"
REPOSITORY = str(ROOT)


def _relative_to_repository(*, data: Any, path: Any) -> Any:
    if isinstance(data, str) and data.startswith(REPOSITORY):
        return "<repository>" + data[len(REPOSITORY) :]
    return data


class TestChatRyzenAIUnit(ChatModelUnitTests):
    @property
    def chat_model_class(self) -> type[ChatRyzenAI]:
        return ChatRyzenAI

    @property
    def chat_model_params(self) -> dict[str, Any]:
        return {"model": str(TINY_QWEN3)}  # unit tests never load the model

    @pytest.fixture
    def snapshot(self, snapshot: SnapshotAssertion) -> SnapshotAssertion:
        """test_serdes' snapshot with the model folder relative to the repository: the same on every checkout."""
        return snapshot.with_defaults(matcher=_relative_to_repository)

    @pytest.mark.xfail(
        raises=ValueError,
        reason="langchain-core's load(allowed_objects='all') admits only the classes in its own serialization "
        "mapping, so it refuses every partner class outside it (\"Deserialization of ('langchain_ryzenai', "
        "'ChatRyzenAI') is not allowed\"); the serialized form matches the snapshot, and test_serialization.py "
        "round-trips it with allowed_objects=[ChatRyzenAI]",
    )
    def test_serdes(self, model: BaseChatModel, snapshot: SnapshotAssertion) -> None:
        super().test_serdes(model, snapshot)


class TestChatRyzenAIIntegration(ChatModelIntegrationTests):
    @property
    def chat_model_class(self) -> type[ChatRyzenAI]:
        return ChatRyzenAI

    @property
    def chat_model_params(self) -> dict[str, Any]:
        return {"model": str(TINY_QWEN3), "temperature": 0, "max_tokens": 64}

    @property
    def has_tool_calling(self) -> bool:
        return True

    @property
    def has_tool_choice(self) -> bool:
        return True  # "any" and a tool name force a call through a grammar in the family's format

    @property
    def has_structured_output(self) -> bool:
        return True

    @property
    def supports_json_mode(self) -> bool:
        return True  # a grammar-constrained flat JSON object

    @property
    def returns_usage_metadata(self) -> bool:
        return True

    @property
    def supports_image_inputs(self) -> bool:
        return False  # Qwen3 has no vision model (see TestChatRyzenAIVisionIntegration)

    @property
    def supports_anthropic_inputs(self) -> bool:
        return True  # text, thinking and tool_use blocks of assistant turns are converted

    @property
    def supported_usage_metadata_details(self) -> dict[str, list[Any]]:
        return {"invoke": ["cache_read_input"], "stream": ["cache_read_input"]}

    @property
    def supports_model_override(self) -> bool:
        return True

    @property
    def model_override_value(self) -> str:
        return str(TINY_LLAMA)  # a package folder: response_metadata["model_name"] is the path given

    def invoke_with_cache_read_input(self, *, stream: bool = False) -> AIMessage:
        """A second call on a shared prompt prefix reads the prefix's KV cache (prefix reuse)."""
        llm = ChatRyzenAI(**self.chat_model_params, kv_reuse=True)
        history = "The NPU runs fixed shapes; prompts are padded to buckets. " * 20
        llm.invoke([("system", history), ("human", "first question")])
        second = [("system", history), ("human", "second question")]
        if not stream:
            msg = llm.invoke(second)
        else:
            full = None
            for chunk in llm.stream(second):
                full = chunk if full is None else full + chunk
            msg = full
        assert isinstance(msg, AIMessage)
        assert msg.usage_metadata is not None
        assert msg.usage_metadata["input_token_details"]["cache_read"] > 0
        return msg

    # ---- tests that need a model that understands its prompt
    @pytest.mark.xfail(reason=f"{NEEDS_UNDERSTANDING}: the forced call's argument must be 3, read from the question")
    @pytest.mark.parametrize("model", [{}, {"output_version": "v1"}], indirect=True)
    def test_tool_calling(self, model: BaseChatModel) -> None:
        super().test_tool_calling(model)

    @pytest.mark.xfail(reason=f"{NEEDS_UNDERSTANDING}: the forced call's argument must be 3, read from the question")
    async def test_tool_calling_async(self, model: BaseChatModel) -> None:
        await super().test_tool_calling_async(model)

    @pytest.mark.xfail(
        reason=f"{NEEDS_UNDERSTANDING}: JSON mode constrains the output to a JSON object, the prompt must make the "
        "model choose the keys 'setup' and 'punchline'"
    )
    def test_json_mode(self, model: BaseChatModel) -> None:
        super().test_json_mode(model)

    @pytest.mark.xfail(
        reason=f"{NEEDS_UNDERSTANDING}: with tool_choice=None the model must decide by itself to call the tool"
    )
    @pytest.mark.parametrize("model", [{}, {"output_version": "v1"}], indirect=True)
    def test_agent_loop(self, model: BaseChatModel) -> None:
        super().test_agent_loop(model)

    @pytest.mark.xfail(
        reason=f"{NEEDS_UNDERSTANDING}: the forced call's customer_name must contain the Chinese/Japanese words "
        "of the request"
    )
    def test_unicode_tool_call_integration(
        self, model: BaseChatModel, *, tool_choice: str | None = None, force_tool_call: bool = True
    ) -> None:
        super().test_unicode_tool_call_integration(model, tool_choice=tool_choice, force_tool_call=force_tool_call)


# ---------------------------------------------------------------- a vision package
VISION = TINY_QWEN3.parent / "tiny-gemma3-vision"


def _local_test_image(monkeypatch: pytest.MonkeyPatch) -> None:
    """Serve the image the suite downloads from GitHub from a local file: this machine has no network.

    The test itself, its messages and its parameters are unchanged; only where the bytes
    come from differs.
    """
    import io

    import httpx
    from PIL import Image

    real_get = httpx.get

    def get(url: str, *args: Any, **kwargs: Any) -> Any:
        if "raw.githubusercontent.com" not in str(url):
            return real_get(url, *args, **kwargs)
        out = io.BytesIO()
        Image.new("RGB", (320, 200), (30, 120, 200)).save(out, format="PNG")
        return httpx.Response(200, content=out.getvalue(), request=httpx.Request("GET", str(url)))

    monkeypatch.setattr(httpx, "get", get)


class TestChatRyzenAIVisionIntegration(ChatModelIntegrationTests):
    """The standard suite on the tiny Gemma 3 multimodal fixture: text and image input."""

    @property
    def chat_model_class(self) -> type[ChatRyzenAI]:
        return ChatRyzenAI

    @property
    def chat_model_params(self) -> dict[str, Any]:
        return {"model": str(VISION), "temperature": 0, "max_tokens": 64}

    @property
    def has_tool_calling(self) -> bool:
        return False  # Gemma 3's chat template has no tool format

    @property
    def has_structured_output(self) -> bool:
        return True  # grammar-constrained JSON schema, for any family

    @property
    def supports_json_mode(self) -> bool:
        return True

    @property
    def returns_usage_metadata(self) -> bool:
        return True

    @property
    def supports_image_inputs(self) -> bool:
        return True  # base64 in OpenAI's image_url form and LangChain's standard image block

    @property
    def supports_image_urls(self) -> bool:
        return False  # web addresses are refused: the engine does not fetch from the network

    @property
    def supports_image_tool_message(self) -> bool:
        return False  # Gemma 3's template renders no tool role

    @property
    def model_override_value(self) -> str:
        return str(VISION)

    @pytest.fixture(autouse=True)
    def _offline_test_image(self, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
        if request.node.name.startswith("test_image"):
            _local_test_image(monkeypatch)

    @pytest.mark.xfail(
        reason=f"{NEEDS_UNDERSTANDING}: JSON mode constrains the output to a JSON object, the prompt must make the "
        "model choose the keys 'setup' and 'punchline'"
    )
    def test_json_mode(self, model: BaseChatModel) -> None:
        super().test_json_mode(model)
