"""End-to-end answers of the embedded extractive-QA model (core/models/tiny-qa-llama).

The model was trained (scripts/train_qa_model.py) to copy the answer to a question out of
the documents in its prompt, in the real Llama 3.2 template. Unlike the random-weight
fixtures, its answers are right or wrong, so a template, BOS, truncation or stop-string bug
shows up here as wrong answers.

Tolerances (greedy decoding, so each run is deterministic on one platform; the margins absorb
differences between onnxruntime builds): a fixed set of 30 held-out questions (names never
seen in training, 2 documents each, training question wordings) must be answered exactly
right >= 80% of the time through ``Engine``; >= 7/10 through a LangChain chain and a
LlamaIndex query engine; >= 24/30 of a hand-written set (``scripts/qa_independent.json``)
through each adapter. The same questions rendered with a doubled or missing BOS (the model
was trained to answer nothing then), with a wrong (ChatML) template or with the answer's
document cut out must score far lower: these tests prove the accuracy tests can fail.

The module is skipped unless the folder's eval.json (scripts/eval_qa_model.py) shows the
weights answer at least 70% of 2-document questions: under-trained weights make every
assertion here meaningless.
"""

from __future__ import annotations

import random
import sys

import pytest

from conftest import ROOT
from ryzenai_core import Engine
from ryzenai_core.messages import ChatMessage
from ryzenai_core.options import validated_options

MODEL = ROOT / "core" / "models" / "tiny-qa-llama"
DEMO = ROOT / "cli" / "demo_docs"
sys.path.insert(0, str(ROOT / "scripts"))
qa_synth = pytest.importorskip("qa_synth")
eval_qa_model = pytest.importorskip("eval_qa_model")


def _trained_enough() -> tuple[bool, str]:
    """The answer tests only make sense on weights that answer: eval.json's 2-document cell."""
    import json

    if not (MODEL / "genai_config.json").is_file():
        return False, "tiny-qa-llama not built"
    try:
        cells = json.loads((MODEL / "eval.json").read_text(encoding="utf-8"))["cells"]
        acc = next(c["accuracy"] for c in cells if c["docs"] == 2 and c["wording"] == "train")
    except (OSError, KeyError, StopIteration, ValueError):
        return False, "tiny-qa-llama has no eval.json (run scripts/eval_qa_model.py)"
    if acc < 0.7:
        return (
            False,
            f"tiny-qa-llama measured {acc:.0%} with 2 documents (< 70%): retrain it longer before these tests mean anything",
        )
    return True, ""


_OK, _WHY = _trained_enough()
pytestmark = pytest.mark.skipif(not _OK, reason=_WHY)

N = 30
MIN_CORRECT = 24  # 80% of 30
SEED = 424242
MAX_NEW = 16
CHATML = (
    "{%- for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{%- endif %}"
)


def _heldout(n: int = N, seed: int = SEED):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        msgs, answers, docs = qa_synth.make_qa(rng, 2, split="heldout", wording="train")
        out.append(([ChatMessage(r, c) for r, c in msgs], answers[-1], docs, msgs))
    return out


@pytest.fixture(scope="module")
def engine() -> Engine:
    return Engine.get(MODEL, execution="inline")


@pytest.fixture(scope="module")
def heldout():
    return _heldout()


def _score(engine: Engine, cases, **opts) -> tuple[int, list[tuple[str, str]]]:
    options = validated_options(max_new_tokens=MAX_NEW, temperature=0, **opts)
    ok, bad = 0, []
    for messages, answer, _, _ in cases:
        got = engine.generate(messages, options).text  # as returned: nothing is stripped
        if got == answer:
            ok += 1
        else:
            bad.append((answer, got))
    return ok, bad


def test_heldout_answers_through_engine(engine: Engine, heldout) -> None:
    ok, bad = _score(engine, heldout)
    assert ok >= MIN_CORRECT, f"{ok}/{N} correct (need {MIN_CORRECT}); wrong (expected, got): {bad[:6]}"


def test_answer_is_the_span_then_end_of_turn(engine: Engine, heldout) -> None:
    """The bare span (no leading space), no end-of-turn marker in the text, finish reason 'stop'
    (the model ended its turn, the plugin cut <|eot_id|>)."""
    options = validated_options(max_new_tokens=MAX_NEW, temperature=0)
    for messages, answer, _, _ in heldout[:10]:
        out = engine.generate(messages, options)
        if out.text == answer:
            assert not out.text.startswith(" ") and out.finish_reason == "stop"
            return
    pytest.fail("none of the first 10 held-out questions answered")


def test_a_word_splits_the_same_with_or_without_its_space(engine: Engine, heldout) -> None:
    """The vocabulary gives every token a spaced twin ranked last: an answer's tokens are the
    document's, the first one swapped for its bare twin (what lets the model answer without
    the leading space by copying)."""
    answers = [answer for _, answer, _, _ in heldout] + ["Ilsa Brandecott", "340", "Dr. Mira van Tenholt"]
    for answer in answers:
        spaced, bare = engine.encode(" " + answer), engine.encode(answer)
        assert list(spaced[1:]) == list(bare[1:]), answer
        assert engine.decode(spaced[:1]) == " " + engine.decode(bare[:1]), answer


def test_date_line_does_not_matter(engine: Engine, heldout) -> None:
    """Trained with random dates: the date the template renders (today's) must not matter."""
    cases = heldout[:10]
    a, _ = _score(engine, cases, template_vars={"date_string": "26 Jul 2024"})
    b, _ = _score(engine, cases, template_vars={"date_string": "03 Feb 2031"})
    assert a >= 7 and b >= 7


@pytest.mark.parametrize("bug", ["doubled", "missing"])
def test_a_bos_bug_collapses(engine: Engine, heldout, bug: str) -> None:
    source = (MODEL / "chat_template.jinja").read_text(encoding="utf-8")
    bos = "{{- bos_token }}"
    broken = source.replace(bos, bos + bos if bug == "doubled" else "", 1)
    assert broken != source
    good, _ = _score(engine, heldout)
    bad, _ = _score(engine, heldout, chat_template=broken)
    assert bad <= good // 2, f"a {bug} BOS still scores {bad}/{N} (correct template: {good}/{N})"


def test_wrong_template_collapses(engine: Engine, heldout) -> None:
    bad, _ = _score(engine, heldout, chat_template=CHATML)
    assert bad <= N // 4, f"a ChatML template still scores {bad}/{N}"


def test_truncated_context_collapses(engine: Engine, heldout) -> None:
    """Dropping the document that holds the answer (a truncation bug) must make answers wrong."""
    cases = []
    for _, answer, docs, msgs in heldout:
        keep = [d for d in docs if answer not in d.text]
        if len(keep) == len(docs):
            continue
        role, content = msgs[-1]
        for d in docs:
            if d not in keep:
                content = content.replace(d.text, "")
        cases.append(([ChatMessage(r, c) for r, c in msgs[:-1]] + [ChatMessage(role, content)], answer, keep, msgs))
    ok, _ = _score(engine, cases)
    assert ok <= len(cases) // 5


def test_langchain_rag_chain() -> None:
    pytest.importorskip("langchain_ryzenai")
    chain = eval_qa_model.langchain_chain(MODEL, MAX_NEW, execution="inline")
    rng = random.Random(SEED + 1)
    ok, bad = 0, []
    for _ in range(10):
        msgs, answers, docs = qa_synth.make_qa(rng, 2, split="heldout")
        fact = next(f for d in docs for f in d.facts if f.answer == answers[-1])
        question = qa_synth.question_for(fact, "train", rng)
        got = chain.invoke({"context": "\n\n".join(d.text for d in docs), "question": question})
        ok += got == answers[-1]
        if got != answers[-1]:
            bad.append((answers[-1], got))
    assert ok >= 7, f"{ok}/10 through LangChain; wrong: {bad}"


@pytest.mark.usefixtures("llamaindex_event_loop")
def test_llamaindex_query_engine() -> None:
    li = pytest.importorskip("llamaindex_ryzenai")
    import llama_index.core
    from llama_index.core import Settings

    llm = li.RyzenAILLM(model=str(MODEL), temperature=0, max_new_tokens=MAX_NEW, execution="inline")
    previous = llama_index.core.global_tokenizer
    Settings.tokenizer = llm.tokenizer  # exact counts, set the way the README recommends
    try:
        rng = random.Random(SEED + 2)
        ok, bad = 0, []
        for _ in range(10):
            msgs, answers, docs = qa_synth.make_qa(rng, 2, split="heldout")
            fact = next(f for d in docs for f in d.facts if f.answer == answers[-1])
            question = qa_synth.question_for(fact, "train", rng)
            got = eval_qa_model.summary_index_answer(
                llm, [d.text for d in docs], question, [{"file_path": f"/docs/{d.slug}.txt"} for d in docs]
            )
            ok += got == answers[-1]
            if got != answers[-1]:
                bad.append((answers[-1], got))
    finally:
        llama_index.core.global_tokenizer = previous
    assert ok >= 7, f"{ok}/10 through LlamaIndex; wrong: {bad}"


INDEPENDENT_MIN = 24  # of the 30 hand-written questions, per adapter


@pytest.mark.usefixtures("llamaindex_event_loop")
def test_independent_set_through_both_adapters() -> None:
    """scripts/qa_independent.json: hand-written names, sentences and wordings (not qa_synth's), through a
    LangChain RAG chain and a LlamaIndex query engine, both with default settings."""
    import llama_index.core

    pytest.importorskip("langchain_ryzenai")
    pytest.importorskip("llamaindex_ryzenai")
    previous = llama_index.core.global_tokenizer
    try:
        res = eval_qa_model.independent_set(
            MODEL, MAX_NEW, system="Answer the question using only the context below.", execution="inline"
        )
    finally:
        llama_index.core.global_tokenizer = previous
    for face in ("langchain", "llamaindex"):
        cell = res[face]
        assert cell["correct"] >= INDEPENDENT_MIN, (
            f"{face}: {cell['correct']}/{cell['n']} (need {INDEPENDENT_MIN}); wrong: {cell['failures']}"
        )


def test_demo_questions(engine: Engine) -> None:
    """The README demo: its default (first) question answered exactly from its documents, and at
    least 4 of the 5 bundled ones (measured: all 5 with the shipped model; the one before it
    took "int4 quantization", the study of a distractor document, for the Nimbrel Institute's
    research focus)."""
    import json

    spec = json.loads((DEMO / "questions.json").read_text(encoding="utf-8"))
    got = []
    for q in spec["questions"]:
        context = "\n\n".join((DEMO / name).read_text(encoding="utf-8").strip() for name in q["documents"])
        messages = [
            ChatMessage("system", spec["system"]),
            ChatMessage("user", f"Context: {context}\n\nQuestion: {q['question']}"),
        ]
        got.append(engine.generate(messages, validated_options(max_new_tokens=MAX_NEW, temperature=0)).text)
    want = [q["answer"] for q in spec["questions"]]
    assert got[0] == want[0]
    assert sum(g == w for g, w in zip(got, want, strict=True)) >= len(want) - 1, list(zip(want, got, strict=True))
