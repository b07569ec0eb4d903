"""RyzenAILLM on the fake engine (tests/fake_engine.py): construction, metadata and the package tokenizer,
chat/complete in every form, events, prompt overrides, reasoning, message conversion, tools.

The fake engine prepares each request with the core's own code (template, tokenizer, budget) and
writes what its script says; what the face sent is in ``fake_model.requests``. What needs the
real runtime (cancellation, the event loop, agents, structured output under a grammar) is in
tests/integration/test_llamaindex_llm.py.
"""

from __future__ import annotations

import asyncio

import llama_index.core
import pytest
from llama_index.core import Settings
from llama_index.core.base.llms.types import (
    AudioBlock,
    ChatMessage,
    ChatResponse,
    MessageRole,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
)
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.instrumentation.events.llm import (
    LLMChatEndEvent,
    LLMChatInProgressEvent,
    LLMChatStartEvent,
    LLMCompletionEndEvent,
    LLMCompletionInProgressEvent,
    LLMCompletionStartEvent,
)
from llama_index.core.prompts import PromptTemplate
from llama_index.core.tools import FunctionTool
from pydantic import BaseModel, Field

from conftest import MODELS, REPLICAS, TINY_GEMMA3, TINY_LLAMA, TINY_QWEN3
from fake_engine import DEFAULT_WRITES
from llamaindex_ryzenai import BucketPackingPostprocessor, PackageTokenizer, RyzenAILLM
from llamaindex_ryzenai._convert import to_core_message, to_core_messages
from llamaindex_ryzenai._tokens import is_default_tokenizer, tokenizer_owner
from ryzenai_core import Engine, InvalidRequestError, ModelNotFoundError, ModelPackage
from ryzenai_core.package.capabilities import capabilities, read_capabilities

USER = [ChatMessage(role="system", content="You are terse."), ChatMessage(role="user", content="Name a colour.")]
EMPTY_TURN = [ChatMessage(role="system", content=""), ChatMessage(role="user", content="")]
# what the Qwen3 template adds around an empty system + user turn: 21 tokens of tiny-qwen3
SCAFFOLD = "<|im_start|>system\n<|im_end|>\n<|im_start|>user\n<|im_end|>\n<|im_start|>assistant\n"
THINK = "<think>\nstep one\n</think>\n\nfour"
#: A call of the tool named by ``%s`` with a=3, b=4, as each family writes it.
CALLS = {
    "qwen": '<tool_call>\n{"name": "%s", "arguments": {"a": 3, "b": 4}}\n</tool_call>',
    "llama": '{"name": "%s", "parameters": {"a": 3, "b": 4}}',
}


class Recorder(BaseEventHandler):
    """Collects LlamaIndex instrumentation events."""

    events: list = []

    @classmethod
    def class_name(cls) -> str:
        return "Recorder"

    def handle(self, event, **kwargs) -> None:
        self.events.append(event)

    def names(self) -> list[str]:
        return [type(e).__name__ for e in self.events]


pytestmark = pytest.mark.usefixtures("llamaindex_event_loop", "fake_model")


@pytest.fixture(autouse=True)
def _fresh_settings(monkeypatch):
    """Every test starts with LlamaIndex's default tokenizer."""
    monkeypatch.setattr(llama_index.core, "global_tokenizer", None)


@pytest.fixture
def recorder():
    dispatcher = get_dispatcher()
    handler = Recorder(events=[])
    dispatcher.add_event_handler(handler)
    yield handler
    dispatcher.event_handlers.remove(handler)


@pytest.fixture
def qwen():
    # these keep LlamaIndex's default tokenizer (the scaled context_window is under test)
    return RyzenAILLM(
        model=str(TINY_QWEN3), max_new_tokens=12, temperature=0, execution="process", use_package_tokenizer=False
    )


@pytest.fixture
def llama():
    return RyzenAILLM(
        model=str(TINY_LLAMA), max_new_tokens=12, temperature=0, execution="process", use_package_tokenizer=False
    )


def multiply(a: int, b: int) -> int:
    """Multiply two integers."""
    return a * b


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


TOOLS = [FunctionTool.from_defaults(multiply), FunctionTool.from_defaults(add)]


class Album(BaseModel):
    """A music album."""

    name: str = Field(description="the album's title")
    year: int = Field(description="release year")


PROMPT = PromptTemplate("Invent an album about {topic}.")


# ---------------------------------------------------------------------- construction, metadata and the package tokenizer
def test_construction_is_cheap_and_loads_nothing():
    before = Engine.registry.engines()
    for _ in range(20):
        RyzenAILLM(model=str(TINY_QWEN3))
    assert Engine.registry.engines() == before  # nothing opened, nothing loaded
    assert RyzenAILLM.class_name() == "RyzenAILLM"


def test_a_missing_folder_is_named_on_first_use():
    llm = RyzenAILLM(model="/no/such/model_rai_1.8.0_npu_4K")
    with pytest.raises(ModelNotFoundError, match="/no/such/model"):
        llm.chat(USER)


def test_metadata_comes_from_the_package(qwen, llama):
    for llm in (qwen, llama):
        m = llm.metadata
        assert m.is_chat_model and m.is_function_calling_model
        assert m.num_output == 12 and m.model_name == llm.model  # the path as given, not the folder's name
        # default tokenizer (tiktoken): scaled down, never more than the real room
        assert m.num_output < m.context_window <= llm.budget.window
    gemma = RyzenAILLM(model=str(TINY_GEMMA3), execution="inline")
    assert gemma.metadata.is_function_calling_model is False  # Gemma 3's template has no tools
    assert RyzenAILLM(model=str(TINY_QWEN3)).metadata.num_output == qwen.budget.bounded_output_tokens


def test_with_the_package_tokenizer_the_counts_and_window_are_exact(qwen):
    text = "Retrieval-augmented generation on a Ryzen AI laptop. 1234 ünïcödé"
    default_window = qwen.metadata.context_window
    Settings.tokenizer = qwen.tokenizer
    assert isinstance(llama_index.core.global_tokenizer.__self__, PackageTokenizer)
    assert Settings.tokenizer(text) == qwen.engine.encode(text)
    assert qwen.engine.render(to_core_messages(EMPTY_TURN)) == SCAFFOLD
    assert len(qwen.engine.encode(SCAFFOLD)) == 21
    # tiny-qwen3: window 4096 and no other prompt limit, so the longest prompt is 4095 tokens;
    # with 12 output tokens a prompt may take min(4095, 4096 - 12) = 4084 of them, of which the
    # template's empty system + user turn takes 21: PromptHelper gets 4084 - 21 = 4063 tokens,
    # and context_window = 12 + 4063 = 4075.
    m = qwen.metadata
    assert (m.num_output, m.context_window) == (12, 4075)
    assert m.context_window > default_window  # the exact count needs no safety margin


def test_context_window_follows_the_release_prompt_limit():
    replica = REPLICAS / "Qwen3-4B_rai_1.8.0_npu_4K"
    old = RyzenAILLM(model=str(replica), provider="cpu", release="1.5.1", max_new_tokens=64)
    new = RyzenAILLM(model=str(replica), provider="cpu", max_new_tokens=64)
    assert (old.budget.prompt_limit, new.budget.prompt_limit) == (2048, 4095)
    Settings.tokenizer = old.tokenizer
    assert len(old.engine.encode(old.engine.render(to_core_messages(EMPTY_TURN)))) == 21  # Qwen3's SCAFFOLD
    # release 1.5.1: prompts up to 2048 tokens; min(2048, 4096 - 64) = 2048, so 64 + 2048 - 21 = 2091
    assert old.metadata.context_window == 2091
    # release 1.8.0: the whole window; min(4095, 4096 - 64) = 4032, so 64 + 4032 - 21 = 4075
    assert new.metadata.context_window == 4075


def test_an_unset_tokenizer_becomes_the_packages(qwen):
    """Settings.tokenizer never set: the first metadata read makes LlamaIndex count exactly."""
    llm = RyzenAILLM(model=str(TINY_QWEN3), max_new_tokens=12)
    scaled = qwen.metadata.context_window  # use_package_tokenizer=False: tiktoken stays, the window is scaled
    assert is_default_tokenizer(llama_index.core.global_tokenizer)  # LlamaIndex installed its tiktoken default
    m = llm.metadata
    assert tokenizer_owner(llama_index.core.global_tokenizer) is llm.tokenizer
    assert m.context_window == 4075  # exact counts: 12 + min(4095, 4096 - 12) - 21, as with Settings.tokenizer set
    assert m.context_window > scaled
    assert qwen.metadata.context_window == m.context_window  # the global now counts in qwen's tokens too


def test_only_llamaindex_own_default_counts_as_unset():
    from llama_index.core.utils import get_tokenizer

    assert is_default_tokenizer(None) and is_default_tokenizer(get_tokenizer())
    assert not is_default_tokenizer(get_tokenizer().func)  # a tiktoken encode set by hand
    assert not is_default_tokenizer(str.split)


def test_a_tokenizer_the_application_set_is_kept():
    def words(text: str) -> list[str]:
        return text.split()

    Settings.tokenizer = words
    llm = RyzenAILLM(model=str(TINY_QWEN3), max_new_tokens=12)
    assert llm.metadata.context_window < llm.budget.window
    assert llama_index.core.global_tokenizer is words


def test_use_package_tokenizer_false_and_a_ratio_leave_the_default_alone():
    for llm in (
        RyzenAILLM(model=str(TINY_QWEN3), max_new_tokens=12, use_package_tokenizer=False),
        RyzenAILLM(model=str(TINY_QWEN3), max_new_tokens=12, tokenizer_ratio=2.0),
    ):
        assert llm.metadata.context_window < llm.budget.window
        assert is_default_tokenizer(llama_index.core.global_tokenizer)


def test_tokenizer_ratio_overrides_the_measurement(qwen):
    fixed = RyzenAILLM(model=str(TINY_QWEN3), max_new_tokens=12, tokenizer_ratio=2.0)
    # the room in package tokens is min(4095, 4096 - 12) - 21 = 4063; at 2 package tokens per
    # counted token PromptHelper may count floor(4063 / 2) = 2031, so context_window = 12 + 2031
    assert fixed.metadata.context_window == 2043


# ---------------------------------------------------------------------- one stream, every face
def test_sync_async_and_streaming_faces_agree(qwen, fake_model):
    fake_model.respond(lambda request: f"On {request.messages[-1].content!r}: " + DEFAULT_WRITES)  # one answer a prompt
    chat = qwen.chat(USER)
    text = chat.message.content
    assert text and chat.additional_kwargs["completion_tokens"] == 12
    assert chat.additional_kwargs["finish_reason"] == "length"
    assert chat.raw["usage"]["prompt_tokens"] == qwen.count_tokens(USER) == chat.additional_kwargs["prompt_tokens"]
    assert chat.raw["budget_plan"]["max_new_tokens"] == 12 and chat.raw["budget_plan"]["window"] == qwen.budget.window
    assert chat.raw["model"] == str(TINY_QWEN3)

    streamed = list(qwen.stream_chat(USER))
    assert "".join(r.delta for r in streamed) == text == streamed[-1].message.content
    assert streamed[-1].raw["usage"] == chat.raw["usage"]

    async def run():
        achat = await qwen.achat(USER)
        deltas = [r.delta async for r in await qwen.astream_chat(USER)]
        return achat.message.content, "".join(deltas)

    assert asyncio.run(run()) == (text, text)

    prompt = "Name a colour."
    completion = qwen.complete(prompt)
    assert completion.text == qwen.chat([ChatMessage(role="user", content=prompt)]).message.content
    assert completion.raw["usage"]["prompt_tokens"] == qwen.count_tokens(prompt)
    pieces = list(qwen.stream_complete(prompt))
    assert pieces[-1].text == "".join(p.delta for p in pieces) == completion.text

    async def arun():
        a = await qwen.acomplete(prompt)
        parts = [p async for p in await qwen.astream_complete(prompt)]
        return a.text, parts[-1].text

    assert asyncio.run(arun()) == (completion.text, completion.text)


def test_a_call_that_is_not_streamed_builds_one_response(qwen, monkeypatch):
    """chat / complete and their async twins build one response, not one per token (each with the text so far)."""
    from llamaindex_ryzenai import _convert

    built: list[ChatResponse] = []

    class Counted(ChatResponse):
        def __init__(self, **data):
            super().__init__(**data)
            built.append(self)

    monkeypatch.setattr(_convert, "ChatResponse", Counted)
    streamed = list(qwen.stream_chat(USER))
    assert len(built) == len(streamed) > 5  # a stream: one per chunk with text
    built.clear()
    chat = qwen.chat(USER)
    assert built == [chat] and chat.message.content == streamed[-1].message.content
    untimed = [{k: v for k, v in r.raw.items() if k != "timings"} for r in (chat, streamed[-1])]
    assert chat.delta == streamed[-1].delta and untimed[0] == untimed[1]  # the stream's last response, built once

    async def run():
        return await qwen.achat(USER), await qwen.acomplete("Name a colour.")

    built.clear()
    achat, acompletion = asyncio.run(run())
    assert len(built) == 2 and achat.message.content == chat.message.content
    built.clear()
    assert qwen.complete("Name a colour.").text == acompletion.text and len(built) == 1


def test_per_call_options_override_the_fields(qwen):
    r = qwen.chat(USER, max_tokens=3, stop=["\n"])
    assert r.additional_kwargs["completion_tokens"] <= 3
    with pytest.raises(InvalidRequestError, match="RyzenAILLM does not take the keyword argument.s. banana"):
        qwen.chat(USER, banana=1)
    with pytest.raises(InvalidRequestError, match="max_new_tokens=0"):
        qwen.chat(USER, max_new_tokens=0)


def test_instrumentation_events_fire_for_chat_stream_and_completion(qwen, recorder):
    qwen.chat(USER)
    assert recorder.names()[0] == "LLMChatStartEvent" and isinstance(recorder.events[-1], LLMChatEndEvent)
    recorder.events.clear()
    chunks = list(qwen.stream_chat(USER))
    progress = [e for e in recorder.events if isinstance(e, LLMChatInProgressEvent)]
    assert len(progress) == len(chunks) > 1 and isinstance(recorder.events[-1], LLMChatEndEvent)
    assert recorder.events[-1].response.raw["usage"]["completion_tokens"] == 12
    recorder.events.clear()
    list(qwen.stream_complete("Hi"))
    kinds = {type(e) for e in recorder.events}
    assert {LLMCompletionStartEvent, LLMCompletionInProgressEvent, LLMCompletionEndEvent} <= kinds
    recorder.events.clear()

    async def run():
        async for _ in await qwen.astream_chat(USER):
            pass

    asyncio.run(run())
    assert isinstance(recorder.events[0], LLMChatStartEvent)
    assert any(isinstance(e, LLMChatInProgressEvent) for e in recorder.events)
    assert isinstance(recorder.events[-1], LLMChatEndEvent)


# ---------------------------------------------------------------------- templates, overrides, reasoning, messages
def test_messages_go_through_the_package_template(qwen):
    prompt = qwen.engine.render(to_core_messages(USER))
    assert prompt.startswith("<|im_start|>system\nYou are terse.<|im_end|>")
    assert qwen.count_tokens(USER) == len(qwen.engine.encode(prompt))


def test_messages_to_prompt_and_completion_to_prompt_overrides_are_sent_verbatim():
    def messages_to_prompt(messages):
        return "".join(f"<<{m.role.value}>> {m.content}\n" for m in messages) + "<<assistant>>"

    def completion_to_prompt(text):
        return f"### Question\n{text}\n### Answer\n"

    llm = RyzenAILLM(
        model=str(TINY_QWEN3),
        max_new_tokens=5,
        temperature=0,
        messages_to_prompt=messages_to_prompt,
        completion_to_prompt=completion_to_prompt,
    )
    raw = messages_to_prompt(USER)
    r = llm.chat(USER)
    assert r.additional_kwargs["prompt_tokens"] == len(llm.engine.encode(raw)) == llm.count_tokens(USER)
    c = llm.complete("Why?")
    assert c.additional_kwargs["prompt_tokens"] == len(llm.engine.encode(completion_to_prompt("Why?")))
    c = llm.complete("<|im_start|>user\nWhy?<|im_end|>\n<|im_start|>assistant\n", formatted=True)
    assert c.additional_kwargs["prompt_tokens"] == len(
        llm.engine.encode("<|im_start|>user\nWhy?<|im_end|>\n<|im_start|>assistant\n")
    )


def test_chat_template_override_and_template_vars(llama):
    tpl = "{% for m in messages %}[{{ m['role'] }}|{{ m['content'] }}|{{ flavour }}]{% endfor %}"
    llm = RyzenAILLM(model=str(TINY_LLAMA), chat_template=tpl, template_vars={"flavour": "mint"}, max_new_tokens=2)
    assert llm.count_tokens(USER) == len(llm.engine.encode("[system|You are terse.|mint][user|Name a colour.|mint]"))
    assert llm.chat(USER).additional_kwargs["completion_tokens"] <= 2


def test_qwen3_reasoning_becomes_a_thinking_block(qwen, fake_model):
    fake_model.answer(THINK).answer(THINK).answer(THINK)
    r = qwen.chat(USER, enable_thinking=True, max_new_tokens=40)
    assert fake_model.options.enable_thinking is True
    thinking = [b for b in r.message.blocks if isinstance(b, ThinkingBlock)]
    assert [b.content for b in thinking] == ["step one"] and r.message.content == "four"
    assert r.raw["reasoning"] == "step one"
    streamed = list(qwen.stream_chat(USER, enable_thinking=True, max_new_tokens=40))
    assert "".join(s.additional_kwargs.get("thinking_delta") or "" for s in streamed) == "step one"
    assert "".join(s.delta for s in streamed) == "four"
    # a thinking block in the history goes back to the template as the turn's reasoning
    core = to_core_message(r.message)
    assert (core.role, core.reasoning, core.content) == ("assistant", "step one", "four")
    completion = qwen.complete("Hi", enable_thinking=True, max_new_tokens=40)
    assert completion.text == "four" and completion.additional_kwargs["thinking"] == "step one"


def test_conversion_of_tool_turns_and_unsupported_blocks():
    call = ChatMessage(
        role=MessageRole.ASSISTANT,
        blocks=[
            TextBlock(text=""),
            ToolCallBlock(tool_call_id="c1", tool_name="multiply", tool_kwargs='{"a": 3, "b": 4}'),
        ],
    )
    result = ChatMessage(
        role=MessageRole.TOOL, content="12", additional_kwargs={"tool_call_id": "c1", "name": "multiply"}
    )
    legacy = ChatMessage(
        role="assistant",
        content="",
        additional_kwargs={"tool_calls": [{"id": "c2", "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'}}]},
    )
    a, t, leg = to_core_messages([call, result, legacy])
    assert [(c.name, c.arguments, c.id) for c in a.tool_calls] == [("multiply", {"a": 3, "b": 4}, "c1")]
    assert (t.role, t.content, t.tool_call_id, t.name) == ("tool", "12", "c1", "multiply")
    assert [(c.name, c.arguments) for c in leg.tool_calls] == [("add", {"a": 1, "b": 2})]
    with pytest.raises(InvalidRequestError, match="AudioBlock"):
        to_core_message(ChatMessage(role="user", blocks=[AudioBlock(audio=b"\x00", format="wav")]))


# ---------------------------------------------------------------------- tools
@pytest.mark.parametrize("which", ["qwen", "llama"])
def test_forced_tool_calls_in_the_family_format(which, request, fake_model):
    llm = request.getfixturevalue(which)
    call = CALLS[which]
    fake_model.answer(call % "multiply")
    r = llm.chat_with_tools(TOOLS, user_msg="What is 3 times 4?", tool_required=True, max_new_tokens=96)
    sent = fake_model.options
    assert sent.tool_choice == "required" and sent.max_new_tokens == 96
    assert [t["function"]["name"] for t in sent.tools] == ["multiply", "add"]
    calls = llm.get_tool_calls_from_response(r)
    assert len(calls) == 1 and calls[0].tool_name == "multiply" and calls[0].tool_id.startswith("call_")
    assert calls[0].tool_kwargs == {"a": 3, "b": 4}
    assert r.additional_kwargs["finish_reason"] == "tool_calls"
    fake_model.answer(call % "add")
    named = llm.chat_with_tools(TOOLS, user_msg="What is 3 plus 4?", tool_choice="add", max_new_tokens=96)
    assert fake_model.options.tool_choice == "add"
    assert [c.tool_name for c in llm.get_tool_calls_from_response(named)] == ["add"]
    # the tools reach the template
    assert '"name": "multiply"' in llm.engine.render(to_core_messages([ChatMessage(role="user", content="x")]), sent)

    async def run():
        r = await llm.achat_with_tools(TOOLS, user_msg="3 times 4?", tool_choice="multiply", max_new_tokens=96)
        streamed = [
            x
            async for x in await llm.astream_chat_with_tools(
                TOOLS, user_msg="3 times 4?", tool_choice="multiply", max_new_tokens=96
            )
        ]
        return r, streamed[-1]

    fake_model.answer(call % "multiply").answer(call % "multiply")
    r, last = asyncio.run(run())
    assert [q.options.tool_choice for q in fake_model.requests[-2:]] == ["multiply", "multiply"]
    assert llm.get_tool_calls_from_response(r)[0].tool_name == "multiply"
    assert llm.get_tool_calls_from_response(last)[0].tool_name == "multiply"


def test_no_tool_call_is_an_error_only_when_asked(qwen):
    r = qwen.chat_with_tools(TOOLS, user_msg="Hi", tool_choice="none")
    assert qwen.get_tool_calls_from_response(r, error_on_no_tool_call=False) == []
    with pytest.raises(ValueError, match="expected at least one tool call"):
        qwen.get_tool_calls_from_response(r)
    with pytest.raises(InvalidRequestError, match="tool_choice"):
        qwen.chat_with_tools(TOOLS, user_msg="Hi", tool_choice=42)
    with pytest.raises(InvalidRequestError, match="not a bound tool"):
        qwen.chat_with_tools(TOOLS, user_msg="Hi", tool_choice="divide")


def test_predict_and_call_runs_the_forced_tool(llama, fake_model):
    fake_model.answer(CALLS["llama"] % "multiply")
    out = llama.predict_and_call(TOOLS, user_msg="What is 3 times 4?", tool_required=True, max_new_tokens=96)
    (source,) = out.sources
    assert source.tool_name in ("multiply", "add")
    a, b = source.raw_input["kwargs"]["a"], source.raw_input["kwargs"]["b"]
    assert out.response == str(multiply(a, b) if source.tool_name == "multiply" else add(a, b))


# ---------------------------------------------------------------------- structured output, exports
def test_structured_output_that_cannot_fit_says_so(qwen):
    with pytest.raises(InvalidRequestError, match="too small for this schema"):
        qwen.structured_predict(Album, PROMPT, llm_kwargs={"max_new_tokens": 4}, topic="x")


def test_exports_are_sorted_and_complete():
    import llamaindex_ryzenai

    assert llamaindex_ryzenai.__all__ == sorted(llamaindex_ryzenai.__all__)
    assert {"BucketPackingPostprocessor", "PackageTokenizer", "RyzenAILLM", "RyzenAIRerank", "__version__"} <= set(
        llamaindex_ryzenai.__all__
    )
    for name in llamaindex_ryzenai.__all__:
        assert hasattr(llamaindex_ryzenai, name), name
    assert BucketPackingPostprocessor.class_name() == "BucketPackingPostprocessor"


# ---------------------------------------------------------------------- capabilities and metadata, the same facts
def test_llamaindex_metadata_from_the_same_facts():
    for folder, tools in ((TINY_QWEN3, True), (TINY_GEMMA3, False)):
        llm = RyzenAILLM(model=str(folder))
        caps = llm.capabilities
        assert caps == capabilities(ModelPackage.open(folder))
        meta = llm.metadata
        assert meta.is_chat_model
        assert meta.is_function_calling_model is caps.tools is tools
        assert meta.num_output == caps.output_budget
        assert meta.context_window <= caps.prompt_limit + caps.output_budget


def test_llamaindex_capabilities_of_a_replica_and_the_vision_fixture():
    npu = RyzenAILLM(model=str(REPLICAS / "Llama-3.2-1B_rai_1.8.0_npu_4K"), release="1.5.0").capabilities
    assert npu == read_capabilities(REPLICAS / "Llama-3.2-1B_rai_1.8.0_npu_4K", release="1.5.0")
    assert npu.prompt_limit == 2048
    assert RyzenAILLM(model=str(MODELS / "tiny-gemma3-vision")).capabilities.images
