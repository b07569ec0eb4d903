"""ChatRyzenAI takes what LangChain users pass it, and says so when it cannot (on the fake engine, tests/fake_engine.py).

Generation options inside ``model_kwargs`` are honoured or refused (never sent to the chat
template), the standard constructor parameters of LangChain chat models are accepted while a
misspelt option is still an error, ``response_metadata["model_name"]`` is the model the caller
named, and token counting takes whatever ``invoke`` takes. The LangSmith params are read as
callbacks receive them.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.tools import tool
from pydantic import ValidationError

from conftest import TINY_LLAMA, TINY_QWEN3, chat_model_start
from langchain_ryzenai import ChatRyzenAI
from ryzenai_core import InvalidRequestError

QWEN = str(TINY_QWEN3)
LLAMA = str(TINY_LLAMA)

pytestmark = pytest.mark.usefixtures("fake_model")


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def chat(**kw):
    return ChatRyzenAI(**{"model": QWEN, "temperature": 0, "kv_reuse": False, **kw})


# ---------------------------------------------------------------------- model_name is what the caller named
def test_model_name_is_the_path_given():
    msg = chat(max_tokens=2).invoke("Hello")
    assert msg.response_metadata["model_name"] == QWEN
    streamed = list(chat(model=TINY_QWEN3, max_tokens=2).stream("Hello"))
    assert streamed[-1].response_metadata["model_name"] == QWEN
    assert chat(max_tokens=2).invoke("Hello", model=LLAMA).response_metadata["model_name"] == LLAMA
    assert chat(max_tokens=2).invoke("Hello", model=TINY_LLAMA).response_metadata["model_name"] == LLAMA
    assert chat_model_start(chat(), "Hello")[0]["ls_model_name"] == QWEN
    assert chat_model_start(chat(), "Hello", model=LLAMA)[0]["ls_model_name"] == LLAMA


def test_model_name_of_an_embedded_model_is_its_name():
    msg = chat(model="tiny-random-llama", max_tokens=2).invoke("Hello")
    assert msg.response_metadata["model_name"] == "tiny-random-llama"


def test_model_name_of_a_hub_model_is_the_repository_id(tmp_path, monkeypatch, fake_model):
    import huggingface_hub.constants

    repo_id, commit = "amd/Llama-3.2-1B_rai_1.8.0_npu_4K", "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "hub" / ("models--" + repo_id.replace("/", "--"))
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    shutil.copytree(TINY_LLAMA, repo / "snapshots" / commit)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    llm = ChatRyzenAI(model=repo_id, temperature=0, max_tokens=2, execution="inline")
    ls, _ = chat_model_start(llm, "Hello")
    assert ls["ls_model_name"] == repo_id
    assert llm.invoke("Hello").response_metadata["model_name"] == repo_id
    assert fake_model.engines()[0].package.path == (repo / "snapshots" / commit).resolve()  # the cached snapshot


def test_path_objects_are_model_names_too():
    assert chat_model_start(chat(model=Path(QWEN)), "Hello")[0]["ls_model_name"] == QWEN


# ---------------------------------------------------------------------- token counts take what invoke takes
def test_token_counts_take_what_invoke_takes():
    llm = chat(max_tokens=2)
    msgs = [SystemMessage("You are terse."), HumanMessage("hi"), AIMessage("hello"), HumanMessage("bye")]
    expected = llm.get_num_tokens_from_messages(msgs)
    tuples = [("system", "You are terse."), ("human", "hi"), ("ai", "hello"), ("human", "bye")]
    dicts = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "bye"},
    ]
    assert llm.get_num_tokens_from_messages(tuples) == expected
    assert llm.get_num_tokens_from_messages(dicts) == expected
    assert (
        llm.get_num_tokens_from_messages([msgs[0], ("human", "hi"), {"role": "ai", "content": "hello"}, "bye"])
        == expected
    )
    prompt = ChatPromptTemplate.from_messages(tuples).invoke({})
    assert llm.get_num_tokens_from_messages(prompt) == expected
    one = llm.get_num_tokens_from_messages("hi")
    assert one == llm.get_num_tokens_from_messages([HumanMessage("hi")])
    assert one == llm.invoke("hi").usage_metadata["input_tokens"]
    assert llm.invoke(tuples).usage_metadata["input_tokens"] == expected
    assert llm.get_num_tokens("hi there") == len(llm.get_token_ids("hi there")) > 0


def test_token_counts_of_a_bad_message_are_a_clear_error():
    with pytest.raises(ValueError, match="Unexpected message type: 'critic'"):
        chat().get_num_tokens_from_messages([("critic", "x")])


# ---------------------------------------------------------------------- stop
def test_stop_may_be_one_string():
    assert ChatRyzenAI(model=QWEN, stop="END").stop == ["END"]
    with pytest.raises(ValidationError, match="stop strings must be non-empty"):
        ChatRyzenAI(model=QWEN, stop="")


# ---------------------------------------------------------------------- standard constructor parameters, typos
def test_credentials_and_endpoints_of_hosted_models_are_accepted_and_unused():
    llm = ChatRyzenAI(model=QWEN, api_key="sk-secret", base_url="http://localhost:8000/v1", max_retries=2)
    assert "sk-secret" not in repr(llm) and "sk-secret" not in str(llm.model_dump())
    _, params = chat_model_start(llm, "Hello")
    assert "api_key" not in params and "base_url" not in params and "sk-secret" not in str(params)
    assert llm.model == QWEN


@pytest.mark.parametrize(
    ("typo", "suggestion"),
    [("temprature", "temperature"), ("max_token", "max_tokens"), ("top_q", "top_p"), ("api_keys", "api_key")],
)
def test_a_misspelt_parameter_is_an_error_that_suggests_the_name(typo, suggestion):
    with pytest.raises(InvalidRequestError, match=rf"unknown parameter {typo!r}; did you mean {suggestion!r}\?"):
        ChatRyzenAI(model=QWEN, **{typo: 1})


def test_an_unknown_parameter_lists_the_accepted_ones():
    with pytest.raises(
        InvalidRequestError, match=r"unknown parameter 'frobnicate'\. ChatRyzenAI takes .*max_tokens.*temperature"
    ):
        ChatRyzenAI(model=QWEN, frobnicate=True)


def test_a_misspelt_call_keyword_suggests_the_name():
    with pytest.raises(
        InvalidRequestError,
        match=r"does not take the keyword argument\(s\) max_new_token \(did you mean 'max_tokens'\?\)",
    ):
        chat().invoke("hi", max_new_token=3)


# ---------------------------------------------------------------------- generation options in model_kwargs
def test_model_kwargs_generation_options_become_the_fields():
    llm = chat(model_kwargs={"max_tokens": 3, "top_k": 5, "seed": 7, "stop": "END", "date_string": "1 Jan 2026"})
    assert (llm.max_tokens, llm.top_k, llm.seed, llm.stop) == (3, 5, 7, ["END"])
    assert llm.model_kwargs == {"date_string": "1 Jan 2026"}  # the template variable stays
    ls, _ = chat_model_start(llm, "Hello")
    assert ls["ls_max_tokens"] == 3
    msg = llm.invoke("Hello")
    assert msg.usage_metadata["output_tokens"] == 3
    assert msg.response_metadata["finish_reason"] == "length"


def test_model_kwargs_take_the_names_other_runtimes_use():
    llm = chat(model_kwargs={"max_new_tokens": 2, "random_seed": 3, "stop_sequences": ["x"], "reasoning": False})
    assert (llm.max_tokens, llm.seed, llm.stop, llm.enable_thinking) == (2, 3, ["x"], False)
    assert chat(model_kwargs={"max_completion_tokens": 4}).max_tokens == 4
    assert chat(model_kwargs={"enable_thinking": False}).enable_thinking is False


def test_model_kwargs_per_call_and_bound_limit_the_answer():
    llm = chat(max_tokens=24)
    assert llm.invoke("Hello", model_kwargs={"max_tokens": 3}).usage_metadata["output_tokens"] == 3
    assert llm.bind(model_kwargs={"max_new_tokens": 2}).invoke("Hello").usage_metadata["output_tokens"] == 2
    chunks = list(llm.stream("Hello", model_kwargs={"max_tokens": 3}))
    assert chunks[-1].usage_metadata["output_tokens"] == 3
    assert chat_model_start(llm, "Hello", model_kwargs={"max_tokens": 3, "temperature": 0.5})[0]["ls_max_tokens"] == 3
    assert chat_model_start(llm, "Hello", model_kwargs={"temperature": 0.5})[0]["ls_temperature"] == 0.5


async def test_model_kwargs_per_call_async():
    msg = await chat(max_tokens=24).ainvoke("Hello", model_kwargs={"max_tokens": 3})
    assert msg.usage_metadata["output_tokens"] == 3


def test_model_kwargs_stop_per_call_cuts_the_answer():
    llm = chat(max_tokens=40)
    full = llm.invoke("Hello").content
    stop = full[10:13]
    assert stop.strip()
    expected = full[: full.index(stop)]
    assert llm.invoke("Hello", model_kwargs={"stop": [stop]}).content == expected
    assert chat(max_tokens=40, model_kwargs={"stop": stop}).invoke("Hello").content == expected


def test_model_kwargs_tools_per_call_are_the_tools():
    llm = chat(max_tokens=4)
    msgs = [HumanMessage("What is 1 + 2?")]
    with_tools = llm.get_num_tokens_from_messages(msgs, tools=[add])
    assert with_tools > llm.get_num_tokens_from_messages(msgs)
    msg = llm.invoke(msgs, model_kwargs={"tools": [add]})
    assert msg.usage_metadata["input_tokens"] == with_tools
    bound = chat(max_tokens=4, model_kwargs={"tools": [add]})
    assert bound.get_num_tokens_from_messages(msgs) == with_tools
    assert bound.invoke(msgs).usage_metadata["input_tokens"] == with_tools


def test_model_kwargs_given_twice_is_an_error():
    with pytest.raises(
        InvalidRequestError, match=r"max_tokens is given twice: max_tokens=5 and model_kwargs\['max_tokens'\]=3"
    ):
        ChatRyzenAI(model=QWEN, max_tokens=5, model_kwargs={"max_tokens": 3})
    with pytest.raises(
        InvalidRequestError, match=r"enable_thinking is given twice.*model_kwargs\['enable_thinking'\]=True"
    ):
        ChatRyzenAI(model=QWEN, reasoning=False, model_kwargs={"enable_thinking": True})
    assert ChatRyzenAI(model=QWEN, max_tokens=3, model_kwargs={"max_tokens": 3}).max_tokens == 3
    with pytest.raises(
        InvalidRequestError, match=r"max_tokens is given twice: max_tokens=5 and model_kwargs\['max_new_tokens'\]=3"
    ):
        chat().invoke("Hello", max_tokens=5, model_kwargs={"max_new_tokens": 3})
    with pytest.raises(InvalidRequestError, match=r"stop is given twice"):
        chat().invoke("Hello", stop=["a"], model_kwargs={"stop": ["b"]})


def test_model_kwargs_generation_options_that_are_not_supported_are_refused():
    with pytest.raises(
        InvalidRequestError, match=r"model_kwargs\['max_length'\]=50.*prompt \+ new tokens.*use max_tokens"
    ):
        ChatRyzenAI(model=QWEN, model_kwargs={"max_length": 50})
    with pytest.raises(InvalidRequestError, match=r"model_kwargs\['presence_penalty'\]=0.5.*use repetition_penalty"):
        ChatRyzenAI(model=QWEN, model_kwargs={"presence_penalty": 0.5})
    with pytest.raises(InvalidRequestError, match=r"model_kwargs\['num_beams'\]=4.*beam search"):
        chat().invoke("Hello", model_kwargs={"num_beams": 4})
    with pytest.raises(InvalidRequestError, match=r"model_kwargs\['do_sample'\]=False.*temperature=0"):
        chat().invoke("Hello", model_kwargs={"do_sample": False})
    with pytest.raises(InvalidRequestError, match=r"model_kwargs\['num_threads'\]=2.*set when ChatRyzenAI is created"):
        chat().invoke("Hello", model_kwargs={"num_threads": 2})
    with pytest.raises(
        InvalidRequestError,
        match=r"model_kwargs=\{'messages': \[\]\}: 'messages' cannot be a chat-template variable: it is the conversation",
    ):
        chat().invoke("Hello", model_kwargs={"messages": []})


def test_model_kwargs_values_are_checked_like_the_fields():
    with pytest.raises(ValidationError, match="max_tokens"):
        ChatRyzenAI(model=QWEN, model_kwargs={"max_tokens": 0})
    with pytest.raises(InvalidRequestError, match=r"top_p=2\.0"):
        chat().invoke("Hello", model_kwargs={"top_p": 2.0})


def test_model_kwargs_must_be_a_dict():
    with pytest.raises(InvalidRequestError, match=r"model_kwargs must be a dict.*got list"):
        chat().invoke("Hello", model_kwargs=[("max_tokens", 3)])
