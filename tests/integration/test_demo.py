"""The demo command end to end (both frameworks, embedded model, no network)."""

from __future__ import annotations

import re

import pytest

from conftest import FIXTURES
from ryzenai_cli.demo import DEMO_DOCS, Budget, load_documents
from ryzenai_cli.main import main

pytest.importorskip("langchain_ryzenai")
pytest.importorskip("llamaindex_ryzenai")
pytestmark = pytest.mark.usefixtures("llamaindex_event_loop")


@pytest.fixture(autouse=True)
def _restore_llamaindex_tokenizer(monkeypatch):
    """The demo sets LlamaIndex's global tokenizer (as an app should); other tests must not see it."""
    import llama_index.core

    monkeypatch.setattr(llama_index.core, "global_tokenizer", llama_index.core.global_tokenizer)


def test_demo_answers_twice_and_shows_budgets(capsys, tmp_path):
    for i in range(3):
        (tmp_path / f"d{i}.txt").write_text(f"Document {i}: the Vexlar probe number {i} was built by Oda Quen{i}.")
    code = main(
        ["demo", "--docs", str(tmp_path), "--question", "Who built the Vexlar probe number 1?", "--max-new-tokens", "8"]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "LangChain" in out and "LlamaIndex" in out
    assert out.count("prompt tokens") == 2
    assert "2048 tokens; prompt limit 2047" in out  # tiny-qa-llama's window, less the answer's first token


def test_budget_line_for_a_bucketed_plan():
    b = Budget.from_parts(
        {"prompt_tokens": 300, "completion_tokens": 5},
        {"prefill_bucket": 512, "padding": 212},
        {"time_to_first_token": 0.05, "decode_tokens_per_second": 40.0},
        1.0,
    )
    assert b.line() == "300 prompt tokens, prefill bucket 512 (+212 padding), 5 new tokens, first token 50 ms, 40 tok/s"


def test_bundled_documents_exist():
    texts, _ = load_documents(DEMO_DOCS)
    assert DEMO_DOCS.is_dir() and len(texts) >= 3


def test_demo_checks_the_bundled_question_against_its_answer(capsys):
    code = main(["demo"])
    out = capsys.readouterr().out
    assert code == 0
    assert "tiny-qa-llama: a 1.3M-parameter model trained to answer by copying a span" in " ".join(out.split())
    assert "question: Who is the director of the Vantor Lab?" in out
    assert "LangChain: right (expected 'Ilsa Brandecott')" in out
    assert "LlamaIndex: right (expected 'Ilsa Brandecott')" in out


def test_demo_on_another_model_says_when_an_answer_is_not_the_expected_one(capsys, tmp_path):
    import json

    for i in range(3):
        (tmp_path / f"d{i}.txt").write_text(f"Document {i}: the Vexlar probe number {i} was built by Oda Quen{i}.")
    question = "Who built the Vexlar probe number 1?"
    (tmp_path / "questions.json").write_text(json.dumps({"questions": [{"question": question, "answer": "Oda Quen1"}]}))
    code = main(["demo", "--model", "tiny-random-llama", "--docs", str(tmp_path), "--max-new-tokens", "4"])
    out = capsys.readouterr().out
    assert code == 0
    assert "tiny-random-llama" in out and "1M-parameter" not in out  # the model card note is for the default only
    assert f"question: {question}  (3 documents, BM25, top 2)" in out
    assert "LangChain: not the expected answer (expected 'Oda Quen1')" in out
    assert "LlamaIndex: not the expected answer (expected 'Oda Quen1')" in out


def test_demo_without_documents_is_an_error_naming_the_folder(capsys, tmp_path):
    (tmp_path / "notes.md").write_text("# not read")
    (tmp_path / "empty.txt").write_text("  \n")
    code = main(["demo", "--docs", str(tmp_path)])
    err = " ".join(capsys.readouterr().err.split())
    assert code == 2
    assert err.startswith(f"error: --docs {tmp_path} has no .txt documents (it holds .md files): the demo reads only")
    assert "pass --docs FOLDER" not in err


def test_demo_on_a_missing_docs_folder_says_it_does_not_exist(capsys, tmp_path):
    code = main(["demo", "--docs", str(tmp_path / "missing")])
    err = " ".join(capsys.readouterr().err.split())
    assert code == 2
    assert err == f"error: --docs {tmp_path / 'missing'}: the folder does not exist; pass a folder of .txt documents"


def test_demo_panel_shows_the_whole_package_path(capsys, tmp_path, monkeypatch, copy_package):
    deep = copy_package(FIXTURES / "models" / "tiny-llama", "a-long-folder-name-" * 4 + "/tiny-llama")
    monkeypatch.setenv("COLUMNS", "60")
    (tmp_path / "d.txt").write_text("Document: the Vexlar probe was built by Oda Quen.")
    code = main(["demo", "--model", str(deep), "--docs", str(tmp_path), "--max-new-tokens", "2"])
    out = capsys.readouterr().out
    assert code == 0
    panel = out.split("question:")[0]
    assert "…" not in panel
    assert str(deep) in "".join(c for c in panel if c not in " │\n")


def test_demo_without_a_framework_says_what_to_install(capsys, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "ryzenai_cli.demo_llamaindex", None)  # as if LlamaIndex was not installed
    code = main(["demo"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith(
        "error: the demo runs both frameworks and needs them installed: pip install 'ryzenai-llm[all]'"
    )


def test_demo_retrieves_wide_reranks_and_generates_showing_each_stage(capsys, tmp_path):
    from langchain_core.documents import Document
    from llama_index.core import QueryBundle

    from langchain_ryzenai import RyzenAIRerank as LangChainRerank
    from llamaindex_ryzenai import RyzenAILLM
    from llamaindex_ryzenai import RyzenAIRerank as LlamaIndexRerank
    from ryzenai_cli.demo_langchain import build_retriever
    from ryzenai_cli.demo_llamaindex import build_query_engine
    from ryzenai_core.rerank.engine import RerankEngine

    fixtures = FIXTURES
    embed, rerank = fixtures / "embeddings" / "tiny-bert-st", fixtures / "rerank" / "tiny-bert-cross-encoder"
    texts = [f"Document {i}: the Vexlar probe number {i} was built by Oda Quen{i}." for i in range(4)]
    question = "Who built the Vexlar probe number 1?"
    best = RerankEngine(rerank).rerank(question, texts).top(2)  # what the LLM must get: the reranker's two
    retriever = build_retriever(
        [Document(page_content=t) for t in texts], reranker=LangChainRerank(model=str(rerank), top_n=2)
    )
    assert [d.page_content for d in retriever.invoke(question)] == [texts[i] for i in best]
    engine = build_query_engine(
        RyzenAILLM(model="tiny-qa-llama"), texts, reranker=LlamaIndexRerank(model=str(rerank), top_n=2)
    )
    assert [n.node.get_content() for n in engine.retrieve(QueryBundle(question))] == [texts[i] for i in best]
    for i, t in enumerate(texts):
        (tmp_path / f"d{i}.txt").write_text(t)
    code = main(
        [
            "demo",
            "--docs",
            str(tmp_path),
            "--question",
            question,
            "--max-new-tokens",
            "4",
            "--embed-model",
            str(embed),
            "--rerank-model",
            str(rerank),
        ]
    )
    out = " ".join(capsys.readouterr().out.split())
    assert code == 0
    assert (
        "(4 documents, tiny-bert-st embeddings on CPUExecutionProvider, all 4 reranked by tiny-bert-cross-encoder"
        in out
    )
    assert "LangChain retriever | RyzenAIRerank | prompt | ChatRyzenAI | parser" in out
    assert "LlamaIndex query engine on RyzenAILLM, RyzenAIRerank postprocessor" in out
    assert len(re.findall(r"retrieve \d+ ms, rerank \d+ ms, first token \d+ ms, generate \d+ ms", out)) == 2
