"""RyzenAILLM does not silently drop what it is given: unknown fields, aliases, context_window,
serialization round trips and copies (deepcopy, model_copy) on real OGA and the fixture models."""

from __future__ import annotations

import copy
import logging
import pickle

import llama_index.core
import pytest
from llama_index.core import Document, Settings
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.ingestion import IngestionPipeline
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.tools import FunctionTool
from llama_index.core.utils import get_tokenizer
from pydantic import ValidationError

from conftest import ROOT, TINY_LLAMA, TINY_QWEN3, close_engines_under
from llamaindex_ryzenai import RyzenAILLM, _tokens
from ryzenai_core import Engine, InvalidRequestError

USER = [ChatMessage(role="user", content="Name a colour.")]

pytestmark = pytest.mark.usefixtures("llamaindex_event_loop")


@pytest.fixture(autouse=True)
def _fresh_settings(monkeypatch):
    """Every test starts with LlamaIndex's default tokenizer."""
    monkeypatch.setattr(llama_index.core, "global_tokenizer", None)


def make(**fields) -> RyzenAILLM:
    return RyzenAILLM(**{"model": str(TINY_LLAMA), "temperature": 0, "execution": "process", **fields})


def multiply(a: int, b: int) -> int:
    """Multiply two integers."""
    return a * b


def usage(response) -> tuple[int, int | None]:
    """(completion tokens, the output budget the call asked for)."""
    kwargs = response.additional_kwargs
    return kwargs["completion_tokens"], kwargs["budget_plan"]["requested_new_tokens"]


# ---------------------------------------------------------------------- unknown fields and aliases
@pytest.mark.parametrize(
    ("field", "suggestion"),
    [("max_new_tokenz", "'max_new_tokens'"), ("temprature", "'temperature'"), ("contex_window", "'context_window'")],
)
def test_an_unknown_field_is_an_error_naming_the_closest_field(field, suggestion):
    with pytest.raises(ValidationError) as info:
        make(**{field: 5})
    message = str(info.value)
    assert f"unknown field(s) '{field}' (did you mean {suggestion}" in message
    # the accepted fields are listed, LlamaIndex's own included
    assert "accepted fields: adapter, adapters, callback_manager, chat_template" in message
    assert "use_package_tokenizer" in message


def test_an_unknown_field_without_a_close_name_lists_the_accepted_ones():
    with pytest.raises(ValidationError, match=r"unknown field\(s\) 'colour'; accepted fields: .*max_new_tokens"):
        make(colour="blue")


def test_max_tokens_is_max_new_tokens():
    llm = make(max_tokens=5)
    assert llm.max_new_tokens == 5 and llm.metadata.num_output == 5
    tokens, asked = usage(llm.chat(USER))
    assert asked == 5 and tokens <= 5
    assert make(max_tokens=5, max_new_tokens=5).max_new_tokens == 5
    with pytest.raises(ValidationError, match="max_tokens=5 and max_new_tokens=6 disagree.*pass only max_new_tokens"):
        make(max_tokens=5, max_new_tokens=6)


def test_model_copy_updates_are_checked_like_fields():
    llm = make(max_new_tokens=12)
    assert llm.model_copy(update={"max_tokens": 3}).max_new_tokens == 3
    with pytest.raises(ValueError, match=r"unknown field\(s\) 'temprature' \(did you mean 'temperature'"):
        llm.model_copy(update={"temprature": 0.5})


# ---------------------------------------------------------------------- context_window
def test_context_window_lowers_the_reported_window_and_bounds_the_output():
    full = make().metadata
    llm = make(context_window=300)
    meta = llm.metadata
    assert meta.context_window == 300 < full.context_window
    assert meta.num_output == full.num_output == 256
    # without max_new_tokens a call stops at what metadata promised, not at the end of the package's window
    tokens, asked = usage(llm.chat(USER))
    assert asked == 256 and tokens <= 256
    tokens, asked = usage(make().chat(USER, max_new_tokens=4))
    assert asked == 4
    assert make(context_window=300).chat(USER, max_tokens=4).additional_kwargs["budget_plan"]["requested_new_tokens"] == 4


def test_context_window_larger_than_the_package_names_its_window():
    llm = make(context_window=8192)
    with pytest.raises(InvalidRequestError, match=r"context_window=8192 is larger than the window of tiny-llama \(4096"):
        llm.metadata  # noqa: B018
    with pytest.raises(InvalidRequestError, match="leave context_window unset"):
        llm.chat(USER)


def test_context_window_must_leave_room_for_a_prompt():
    with pytest.raises(ValidationError, match="context_window=64 leaves no room for a prompt after max_new_tokens=64"):
        make(context_window=64, max_new_tokens=64)
    llm = make(context_window=200)  # the package's default output is 256 tokens
    with pytest.raises(InvalidRequestError, match="context_window=200 leaves no room .* after 256 output tokens"):
        llm.metadata  # noqa: B018
    assert make(context_window=200, max_new_tokens=50).metadata.context_window == 200


# ---------------------------------------------------------------------- serialization
def test_to_dict_to_json_model_dump_and_pickle_round_trip(caplog):
    llm = make(max_tokens=7, context_window=1024, stop=["\n"], system_prompt="Be brief.")
    data = llm.to_dict()
    assert data["class_name"] == "RyzenAILLM" and data["max_new_tokens"] == 7
    for twin in (
        RyzenAILLM.from_dict(data),
        RyzenAILLM.from_json(llm.to_json()),
        RyzenAILLM.model_validate(llm.model_dump()),
    ):
        assert twin.to_dict() == data
    llm.chat(USER)  # a loaded engine is not pickled: the copy reopens the shared one on first use
    with caplog.at_level(logging.WARNING):
        twin = pickle.loads(pickle.dumps(llm))
    assert twin.to_dict() == data and not caplog.records
    assert usage(twin.chat(USER))[1] == 7
    with pytest.raises(ValidationError, match="class_name='OpenAI': these fields describe another LLM"):
        RyzenAILLM.model_validate({**data, "class_name": "OpenAI"})


def test_pickling_never_changes_the_original():
    llm = make(messages_to_prompt=lambda messages: "unpicklable")
    pickle.dumps(llm)  # LlamaIndex leaves out what cannot be pickled, from the pickle only
    assert llm.messages_to_prompt([]) == "unpicklable"


# ---------------------------------------------------------------------- copies
@pytest.mark.parametrize("used", [False, True], ids=["fresh", "after-a-call"])
@pytest.mark.parametrize("how", ["deepcopy", "model_copy"])
def test_deep_copies_share_the_engine_and_both_generate(how, used):
    llm = make(max_new_tokens=6)
    if used:
        llm.chat(USER)
    twin = copy.deepcopy(llm) if how == "deepcopy" else llm.model_copy(deep=True)
    assert twin is not llm and twin.to_dict() == llm.to_dict()
    assert twin._lock is not llm._lock
    assert usage(twin.chat(USER))[1] == 6
    assert usage(llm.chat(USER))[1] == 6
    assert twin.engine is llm.engine  # one Engine: one loaded model, one worker


def test_a_deep_copy_honours_changed_fields():
    llm = make(max_new_tokens=12)
    llm.chat(USER)
    short = llm.model_copy(update={"max_new_tokens": 3}, deep=True)
    tokens, asked = usage(short.chat(USER))
    assert asked == 3 and tokens <= 3
    assert short.engine is llm.engine and short.tokenizer is llm.tokenizer
    assert usage(llm.chat(USER))[1] == 12  # the original keeps its fields
    # a copy pointed at another package uses that package, never the original's loaded model
    other = llm.model_copy(update={"model": str(TINY_QWEN3)}, deep=True)
    assert other.engine.package.name == "tiny-qwen3" and other.chat(USER).message.content is not None
    assert llm.engine.package.name == "tiny-llama"
    assert copy.copy(llm).model_copy(update={"model": str(TINY_QWEN3)}).engine.package.name == "tiny-qwen3"


# llama-index-workflows runs inspect.getmembers() on the agent (pydantic's deprecated instance
# properties): warnings from the framework, not from this package.
@pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecationWarning")
def test_a_deep_copied_agent_shares_the_model():
    llm = make(max_new_tokens=64)
    agent = FunctionAgent(tools=[FunctionTool.from_defaults(multiply)], llm=llm, initial_tool_choice="multiply")
    twin = copy.deepcopy(agent)
    assert twin.llm is not llm and twin.llm.engine is llm.engine
    assert twin.llm.chat_with_tools(twin.tools, "6 times 7?", tool_required=True).message.blocks


# ---------------------------------------------------------------------- the tokenizer in other processes
SPLITTER = {"chunk_size": 64, "chunk_overlap": 8}


def corpus_documents() -> list[Document]:
    """Two documents of prose, code-ish and numeric text (the fixture corpus), one per spawned worker."""
    lines = (ROOT / "scripts" / "fixture_corpus.txt").read_text(encoding="utf-8").splitlines()
    text = "\n".join(lines[:40])
    half = len(text) // 2
    return [Document(text=text[:half], id_="first"), Document(text=text[half:], id_="second")]


def chunks(nodes) -> list[tuple[str, str, int | None]]:
    return [(n.ref_doc_id, n.get_content(), n.start_char_idx) for n in nodes]


@pytest.mark.slow
def test_spawned_ingestion_workers_split_exactly_as_one_worker():
    """IngestionPipeline(num_workers=2) spawns its workers: the package tokenizer travels to them
    (as Settings.tokenizer, where LlamaIndex's unpickled splitters take theirs from), not tiktoken."""
    make().metadata  # noqa: B018 - the first read makes the package tokenizer Settings.tokenizer
    docs = corpus_documents()

    def run(workers: int) -> list[tuple[str, str, int | None]]:
        pipeline = IngestionPipeline(transformations=[SentenceSplitter(**SPLITTER)], disable_cache=True)
        return chunks(pipeline.run(documents=docs, num_workers=workers))

    one = run(1)
    assert run(2) == one
    tiktoken = SentenceSplitter(**SPLITTER, tokenizer=get_tokenizer_of_llamaindex())
    assert chunks(tiktoken.get_nodes_from_documents(docs)) != one  # what the workers split before


def get_tokenizer_of_llamaindex():
    """LlamaIndex's own default tokenizer (tiktoken cl100k_base, from its bundled files), whatever Settings.tokenizer is."""
    chosen, llama_index.core.global_tokenizer = llama_index.core.global_tokenizer, None
    try:
        return get_tokenizer()
    finally:
        llama_index.core.global_tokenizer = chosen


@pytest.fixture
def alone(copy_package):
    """A copy of tiny-llama (its engine is this test's alone), forgotten by the registry at the end."""
    folder = copy_package(TINY_LLAMA)
    yield folder
    close_engines_under(folder)


def forget_in_this_process(folder) -> None:
    """This process as a spawned one finds it: no engine on ``folder``, no reopened tokenizer, no Settings.tokenizer."""
    close_engines_under(folder)
    _tokens._REOPENED.clear()
    llama_index.core.global_tokenizer = None


def engines_on(folder) -> list:
    return [slot for slot in Engine.registry.engines(Engine) if slot.key.path == str(folder.resolve())]


def test_the_package_tokenizer_pickles_and_counts_without_loading_the_model(alone, monkeypatch):
    monkeypatch.setattr(_tokens, "_REOPENED", {})
    llm = make(model=str(alone))
    text = corpus_documents()[0].text + " \x00 naïve café ﷽"
    expected, path = llm.tokenizer(text), llm.tokenizer.path
    decoded = llm.tokenizer.decode(expected[:-1])  # ends inside a character
    other = pickle.dumps(llm.tokenizer)  # not Settings.tokenizer
    Settings.tokenizer = llm.tokenizer
    installed = pickle.dumps(Settings.tokenizer)  # what LlamaIndex stores: the bound encode
    forget_in_this_process(alone)

    copy = pickle.loads(other)  # not this process's Settings.tokenizer where it was pickled
    assert llama_index.core.global_tokenizer is None
    assert copy.path == path == alone.resolve() and repr(copy) == f"PackageTokenizer({str(path)!r})"
    if tokens_without_model_here():
        assert copy(text) == expected and copy.decode(expected[:-1]) == decoded
        assert engines_on(alone) == []  # counted by the tokenizer alone: no model, no worker
    encode = pickle.loads(installed)
    assert encode.__self__ is copy  # one copy per package and settings in a process
    assert _tokens.tokenizer_owner(llama_index.core.global_tokenizer) is copy  # Settings.tokenizer again
    assert encode(text) == expected

    monkeypatch.setattr(llama_index.core, "global_tokenizer", str.split)  # a process that chose its own
    pickle.loads(installed)
    assert llama_index.core.global_tokenizer is str.split


def tokens_without_model_here() -> bool:
    import onnxruntime_genai as og

    return not og.__version__.startswith("0.14")


def test_a_copy_in_the_process_that_has_the_engine_counts_with_it(alone, monkeypatch):
    """Unpickled where the engine is open (a copy of the LLM, a thread pool), nothing is loaded again."""
    from ryzenai_core.generation import tokens as core_tokens

    monkeypatch.setattr(_tokens, "_REOPENED", {})
    llm = make(model=str(alone))
    text = "Which prefill bucket does a prompt of one thousand tokens cost?"
    expected = llm.tokenizer(text)

    def refuse(package):
        raise AssertionError("the tokenizer was loaded again beside the open engine")

    monkeypatch.setattr(core_tokens, "load_tokenizer", refuse)
    assert pickle.loads(pickle.dumps(llm.tokenizer))(text) == expected


def test_a_runtime_that_needs_the_model_for_a_tokenizer_reopens_the_engine(alone, monkeypatch):
    """onnxruntime-genai 0.14 (Ryzen AI 1.8's) makes a tokenizer from a loaded model only: the copy
    loads the package as the original did, with its settings, and counts the same."""
    import onnxruntime_genai as og

    monkeypatch.setattr(_tokens, "_REOPENED", {})
    llm = make(model=str(alone), num_threads=1, execution="inline")
    text = "Which prefill bucket does a prompt of one thousand tokens cost?\x00"
    expected = llm.tokenizer(text)
    data = pickle.dumps(llm.tokenizer)
    forget_in_this_process(alone)
    real = og.Tokenizer

    def from_a_model_only(source):  # onnxruntime-genai 0.14's constructor: Tokenizer(model) alone
        if isinstance(source, og.Config):
            raise TypeError("__init__(): incompatible constructor arguments")
        return real(source)

    monkeypatch.setattr(og, "Tokenizer", from_a_model_only)
    copy = pickle.loads(data)
    assert engines_on(alone) == []  # nothing before the first count
    assert copy(text) == expected
    (slot,) = engines_on(alone)
    assert (slot.key.num_threads, slot.execution) == (1, "inline")
