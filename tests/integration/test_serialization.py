"""LangChain serialization: dumps / loads round-trip ChatRyzenAI and RyzenAIEmbeddings, no secret written."""

from __future__ import annotations

import json
import warnings

import pytest
from langchain_core.load import dumpd, dumps, loads
from langchain_core.prompts import ChatPromptTemplate, HumanMessagePromptTemplate, PromptTemplate
from langchain_core.runnables import RunnableSequence

from conftest import FIXTURES, TINY_LLAMA, TINY_QWEN3
from langchain_ryzenai import ChatRyzenAI, RyzenAIEmbeddings

TINY_BERT = FIXTURES / "embeddings" / "tiny-bert-st"
SECRET = "sk-not-to-be-written-0d9e"


def _loads(text: str, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # LangChainBetaWarning: loads is in beta
        return loads(
            text, valid_namespaces=["langchain_ryzenai"], allowed_objects=[ChatRyzenAI, RyzenAIEmbeddings], **kwargs
        )


def test_chat_model_round_trips_to_an_equal_model():
    llm = ChatRyzenAI(
        model=str(TINY_QWEN3),
        temperature=0.3,
        top_k=20,
        max_tokens=12,
        stop=["\n\n"],
        reasoning=False,
        overflow="drop_oldest",
        session_options={"log_severity_level": 3},
        model_kwargs={"date_string": "1 Jan 2026"},
        release="1.8.0",
    )
    text = dumps(llm)
    data = json.loads(text)
    assert data["id"] == ["langchain_ryzenai", "ChatRyzenAI"]
    assert data["kwargs"]["model_kwargs"] == {"date_string": "1 Jan 2026"}
    again = _loads(text)
    assert type(again) is ChatRyzenAI
    assert again == llm
    assert again.profile == llm.profile and again.profile is not None


def test_the_revived_model_answers_as_the_original():
    llm = ChatRyzenAI(model=str(TINY_LLAMA), temperature=0, max_tokens=8, model_kwargs={"date_string": "1 Jan 2026"})
    again = _loads(dumps(llm))
    assert again.invoke("Hello").content == llm.invoke("Hello").content


def test_api_key_is_written_as_a_secret_reference_never_its_value(monkeypatch):
    llm = ChatRyzenAI(model=str(TINY_QWEN3), api_key=SECRET)
    text = dumps(llm)
    assert SECRET not in text
    assert json.loads(text)["kwargs"]["api_key"] == {"lc": 1, "type": "secret", "id": ["RYZENAI_API_KEY"]}
    assert SECRET not in json.dumps(dumpd(llm))
    assert _loads(text).api_key is None  # no secret given back: none restored
    assert _loads(text, secrets_map={"RYZENAI_API_KEY": SECRET}) == llm
    monkeypatch.setenv("RYZENAI_API_KEY", SECRET)
    assert _loads(text, secrets_from_env=True).api_key.get_secret_value() == SECRET


def test_a_chain_with_the_chat_model_round_trips():
    chain = ChatPromptTemplate.from_messages([("human", "{question}")]) | ChatRyzenAI(model=str(TINY_QWEN3))
    parts = [RunnableSequence, ChatPromptTemplate, HumanMessagePromptTemplate, PromptTemplate, ChatRyzenAI]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        again = loads(dumps(chain), valid_namespaces=["langchain_ryzenai"], allowed_objects=parts)
    assert isinstance(again, RunnableSequence)
    assert again.last == chain.last
    assert again.first.invoke({"question": "Hi"}) == chain.first.invoke({"question": "Hi"})


def test_another_namespace_is_refused():
    text = dumps(ChatRyzenAI(model=str(TINY_QWEN3)))
    with warnings.catch_warnings(), pytest.raises(ValueError, match="not allowed|Invalid namespace"):
        warnings.simplefilter("ignore")
        loads(text)  # the default allowlist holds langchain-core's classes only


def test_embeddings_round_trip_to_equal_settings_and_vectors():
    emb = RyzenAIEmbeddings(model=str(TINY_BERT), batch_size=4, query_instruction="query: ", on_overflow="error")
    text = dumps(emb)
    assert json.loads(text)["id"] == ["langchain_ryzenai", "RyzenAIEmbeddings"]
    again = _loads(text)
    assert type(again) is RyzenAIEmbeddings
    assert again == emb
    assert again.embed_query("what runs on the NPU?") == emb.embed_query("what runs on the NPU?")
