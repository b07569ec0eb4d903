"""RyzenAILLM's tokenizer in other processes, on real OGA and the fixture models: spawned ingestion workers
split as one worker, the package tokenizer pickles and counts without loading the model.

Unknown fields, aliases, context_window, serialization round trips and copies are tested on the fake
engine in tests/unit/test_ryzenai_llm_fields.py."""

from __future__ import annotations

import pickle

import llama_index.core
import pytest
from llama_index.core import Document, Settings
from llama_index.core.ingestion import IngestionPipeline
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.utils import get_tokenizer

from conftest import ROOT, TINY_LLAMA, close_engines_under
from llamaindex_ryzenai import RyzenAILLM, _tokens
from ryzenai_core import Engine

pytestmark = pytest.mark.usefixtures("llamaindex_event_loop")


@pytest.fixture(autouse=True)
def _fresh_settings(monkeypatch):
    """Every test starts with LlamaIndex's default tokenizer."""
    monkeypatch.setattr(llama_index.core, "global_tokenizer", None)


def make(**fields) -> RyzenAILLM:
    return RyzenAILLM(**{"model": str(TINY_LLAMA), "temperature": 0, "execution": "process", **fields})


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
