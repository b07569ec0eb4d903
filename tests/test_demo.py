"""The demo command end to end (both frameworks, embedded model, no network)."""

from __future__ import annotations

import pytest

from ryzenai_core.cli import main
from ryzenai_core.cli_demo import DEMO_DOCS, Budget, load_documents

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
    code = main(["demo", "--docs", str(tmp_path), "--question", "Who built the Vexlar probe number 1?",
                 "--max-new-tokens", "8"])
    out = capsys.readouterr().out
    assert code == 0
    assert "LangChain" in out and "LlamaIndex" in out
    assert out.count("prompt tokens") == 2
    assert "2048 tokens; prompt limit 2048" in out  # tiny-qa-llama's window


def test_budget_line_for_a_bucketed_plan():
    b = Budget.from_parts({"prompt_tokens": 300, "completion_tokens": 5}, {"prefill_bucket": 512, "padding": 212},
                          {"time_to_first_token": 0.05, "decode_tokens_per_second": 40.0}, 1.0)
    assert b.line() == "300 prompt tokens, prefill bucket 512 (+212 padding), 5 new tokens, first token 50 ms, 40 tok/s"


def test_bundled_documents_exist():
    texts, _ = load_documents(DEMO_DOCS)
    assert DEMO_DOCS.is_dir() and len(texts) >= 3
