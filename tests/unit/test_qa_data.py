"""The QA data generators of the embedded model (scripts/qa_synth.py trains it,
scripts/qa_eval_independent.py evaluates it): the evaluation one must stay independent of the
training one, and every question must have its answer written verbatim in the documents."""

from __future__ import annotations

import random
import re
import sys

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
qa_synth = pytest.importorskip("qa_synth")
qa_eval_independent = pytest.importorskip("qa_eval_independent")


def _shape(text: str) -> str:
    return re.sub(r"\{\w+\}", "{}", text).lower().rstrip("?.")


def _training_questions() -> set[str]:
    """Every question wording the training generator asks, its rewordings (``_rephrase``) included."""
    qs = [q for r in qa_synth.REL.values() for q in r.train_q] + [
        q for _, _, qq in qa_synth.BROAD_RELS.values() for q in qq
    ]
    out = set()
    for q in qs:
        q = q.replace("{Sc}", "SUBJ").replace("{S}", "SUBJ")
        out.add(_shape(q.replace("SUBJ", "{}")))
        for pat, rewrites in qa_synth.REPHRASE:
            m = re.match(pat, q)
            if m:
                g = list(m.groups())
                kw = {f"{i}C": x for i, x in enumerate(g)}
                out |= {_shape(r.format(*g, **kw).replace("SUBJ", "{}")) for r in rewrites}
    return out


def test_new_wordings_are_never_asked_in_training() -> None:
    new = [q for *_, qs in qa_eval_independent.REL.values() for q in qs]
    assert new and not {_shape(q) for q in new} & _training_questions()


def test_independent_set_has_its_own_sentences_and_names() -> None:
    facts = [f for _, fs, _, _ in qa_eval_independent.REL.values() for f in fs]
    training = {_shape(f) for r in qa_synth.REL.values() for f in r.facts}
    training |= {_shape(f) for _, fs, _ in qa_synth.BROAD_RELS.values() for f in fs}
    # the plainest statements ("{} was founded by {}.") are the obvious ones in both; most are not shared
    assert len({_shape(f) for f in facts} & training) <= len(facts) // 2
    training_names = set(qa_synth.REAL_FIRST) | set(qa_synth.REAL_LAST)
    assert not (set(qa_eval_independent.FIRST) | set(qa_eval_independent.LAST)) & training_names
    assert not set(qa_eval_independent.MATERIALS) & set(qa_synth.MATERIALS)


@pytest.mark.parametrize("wording", ["like", "new"])
def test_independent_items_have_one_verbatim_answer(wording: str) -> None:
    for n_docs in (2, 4, 8):
        for it in qa_eval_independent.items("val", n_docs, wording, 25):
            assert len(it["documents"]) == n_docs
            assert sum(it["answer"] in d for d in it["documents"]) >= 1, it
            assert it["question"] and it["answer"] == it["answer"].strip()


def test_splits_differ() -> None:
    val = qa_eval_independent.items("val", 2, "like", 20)
    test = qa_eval_independent.items("test", 2, "like", 20)
    assert not {i["question"] for i in val} & {i["question"] for i in test}


def test_training_answers_are_in_the_documents() -> None:
    rng = random.Random(5)
    for _ in range(300):
        n = rng.randint(1, 10)
        _, answers, docs = qa_synth.make_qa(rng, n, broad=0.6, followups=rng.randint(0, 3))
        assert len(docs) == n
        for a in answers:
            assert a and a == a.strip() and any(a in d.text for d in docs), a


def test_broad_zero_is_the_original_data() -> None:
    """The held-out cells of the original data stay comparable: broad=0 samples exactly as before."""
    a = qa_synth.make_qa(random.Random(11), 4, split="heldout")
    b = qa_synth.make_qa(random.Random(11), 4, split="heldout", broad=0.0)
    assert a[0] == b[0] and a[1] == b[1]


def test_fused_sentences_keep_an_answer_that_ends_with_a_full_stop() -> None:
    """Two facts joined into one sentence lose one full stop, not the one of "Waha Inc."."""
    out = qa_synth.fuse(["{Sc} works for Waha Inc..", "{Sc} is a carpenter."], _FuseAlways())
    assert out and "Waha Inc." in out[0].format(S="X", Sc="X")


class _FuseAlways(random.Random):
    def random(self) -> float:  # every choice: fuse, "and"
        return 0.0


def _shared_share(k: int) -> float:
    """Share of made-up words of a broad conversation that start or end like an earlier one (k letters)."""
    rng = random.Random(9)
    shared = total = 0
    for _ in range(200):
        names = qa_synth.BroadNames(rng, "train")
        words = [names.word().lower() for _ in range(12)]
        for i, w in enumerate(words[1:], 1):
            total += 1
            shared += any(w[:k] == v[:k] or w[-k:] == v[-k:] for v in words[:i])
    return shared / total


def test_broad_names_include_lookalikes_of_earlier_names(monkeypatch: pytest.MonkeyPatch) -> None:
    """Distractors whose names differ from the asked one only in part: many more made-up words
    of a broad conversation start or end like an earlier one than chance gives."""
    monkeypatch.setattr(qa_synth, "LOOKALIKE", 0.3)
    with_lookalikes = _shared_share(3)
    monkeypatch.setattr(qa_synth, "LOOKALIKE", 0.0)
    by_chance = _shared_share(3)
    assert with_lookalikes > by_chance + 0.1, (with_lookalikes, by_chance)


def test_without_lookalikes_broad_names_draw_as_before() -> None:
    """LOOKALIKE = 0 (the recipe of the shipped model) takes no extra random draws."""
    assert qa_synth.LOOKALIKE == 0.0
    broad, plain = qa_synth.BroadNames(random.Random(4), "train"), qa_synth.Names(random.Random(4), "train")
    assert [broad.word() for _ in range(50)] == [plain.word() for _ in range(50)]


def _closed_list_answers(n: int = 300) -> tuple[int, int]:
    """(answers of closed-list relations, how many of them are on the closed lists) in broad data
    (languages aside: half of them are made up, "Velkish", with or without OPEN)."""
    lists = set(qa_synth.MATERIALS) | set(qa_synth.COLORS) | set(qa_synth.JOBS) | set(qa_synth.INSTRUMENTS)
    closed = {
        rel for rel, (kind, _, _) in qa_synth.BROAD_RELS.items() if kind in ("colour", "material", "job", "instrument")
    }
    rng = random.Random(11)
    asked = listed = 0
    for _ in range(n):
        *_, docs = qa_synth.make_qa(rng, 3, broad=1.0)
        for fact in (f for d in docs for f in d.facts if f.rel.removeprefix("broad:") in closed):
            asked += 1
            listed += fact.answer in lists or any(p in lists for p in fact.answer.split(" and "))
    return asked, listed


def test_open_vocabulary_makes_closed_list_answers_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """OPEN: materials, colours, languages... are often made-up words (copied, not recalled), and
    the made-up words include accents and the tokenizer's own pieces; every answer stays in its document."""
    asked, listed = _closed_list_answers()
    assert asked > 100 and listed == asked  # without OPEN every such answer comes from a list
    monkeypatch.setattr(qa_synth, "OPEN", 0.5)
    asked, listed = _closed_list_answers()
    assert 0.35 < 1 - listed / asked < 0.65, (asked, listed)
    names = qa_synth.BroadNames(random.Random(5), "train")
    words = [names.word() for _ in range(3000)]
    assert sum(any(c in "áàâäéèêëíîóôöøúüûñç" for c in w.lower()) for w in words) > 100
    assert all(qa_synth.is_heldout_name(w) is False for w in words if w.isascii())
    rng = random.Random(3)
    for _ in range(100):
        msgs, answers, docs = qa_synth.make_qa(rng, 4, broad=1.0, followups=2)
        text = "\n".join(d.text for d in docs)
        assert all(a in text for a in answers)


def test_without_open_vocabulary_broad_data_draws_as_before() -> None:
    """OPEN = 0 takes no extra random draws: the data of LOOKALIKE and OPEN at 0 is unchanged."""
    assert qa_synth.OPEN == 0.0
    broad, plain = qa_synth.BroadNames(random.Random(4), "train"), qa_synth.Names(random.Random(4), "train")
    assert [broad.word() for _ in range(50)] == [plain.word() for _ in range(50)]
