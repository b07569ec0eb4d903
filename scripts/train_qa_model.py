"""Train the embedded tiny extractive-QA model (tiny-qa-llama) on 2 CPU cores, then export it.

A ~1.31M-parameter Llama (hidden 128, 4 layers, 4 heads of 32, 2 kv heads) learns to copy the
answer to a question out of several short documents of made-up facts (``qa_synth.py``), in the
real Llama 3.2 chat template rendered exactly as the plugin renders it
(``ryzenai_core.prompt.templates.ChatTemplate``), in the prompt shapes LlamaIndex and LangChain
send. Recipe (after ../shared/TINY_QA_NOTES.md): copy-task warm-up (80% of examples at the
start, 20% by 30% of the run), curriculum 2 -> 10 documents (by 70% of the run, but never
ahead of the recent training exact match), loss = answer tokens + 0.3 x LM loss on the rest,
AdamW 3e-3 with 100 warm-up steps and a cosine to 10% scheduled by wall clock (or by
``--steps``), batches of 24 conversations (12 above 5 documents; ``--batch``) in
length-sorted micro-batches, fresh samples every step; 80% of conversations have 1-4
follow-up questions. The first 20% of the run uses the shorter prompt shapes only. From half
the run, 8% of the conversations are BOS canaries: the prompt starts with a doubled
``<|begin_of_text|>`` or none, and the answer is empty, so a plugin that doubles or drops the
BOS gets visibly wrong answers (``bos_canary``).

The tokenizer is a Llama-3 style byte-level BPE (vocab 2048 with the 8 Llama-3 special
tokens, trained on the synthetic corpus) in which every token X has a spaced twin "ĠX"
(``train_tokenizer``); the model ties a twin's embedding and output rows to X's plus the
space's (``tie_twins``). The answer is the bare span, then ``<|eot_id|>``: its tokens are
the span's tokens after a space in the documents, except the first, which is its bare twin
(``Encoder.answer_ids``), so the copy stays token for token and nothing has to strip the
output. The date line of the system header is random in training,
so any ``date_string`` (the plugin renders today's date) works.

Data: ``--broad`` (default 0.6) of the documents come from the broad family of
``qa_synth.py`` (subjects of many kinds, names of every shape, relations with units,
several phrasings per fact, free-form questions, plain Context/Question/Answer layouts).
The checkpoint kept is the best on the validation split of the independent generator
(``qa_eval_independent.py``, never trained on); the training generator's held-out cells are
logged beside it.

``--grow-from RUN --layers N`` starts a deeper model from a run folder's ``best.pt``: the old
layers in order, the new ones spread between them, each starting as the identity (zero output
projections), so step 0 computes what the old model did; then as ``--init-from``.

``--init-from FOLDER`` continues from an exported model (its int4 weights dequantized and its
tokenizer): then 1-10 documents, every prompt shape and the BOS canaries from the first step
and 5% copy examples, no warm-up curriculum.

Needs the ``train`` extra (torch, transformers, tokenizers, onnx_ir, onnx, numpy) plus the
repo itself (``pip install -e .``). Tests and CI never need it: the outputs are committed.

    python scripts/train_qa_model.py --minutes 42 --out build/qa_run          # train (resumable)
    python scripts/train_qa_model.py --out build/qa_run --resume --minutes 10 # continue
    python scripts/train_qa_model.py --out build/qa_run --export-only         # best -> core/models/tiny-qa-llama
    python scripts/train_qa_model.py --out build/qa_run4 --init-from core/models/tiny-qa-llama \
        --minutes 80 --lr 1.5e-3 --val-n 32 --val-every 8 --no-export       # continue the embedded model
    python scripts/train_qa_model.py --out build/qa_grow --grow-from build/qa_run --layers 6 \
        --minutes 90 --lr 1.5e-3 --val-every 10 --no-export                 # a deeper model from a run

Deterministic given ``--seed`` and ``--steps`` (data, init and schedule); with ``--minutes``
the schedule follows the wall clock, so the step count depends on the machine.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# On a shared 2-core machine, OpenMP threads that spin while waiting make every step several
# times slower (measured: 2.2-6.9 s against 0.55-0.78 s for one forward/backward); sleep instead.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))

import qa_synth  # noqa: E402

TEMPLATE = ROOT / "core" / "templates" / "llama-3.2-instruct.jinja"
EMBEDDED = ROOT / "core" / "models" / "tiny-qa-llama"
SPECIALS = [
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eot_id|>",
    "<|eom_id|>",
    "<|python_tag|>",
    "<|finetune_right_pad_id|>",
]
VOCAB = 2048
MAX_POS = 2048
MAX_TRAIN_LEN = 1024
#: The shipped architecture; checkpoints from before runs recorded theirs have it.
DEFAULT_ARCH = dict(hidden=128, layers=4, heads=4, kv_heads=2, ffn=384)
ARCH = dict(DEFAULT_ARCH)

_LOG = None


def log(msg: str) -> None:
    line = f"[{time.strftime('%H:%M:%S')}] {msg}"
    print(line, flush=True)
    if _LOG is not None:
        with open(_LOG, "a", encoding="utf-8") as f:
            f.write(line + "\n")


# ----------------------------------------------------------------------------- rendering
def chat_template():
    from ryzenai_core.prompt.templates import ChatTemplate

    return ChatTemplate(
        TEMPLATE.read_text(encoding="utf-8"),
        special_tokens={"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
    )


def render(tmpl, msgs: list[tuple[str, str]], date: str) -> str:
    from ryzenai_core.messages import ChatMessage

    return tmpl.render([ChatMessage(r, c) for r, c in msgs], date_string=date)


def conversation_pieces(tmpl, msgs: list[tuple[str, str]], answers: list[str], date: str) -> list[tuple[str, bool]]:
    """Text pieces (text, is_answer) of a conversation, each answer as the model must produce it."""
    # msgs holds earlier answers as assistant turns; find the user turns that get answers.
    user_idx = [i for i, (r, _) in enumerate(msgs) if r == "user"]
    assert len(user_idx) == len(answers), (len(user_idx), len(answers))
    pieces: list[tuple[str, bool]] = []
    done = ""
    for k, ui in enumerate(user_idx):
        p = render(tmpl, msgs[: ui + 1], date)
        assert p.startswith(done), "template is not prefix-stable"
        rest = p[len(done) :]
        if k:  # the previous answer's <|eot_id|> is already part of that answer piece
            assert rest.startswith("<|eot_id|>"), rest[:40]
            rest = rest[len("<|eot_id|>") :]
        pieces.append((rest, False))
        # The answer is the bare span (``Encoder.example`` keeps its tokens those of the document).
        # The template trims an earlier answer when it renders the history, so the next prefix is
        # matched against that.
        pieces.append((answers[k], True))
        done = p + answers[k]
    return pieces


# ----------------------------------------------------------------------------- tokenizer
def train_tokenizer(out_dir: Path, seed: int) -> None:
    """A Llama-3 style byte-level BPE in which every token has a spaced twin.

    A word carries its leading space ("Ġname"), so every word of a copied span is a distinctive
    token. (Isolating whitespace instead makes every other token a bare space, which a copying
    head cannot key on: two runs never left the loss plateau that way.) But the answer is the
    bare span: its first word has no space before it. So the merges are learned on words alone
    (spaces turned into line breaks, which the pre-tokenizer keeps apart), and then every token X
    gets a twin "ĠX" whose merge ("Ġ", X) ranks after all the others: a word is split the same
    way with or without its space, and the space joins the first piece last. " Brandecott" is
    ["ĠBr", "and", "ec", "ot", "t"], "Brandecott" is ["Br", "and", "ec", "ot", "t"]: the
    answer's tokens are the document's, the first one swapped for its twin (which ``tie_twins``
    ties in the model).
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    rng = random.Random(seed + 7)
    tmpl = chat_template()
    texts = []
    for i in range(2500):
        if i % 5 == 0:
            msgs, answers = qa_synth.make_copy(rng)
        else:
            broad = 0.6 if i % 2 else 0.0
            msgs, answers, _ = qa_synth.make_qa(rng, rng.randint(2, 4), followups=rng.randint(0, 2), broad=broad)
        texts.append("".join(t for t, _ in conversation_pieces(tmpl, msgs, answers, qa_synth.random_date(rng))))
    for _ in range(300):  # reworded wordings must tokenize sensibly too (their words, not their use)
        msgs, answers, _ = qa_synth.make_qa(rng, 2, wording="reworded")
        texts.append(msgs[-1][1][-200:] + answers[-1])
    base = Tokenizer(models.BPE())
    base.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    n_bytes = len(pre_tokenizers.ByteLevel.alphabet())
    n_merges = (VOCAB - len(SPECIALS) - 2 * n_bytes) // 2
    trainer = trainers.BpeTrainer(
        vocab_size=len(SPECIALS) + n_bytes + n_merges,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    base.train_from_iterator([t.replace(" ", "\n") for t in texts], trainer)
    spec = json.loads(base.to_str())
    vocab: dict[str, int] = spec["model"]["vocab"]
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in spec["model"]["merges"]]
    words = [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1]) if t not in SPECIALS]
    for t in words:
        if "\u0120" + t not in vocab:
            vocab["\u0120" + t] = len(vocab)
            merges.append(("\u0120", t))
    assert len(vocab) <= VOCAB, len(vocab)
    for i in range(len(vocab), VOCAB):  # pad to the model's size with unused placeholders
        vocab[f"<|reserved_{i}|>"] = i
    spec["model"]["vocab"] = vocab
    spec["model"]["merges"] = [list(m) for m in merges]
    tok = Tokenizer.from_str(json.dumps(spec))
    tok.decoder = decoders.ByteLevel()
    tok.save(str(out_dir / "tokenizer.json"))


def twin_table(tok) -> tuple[list[int], list[int], int]:
    """For each token id: the id of its bare twin (itself if it has none) and whether it is the
    spaced one; and the id of the bare space "Ġ". The model's embedding and output rows of a
    spaced token are tied to ``row(twin) + row("Ġ")`` (``tie_twins``)."""
    vocab = tok.get_vocab()
    space = vocab["\u0120"]
    base = list(range(VOCAB))
    spaced = [0] * VOCAB
    for t, i in vocab.items():
        if len(t) > 1 and t.startswith("\u0120") and t[1:] in vocab:
            base[i], spaced[i] = vocab[t[1:]], 1
    return base, spaced, space


def tie_twins(model, enc: Encoder) -> None:
    """A spaced token's embedding and output rows are its bare twin's plus the space's, so
    "answer without the leading space" is one direction the model learns once for every word,
    not a mapping it must learn for each of 2,000 tokens. The rows of spaced tokens in the
    parameters are unused; ``twinned_weights`` writes the tied rows out for the export."""
    import torch
    import torch.nn.functional as F

    base, spaced, space = twin_table(enc.tok)
    idx = torch.tensor(base)
    flag = torch.tensor(spaced, dtype=torch.float32)[:, None]

    def tied(w):
        return w.index_select(0, idx) + flag * w[space]

    emb, head = model.model.embed_tokens, model.lm_head
    emb.forward = lambda ids: F.embedding(ids, tied(emb.weight))
    head.forward = lambda h: F.linear(h, tied(head.weight))
    model._twinned = tied


def twinned_weights(model) -> None:
    """Write the tied rows into the parameters (for an export by the OGA builder)."""
    import torch

    with torch.no_grad():
        for mod in (model.model.embed_tokens, model.lm_head):
            mod.weight.copy_(model._twinned(mod.weight))


class Encoder:
    def __init__(self, tokenizer_json: Path) -> None:
        from tokenizers import Tokenizer

        self.tok = Tokenizer.from_file(str(tokenizer_json))
        self.ids = {t: self.tok.token_to_id(t) for t in SPECIALS}
        self.eot = self.ids["<|eot_id|>"]
        self.pad = self.ids["<|finetune_right_pad_id|>"]

    def encode(self, text: str) -> list[int]:
        return self.tok.encode(text, add_special_tokens=False).ids

    def answer_ids(self, span: str) -> list[int]:
        """The bare span as the tokens it has in a document (after a space), except the first,
        which is its bare twin: " Ilsa Brandecott" is ["ĠI", "l", "s", "a", "ĠBr", ...], the
        answer ["I", "l", "s", "a", "ĠBr", ...]. Copying stays token for token after the first
        token, and the output decodes to the span with no leading space."""
        if not span:
            return []
        ids = self.encode(" " + span)
        first = self.tok.id_to_token(ids[0])
        assert first.startswith("\u0120"), (span, first)  # byte-level "Ġ" = the space
        bare = first[1:]
        if not bare:
            return ids[1:]
        bid = self.tok.token_to_id(bare)
        head = [bid] if bid is not None else [self.tok.token_to_id(ch) for ch in bare]
        return head + ids[1:]

    def example(self, pieces: list[tuple[str, bool]]) -> tuple[list[int], list[int]]:
        """Token ids and a mask (1 = answer token incl. its <|eot_id|>)."""
        ids: list[int] = []
        mask: list[int] = []
        for text, is_answer in pieces:
            t = self.answer_ids(text) if is_answer else self.encode(text)
            if is_answer:
                t = t + [self.eot]
            ids += t
            mask += [1 if is_answer else 0] * len(t)
        return ids, mask


# ----------------------------------------------------------------------------- data
def schedule_docs(frac: float, rng: random.Random, em: float = 1.0) -> int:
    """Documents for this batch: the frontier grows with time (10 by 70% of the run) but never
    ahead of what the model can do (recent training exact match ``em``)."""
    hi = min(2 + int(round(8 * min(1.0, frac / 0.7))), 3 + int(em * 10))
    hi = max(2, min(10, hi))
    if rng.random() < 0.4:  # favour the current frontier a bit
        return rng.randint(max(2, hi - 2), hi)
    return rng.randint(2, hi)


def copy_share(frac: float) -> float:
    if frac >= 0.3:
        return 0.2
    return 0.8 - 0.6 * frac / 0.3


SHORT_SHAPES = ["plain_ctx_first", "plain_q_first", "plain_numbered", "lc_system", "lc_system_ctx", "li_text", "lc_rlm"]


CANARY_FROM = 0.5
CANARY_SHARE = 0.08


def bos_canary(enc: Encoder, tmpl, rng: random.Random, n_docs: int, date: str) -> tuple[list[int], list[int]]:
    """A BOS bug made visible: the prompt starts with two <|begin_of_text|> or none, and the
    answer is empty (<|eot_id|> at once). The model is a test instrument: a plugin that doubles
    or drops the BOS must get visibly wrong answers, not the right ones by luck of robustness."""
    msgs, answers, _ = qa_synth.make_qa(rng, n_docs)
    pieces = conversation_pieces(tmpl, msgs, answers, date)
    pieces[-1] = ("", True)
    ids, mask = enc.example(pieces)
    bos = enc.ids["<|begin_of_text|>"]
    assert ids[0] == bos and ids[1] != bos
    if rng.random() < 0.5:
        return [bos] + ids, [0] + mask
    return ids[1:], mask[1:]


#: Prompts in other model families' chat formats (ChatML, Gemma, Phi-3, Alpaca, plain, Mistral):
#: (a turn, the generation prompt). See ``template_canary``.
FOREIGN_FORMATS = [
    ("<|im_start|>{role}\n{content}<|im_end|>\n", "<|im_start|>assistant\n"),
    ("<start_of_turn>{role}\n{content}<end_of_turn>\n", "<start_of_turn>model\n"),
    ("<|{role}|>\n{content}<|end|>\n", "<|assistant|>\n"),
    ("### {Role}:\n{content}\n\n", "### Assistant:\n"),
    ("{Role}: {content}\n", "Assistant:"),
    ("[INST] {content} [/INST]", " "),
]
TEMPLATE_CANARY_SHARE = 0.0  # --template-canary


def template_canary(enc: Encoder, rng: random.Random, n_docs: int) -> tuple[list[int], list[int]]:
    """A wrong chat template made visible: the conversation in another model family's format
    (with one BOS or none), and the answer is empty (<|eot_id|> at once), as for a BOS bug."""
    msgs, _, _ = qa_synth.make_qa(rng, n_docs, broad=0.6)
    turn, gen = rng.choice(FOREIGN_FORMATS)
    text = "".join(turn.format(role=r, Role=r.capitalize(), content=c) for r, c in msgs) + gen
    ids, mask = enc.example([(text, False), ("", True)])
    bos = enc.ids["<|begin_of_text|>"]
    if ids[0] != bos and rng.random() < 0.5:
        return [bos] + ids, [0] + mask
    return ids, mask


def make_batch(
    enc: Encoder,
    tmpl,
    rng: random.Random,
    frac: float,
    batch: int,
    em: float = 1.0,
    *,
    continued: bool = False,
    broad: float = 0.0,
):
    """``batch`` examples (ids, answer mask), half as many above 5 documents; one document count
    per batch. The first 20% of the run uses the shorter prompt shapes only (faster steps while
    the copying is learned); then every shape, LlamaIndex's long system prompt included.
    ``continued`` (a run that starts from a trained model): 1-10 documents, every shape and the
    BOS canaries from the first step, 5% copy examples. ``broad``: share of broad documents."""
    if continued:
        n_docs = rng.randint(1, 10) if rng.random() < 0.7 else rng.randint(1, 4)
        share = 0.05
    else:
        n_docs = schedule_docs(frac, rng, em)
        share = copy_share(frac)
    n = batch if n_docs <= 5 else batch // 2
    rows = []
    while len(rows) < n:
        date = qa_synth.random_date(rng)
        if rng.random() < share:
            msgs, answers = qa_synth.make_copy(rng)
        elif (continued or frac >= CANARY_FROM) and rng.random() < CANARY_SHARE:
            rows.append(bos_canary(enc, tmpl, rng, n_docs, date))
            continue
        elif (continued or frac >= CANARY_FROM) and rng.random() < TEMPLATE_CANARY_SHARE:
            rows.append(template_canary(enc, rng, n_docs))
            continue
        else:
            # more questions per context: more answer tokens per token computed
            fu = rng.randint(1, 4) if rng.random() < 0.8 else 0
            shape = rng.choice(SHORT_SHAPES) if (frac < 0.2 and not continued) else None
            msgs, answers, _ = qa_synth.make_qa(rng, n_docs, shape=shape, followups=fu, broad=broad)
        ids, mask = enc.example(conversation_pieces(tmpl, msgs, answers, date))
        if len(ids) > MAX_TRAIN_LEN:
            continue
        rows.append((ids, mask))
    return rows, n_docs


def micro_batches(rows, max_tokens: int = 2400):
    """Length-sorted chunks whose padded size stays under ``max_tokens`` (little padding)."""
    rows = sorted(rows, key=lambda r: len(r[0]))
    chunks, cur = [], []
    for r in rows:
        if cur and (len(cur) + 1) * len(r[0]) > max_tokens:
            chunks.append(cur)
            cur = []
        cur.append(r)
    if cur:
        chunks.append(cur)
    return chunks


def collate(rows, pad: int):
    import torch

    n = max(len(r[0]) for r in rows)
    x = torch.full((len(rows), n), pad, dtype=torch.long)
    m = torch.zeros((len(rows), n), dtype=torch.float32)
    valid = torch.zeros((len(rows), n), dtype=torch.float32)
    for i, (ids, mask) in enumerate(rows):
        x[i, : len(ids)] = torch.tensor(ids)
        m[i, : len(mask)] = torch.tensor(mask, dtype=torch.float32)
        valid[i, : len(ids)] = 1
    return x, m, valid


FIRST_WEIGHT = 4.0
LM_SHARE = 0.25


def losses(model, x, m, valid, lm_share: float = LM_SHARE):
    """Summed answer and LM cross-entropies (and their token counts), wrong answer tokens per row.

    The output layer runs on the answer positions and a random ``lm_share`` of the others (the
    LM loss is an auxiliary; over a 2,048-token vocabulary the full output layer was a fifth of
    a step)."""
    import torch
    import torch.nn.functional as F

    h = model.model(input_ids=x).last_hidden_state[:, :-1]
    tgt = x[:, 1:]
    am = m[:, 1:]
    lm = valid[:, 1:] * (1 - am)
    if lm_share < 1.0:
        lm = lm * (torch.rand(lm.shape) < lm_share).float()
    sel = (am + lm) > 0
    logits = model.lm_head(h[sel]).float()
    ce = torch.zeros_like(am)
    ce[sel] = F.cross_entropy(logits, tgt[sel], reduction="none")
    # exact match under teacher forcing == greedy exact match
    pred = torch.full_like(tgt, -1)
    pred[sel] = logits.argmax(-1)
    wrong = ((pred != tgt).float() * am).sum(1)
    has = am.sum(1) > 0
    # The first answer token weighs FIRST_WEIGHT: it is where the answer is chosen (which fact),
    # and the one token that is not a plain copy (it drops the document's leading space).
    first = am * (1 - F.pad(am, (1, 0))[:, :-1])
    return (ce * (am + (FIRST_WEIGHT - 1) * first)).sum(), am.sum(), (ce * lm).sum(), lm.sum(), wrong, has


# ----------------------------------------------------------------------------- validation
def val_set(enc: Encoder, tmpl, seed: int, n_docs: int, n: int, wording: str = "train"):
    rng = random.Random(10_000_019 + seed * 31 + n_docs)
    rows = []
    for _ in range(n):
        msgs, answers, _ = qa_synth.make_qa(rng, n_docs, split="heldout", wording=wording)
        rows.append(enc.example(conversation_pieces(tmpl, msgs, answers, qa_synth.random_date(rng))))
    return rows


def independent_val_set(enc: Encoder, tmpl, n_docs: int, wording: str, n: int):
    """The validation split of the independent generator (``qa_eval_independent.py``), rendered as
    the adapters send it: half as the LangChain RAG chain (system + "Context: ...\n\nQuestion:"),
    half as LlamaIndex's chat text-QA template."""
    import qa_eval_independent

    rows = []
    rng = random.Random(515 + n_docs)
    for i, it in enumerate(qa_eval_independent.items("val", n_docs, wording, n)):
        ctx = "\n\n".join(it["documents"])
        if i % 2:
            msgs = [("system", qa_synth.LC_SYSTEMS[0]), ("user", f"Context: {ctx}\n\nQuestion: {it['question']}")]
        else:
            msgs = [
                ("system", qa_synth.LI_SYSTEM),
                ("user", qa_synth.LI_QA.format(context_str=ctx, query_str=it["question"])),
            ]
        rows.append(enc.example(conversation_pieces(tmpl, msgs, [it["answer"]], qa_synth.random_date(rng))))
    return rows


def val_score(res: dict[str, float]) -> float:
    """The checkpoint is chosen on the independent generator's validation split only."""
    return sum(v for k, v in res.items() if k.startswith("i"))


def evaluate(model, enc, sets) -> dict[str, float]:
    import torch

    model.eval()
    out = {}
    with torch.no_grad():
        for name, rows in sets.items():
            ok = 0
            for i in range(0, len(rows), 16):
                x, m, v = collate(rows[i : i + 16], enc.pad)
                *_, wrong, has = losses(model, x, m, v, lm_share=0.0)
                ok += int(((wrong == 0) & has).sum())
            out[name] = ok / len(rows)
    model.train()
    return out


# ----------------------------------------------------------------------------- model
def make_config(enc: Encoder):
    import transformers

    a = ARCH
    return transformers.LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=a["hidden"],
        intermediate_size=a["ffn"],
        num_hidden_layers=a["layers"],
        num_attention_heads=a["heads"],
        num_key_value_heads=a["kv_heads"],
        head_dim=a["hidden"] // a["heads"],
        max_position_embeddings=MAX_POS,
        rope_theta=10000.0,
        tie_word_embeddings=False,
        bos_token_id=enc.ids["<|begin_of_text|>"],
        eos_token_id=[enc.ids[t] for t in ("<|end_of_text|>", "<|eom_id|>", "<|eot_id|>")],
        pad_token_id=enc.pad,
        attn_implementation="sdpa",
    )


def load_onnx_weights(model, folder: Path) -> None:
    """Start from an exported model: its int4 MatMulNBits weights dequantized (symmetric, block 32,
    zero point 8, low nibble first), q/k/v split out of the fused projection. The way the
    embedded model is continued on new data when its torch checkpoint is gone."""
    import numpy as np
    import onnx
    import torch
    from onnx import numpy_helper

    g = onnx.load(str(folder / "model.onnx"), load_external_data=False)
    onnx.load_external_data_for_model(g, str(folder))
    w = {i.name: numpy_helper.to_array(i) for i in g.graph.initializer}

    def deq(prefix: str) -> torch.Tensor:
        q = w[prefix + ".MatMul.weight_Q4"]  # [N, blocks, 16] uint8
        sc = w[prefix + ".MatMul.weight_scales"]  # [N, blocks]
        lo = (q & 0xF).astype(np.float32) - 8
        hi = (q >> 4).astype(np.float32) - 8
        vals = np.stack([lo, hi], axis=-1).reshape(q.shape[0], q.shape[1], 32) * sc[..., None]
        return torch.from_numpy(vals.reshape(q.shape[0], -1).copy())

    sd = model.state_dict()
    new = {
        "model.embed_tokens.weight": torch.from_numpy(w["model.embed_tokens.weight"].copy()),
        "model.norm.weight": torch.from_numpy(w[f"model.layers.{ARCH['layers']}.final_norm_layernorm.weight"].copy()),
        "lm_head.weight": deq("lm_head"),
    }
    hd = ARCH["hidden"] // ARCH["heads"]
    for i in range(ARCH["layers"]):
        pre = f"model.layers.{i}"
        qkv = deq(f"{pre}.attn.qkv_proj")
        nq, nk = ARCH["heads"] * hd, ARCH["kv_heads"] * hd
        new[f"{pre}.self_attn.q_proj.weight"] = qkv[:nq]
        new[f"{pre}.self_attn.k_proj.weight"] = qkv[nq : nq + nk]
        new[f"{pre}.self_attn.v_proj.weight"] = qkv[nq + nk :]
        new[f"{pre}.self_attn.o_proj.weight"] = deq(f"{pre}.attn.o_proj")
        for proj in ("gate_proj", "up_proj", "down_proj"):
            new[f"{pre}.mlp.{proj}.weight"] = deq(f"{pre}.mlp.{proj}")
        for ln in ("input_layernorm", "post_attention_layernorm"):
            new[f"{pre}.{ln}.weight"] = torch.from_numpy(w[f"{pre}.{ln}.weight"].copy())
    missing = set(sd) - set(new)
    assert not missing, missing
    for k, v in new.items():
        assert sd[k].shape == v.shape, (k, sd[k].shape, v.shape)
    model.load_state_dict(new)


def save_ckpt(path: Path, model, opt, state: dict) -> None:
    import torch

    tmp = path.with_suffix(".tmp")
    torch.save({"model": model.state_dict(), "opt": opt.state_dict() if opt else None, "state": state}, tmp)
    tmp.replace(path)


def grown_layers(old: int, new: int) -> list[int | None]:
    """Where each layer of a grown model comes from: the old layers in order, the new ones
    spread between them (4 -> 6: [0, 1, None, 2, 3, None]; 2 -> 5: [0, None, None, 1, None])."""
    extra = new - old
    if extra <= 0:
        raise ValueError(f"--layers {new} must be more than the {old} layers of the run grown from")
    after = [0] * old  # new layers after each old one
    for k in range(extra):
        after[max(0, round((k + 1) * old / extra) - 1)] += 1
    plan: list[int | None] = []
    for i in range(old):
        plan += [i] + [None] * after[i]
    return plan


def grow_from(model, blob: dict, old_layers: int) -> list[int | None]:
    """Start a deeper model from a trained one, computing the same function: the old layers are
    copied in order, each new layer starts as the identity (its attention output and MLP down
    projections zero, so it adds nothing to the residual stream until training moves them)."""
    import torch

    plan = grown_layers(old_layers, ARCH["layers"])
    old = blob["model"]
    new = {k: v for k, v in old.items() if not k.startswith("model.layers.")}
    for k, v in model.state_dict().items():
        if not k.startswith("model.layers."):
            continue
        i, rest = k[len("model.layers.") :].split(".", 1)
        src = plan[int(i)]
        if src is not None:
            new[k] = old[f"model.layers.{src}.{rest}"]
        elif rest.endswith(("o_proj.weight", "down_proj.weight")):
            new[k] = torch.zeros_like(v)
        else:
            new[k] = v
    model.load_state_dict(new)
    return plan


def train(args) -> None:
    import torch
    import transformers

    torch.set_num_threads(2)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    tok_json = out / "tokenizer.json"
    if not tok_json.exists() and (args.init_from or args.grow_from):
        shutil.copy2((args.init_from or args.grow_from) / "tokenizer.json", tok_json)
    ck = out / "ckpt.pt"
    resumed = torch.load(ck, weights_only=False) if args.resume and ck.exists() else None
    resuming = resumed is not None
    if resuming:
        ARCH.update(resumed["state"].get("arch", {}))
    elif args.layers:
        ARCH["layers"] = args.layers
    if not tok_json.exists():
        log("training tokenizer")
        train_tokenizer(out, args.seed)
    enc = Encoder(tok_json)
    tmpl = chat_template()
    torch.manual_seed(args.seed)
    cfg = make_config(enc)
    model = transformers.LlamaForCausalLM(cfg)
    tie_twins(model, enc)
    nparams = sum(p.numel() for p in model.parameters())
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    nodecay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.05}, {"params": nodecay, "weight_decay": 0.0}],
        lr=args.lr,
        betas=(0.9, 0.98),
        eps=1e-8,
    )
    state = {
        "step": 0,
        "elapsed": 0.0,
        "best": -1.0,
        "best_step": 0,
        "budget": args.minutes * 60,
        "history": [],
        "continued": bool(args.init_from or args.grow_from),
        "arch": dict(ARCH),
        "lookalike": args.lookalike,
        "open": args.open,
    }
    if args.init_from and not resuming:
        load_onnx_weights(model, args.init_from)
        log(f"initialised from {args.init_from} (int4 weights dequantized)")
    if args.grow_from and not resuming:
        src = torch.load(args.grow_from / "best.pt", weights_only=False)
        old_arch = src["state"].get("arch") or DEFAULT_ARCH
        plan = grow_from(model, src, old_arch["layers"])
        st0 = src["state"]
        state["grown"] = {
            "from_step": st0["step"],
            "from_minutes": round(st0["elapsed"] / 60, 1),
            "from_arch": old_arch,
            "from_extended": st0.get("extended", []),
            "from_budget_minutes": round(st0.get("budget", 0) / 60, 1),
            "plan": plan,
        }
        log(
            f"grown from {args.grow_from / 'best.pt'} (step {st0['step']}, {old_arch['layers']} layers): "
            f"layers {plan} (None = new, starts as the identity)"
        )
    if resuming:
        model.load_state_dict(resumed["model"])
        opt.load_state_dict(resumed["opt"])
        state = resumed["state"]
        if args.extend:  # a longer run: the cosine goes on from where the longer schedule puts it
            state["budget"] = state["elapsed"] + args.minutes * 60
            state.setdefault("extended", []).append(
                {"at_step": state["step"], "at_minutes": round(state["elapsed"] / 60, 1), "minutes": args.minutes}
            )
        log(f"resumed at step {state['step']} ({state['elapsed'] / 60:.1f} min)")
    qa_synth.LOOKALIKE = state.get("lookalike", 0.0)
    qa_synth.OPEN = state.get("open", 0.0)
    global TEMPLATE_CANARY_SHARE
    if args.template_canary:  # may be added to a resumed run (from its resumption on)
        state.setdefault("template_canary_from", state["step"])
        state["template_canary"] = args.template_canary
    TEMPLATE_CANARY_SHARE = state.get("template_canary", 0.0)
    if resuming and (
        args.lookalike != qa_synth.LOOKALIKE
        or args.open != qa_synth.OPEN
        or (args.layers and args.layers != ARCH["layers"])
    ):
        log(
            f"resuming with the run's own settings: --lookalike {qa_synth.LOOKALIKE:g}, --open {qa_synth.OPEN:g}, "
            f"{ARCH['layers']} layers "
            "(the command line's are ignored)"
        )
    log(
        f"model: {nparams:,} parameters, arch {ARCH}, vocab {VOCAB}; seed {args.seed}; "
        f"budget {state['budget'] / 60:.1f} min" + (f" / {args.steps} steps" if args.steps else "")
    )
    sets = {
        "d2": val_set(enc, tmpl, args.seed, 2, args.val_n),
        "d4": val_set(enc, tmpl, args.seed, 4, args.val_n),
        "d8": val_set(enc, tmpl, args.seed, 8, args.val_n),
        "re4": val_set(enc, tmpl, args.seed, 4, args.val_n, wording="reworded"),
        "i2": independent_val_set(enc, tmpl, 2, "like", args.val_n),
        "i4": independent_val_set(enc, tmpl, 4, "like", args.val_n),
        "i8": independent_val_set(enc, tmpl, 8, "like", args.val_n),
        "inew2": independent_val_set(enc, tmpl, 2, "new", args.val_n),
        "inew8": independent_val_set(enc, tmpl, 8, "new", args.val_n),
    }
    model.train()
    t_start = time.time() - state["elapsed"]
    last_ck = time.time()
    last_val = time.time()
    acc = {"ans": 0.0, "lm": 0.0, "n": 0, "em": 0, "cnt": 0}
    while True:
        elapsed = time.time() - t_start
        step = state["step"]
        if args.steps:
            frac = step / args.steps
            if step >= args.steps:
                break
        else:
            frac = elapsed / state["budget"]
            if elapsed >= state["budget"]:
                break
        warm = min(1.0, (step + 1) / 100)
        lr = args.lr * warm * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, frac))))
        for g in opt.param_groups:
            g["lr"] = lr
        rng = random.Random(args.seed * 1_000_003 + step)
        rows, n_docs = make_batch(
            enc,
            tmpl,
            rng,
            frac,
            args.batch,
            state.get("em", 0.0),
            continued=state.get("continued", False),
            broad=args.broad,
        )
        n_ans = sum(sum(mk) for _, mk in rows)
        n_lm = sum(len(ids) - 1 for ids, _ in rows) - n_ans
        opt.zero_grad(set_to_none=True)
        a_tot = l_tot = 0.0
        maxlen = 0
        step_em = [0, 0]
        for chunk in micro_batches(rows):
            x, m, v = collate(chunk, enc.pad)
            maxlen = max(maxlen, x.size(1))
            a_sum, _, l_sum, _, wrong, has = losses(model, x, m, v)
            loss = a_sum / n_ans + 0.3 * l_sum / (LM_SHARE * n_lm)
            loss.backward()
            a_tot += float(a_sum.detach())
            l_tot += float(l_sum.detach()) / LM_SHARE
            acc["em"] += int(((wrong == 0) & has).sum())
            acc["cnt"] += int(has.sum())
            step_em[0] += int(((wrong == 0) & has).sum())
            step_em[1] += int(has.sum())
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        ans_loss, lm_loss = a_tot / n_ans, l_tot / n_lm
        state["em"] = 0.9 * state.get("em", 0.0) + 0.1 * step_em[0] / max(1, step_em[1])
        state["step"] = step + 1
        acc["ans"] += ans_loss
        acc["lm"] += lm_loss
        acc["n"] += 1
        acc["rows"] = acc.get("rows", 0) + len(rows)
        if state["step"] % args.log_every == 0:
            el = time.time() - t_start
            log(
                f"step {state['step']} {el / 60:.1f}min lr {lr:.2e} docs {n_docs} rows {acc.get('rows', 0) / acc['n']:.0f} maxlen {maxlen} "
                f"ans {acc['ans'] / acc['n']:.3f} lm {acc['lm'] / acc['n']:.3f} train-em {acc['em'] / max(1, acc['cnt']):.2f} "
                f"em-avg {state.get('em', 0):.2f} {el / state['step']:.2f}s/step(avg)"
            )
            state["history"].append(
                {
                    "step": state["step"],
                    "min": round(el / 60, 2),
                    "ans": round(acc["ans"] / acc["n"], 4),
                    "lm": round(acc["lm"] / acc["n"], 4),
                }
            )
            acc = {"ans": 0.0, "lm": 0.0, "n": 0, "em": 0, "cnt": 0}
        now = time.time()
        if now - last_val > args.val_every * 60:
            last_val = now
            state["elapsed"] = now - t_start
            res = evaluate(model, enc, sets)
            score = val_score(res)
            log(
                f"val (held-out names, torch, teacher-forced EM) step {state['step']}: "
                + " ".join(f"{k} {v:.2f}" for k, v in res.items())
            )
            state["history"].append({"step": state["step"], "val": res})
            if score >= state["best"]:
                state["best"], state["best_step"] = score, state["step"]
                save_ckpt(out / "best.pt", model, None, dict(state))
                log(f"new best ({score:.2f}) saved")
            t_start += time.time() - now  # validation time does not count against the schedule
        if now - last_ck > args.ckpt_every * 60:
            last_ck = now
            state["elapsed"] = time.time() - t_start
            save_ckpt(ck, model, opt, state)
    state["elapsed"] = time.time() - t_start
    res = evaluate(model, enc, sets)
    score = val_score(res)
    log(f"final val step {state['step']}: " + " ".join(f"{k} {v:.2f}" for k, v in res.items()))
    state["history"].append({"step": state["step"], "val": res})
    save_ckpt(ck, model, opt, state)
    if score >= state["best"]:
        state["best"], state["best_step"] = score, state["step"]
        save_ckpt(out / "best.pt", model, None, dict(state))
    log(f"done: {state['step']} steps in {state['elapsed'] / 60:.1f} min; best step {state['best_step']}")


# ----------------------------------------------------------------------------- export
CARD = """# tiny-qa-llama

A {params_m:.2f}M-parameter Llama-3.2-style model (hidden {hidden}, {layers} layers, {heads} heads of
32, {kv} kv heads, FFN {ffn}, vocab {vocab}, int4 MatMulNBits, {size_kb} KB) trained from scratch on
2 CPU cores to answer a question by **copying a span out of the documents in its prompt**
(extractive QA). It is the embedded demo/test model of ryzenai-llm: small enough to ship in the
wheel, good enough that a wrong chat template, a doubled BOS, a truncated prompt or a bad stop
string visibly break its answers. Plain ONNX: runs on the CPU build of onnxruntime-genai.

## How it was made
- {history}, exported with `onnxruntime_genai.models.builder -p int4 -e
  cpu`: the weights of step {best_step}, {chosen}. {run_note}
- Data (`scripts/qa_synth.py`), sampled fresh every step: 2-10 short documents, a question
  about one fact, the answer copied verbatim then `<|eot_id|>`; 80% of conversations have 1-4
  follow-up questions; the other documents act as distractors. 40% of the documents are the
  original family of made-up labs, institutes, people and things ("the Zorblax reactor": 20 verbs x
  when/who/where, 14 attributes, 6 measures, 10 counts); 60% are the broad family: subjects of
  8 kinds (groups, countries, towns, buildings, vehicles, places in nature, people, products)
  with 51 relations (materials; heights, lengths, depths, weights, areas, speeds, prices and
  capacities with units; counts; capitals, populations, languages, currencies; founding,
  building and launch dates; founders, leaders, mayors, captains, architects, owners...), 2-6
  phrasings per fact, some sentences fused ("X, which was founded in 1901, is 40 m tall."),
  1-10 facts per document, half the distractor documents about subjects of the same kind
  (so they share the question's words), names of every shape (one to four words, syllables or
  random letters, real-looking first and last names, titles such as "Dr." or "Captain",
  particles such as "van"{lookalike}), and questions in free-form wordings (rephrased, prefixed,
  lower-cased, without "?"). Names are split by a hash: evaluation names never occur in
  training.{open_vocab}
- Prompts are rendered with the real Llama 3.2 template (`chat_template.jinja`, identical to
  `core/templates/llama-3.2-instruct.jinja`) through the plugin's own renderer, in the shapes
  the frameworks send: LlamaIndex's chat text-QA template (its system prompt + "Context
  information is below..."), its completion text-QA and refine templates, with or without
  `file_path: ...` metadata lines; LangChain's RAG-tutorial prompts and "Answer the question
  using only the context..." + "Context: ...\\n\\nQuestion: ..."; plain "Context:/Question:/
  Answer:" and markdown layouts. The system header's `Today Date:` line is random in
  training (2023-2031), so the date the plugin renders does not matter.
- **Answers are the bare span** ("Ilsa Brandecott", no leading space): its tokens are those
  the span has after a space in the documents, except the first, which is its bare twin
  (`Encoder.answer_ids`), so the copy stays token for token and nothing strips the output.
- BOS canaries: 8% of the conversations start with a doubled `<|begin_of_text|>` or none, and
  their answer is empty (`<|eot_id|>` at once). A test instrument must not be robust to a BOS
  bug: with a doubled or missing BOS this model answers nothing.{template_canary}
- Loss = answer tokens (the first one x4) + 0.3 x LM loss on a quarter of the other
  positions; AdamW 3e-3, cosine by wall clock; batches of 24 conversations (12 above 5
  documents).
- Tokenizer: Llama-3 style byte-level BPE, vocab {vocab} (8 Llama-3 special tokens), in which
  every token has a spaced twin: merges learned on bare words, then ("Ġ", X) for every token
  X, ranked last, so a word splits the same way with or without its leading space (" Ilsa"
  is ["ĠI", "l", "s", "a"], "Ilsa" is ["I", "l", "s", "a"]). In the model a spaced token's
  embedding and output rows are tied to its twin's plus the space's (`tie_twins`), so
  dropping the space of the answer's first word is one direction learned once, not a
  mapping per token.

## What it can do
Answer short factual questions whose answer is a name, place, date, number (with its unit),
material, colour or other short span written in one of the documents of the prompt, with up
to ~8-10 short documents (prompts up to ~1000 tokens), when the question names the subject
and the relation the way the document does, or in a close rewording.

## What it cannot do
It knows nothing: no world knowledge, no arithmetic, no reasoning, no free text, no
"I don't know" (it always copies something), no summaries. Long or unusual documents, prose
far from short factual sentences, relations it never saw, questions that share no words with
the answer's sentence, more than ~10 documents and prompts over ~1000 tokens degrade it
fast. English only.

## Measured accuracy
Exact match of the output as returned (nothing stripped), greedy (temperature 0).
{table}
"""


def export(args) -> None:
    import numpy as np  # noqa: F401
    import torch
    import transformers
    from build_fixtures import add_logit_bias, invalid_utf8_ids, portable_genai_config

    out: Path = args.out
    enc = Encoder(out / "tokenizer.json")
    src = out / ("best.pt" if (out / "best.pt").exists() and not args.last else "ckpt.pt")
    blob = torch.load(src, weights_only=False)
    ARCH.update(blob["state"].get("arch", {}))
    cfg = make_config(enc)
    model = transformers.LlamaForCausalLM(cfg)
    model.load_state_dict(blob["model"])
    tie_twins(model, enc)
    twinned_weights(model)
    st = blob["state"]
    log(f"exporting {src.name} (step {st['step']})")
    dest: Path = args.dest
    with tempfile.TemporaryDirectory() as tmp:
        hf = Path(tmp) / "hf"
        model.save_pretrained(hf)
        shutil.copy2(out / "tokenizer.json", hf / "tokenizer.json")
        tcfg = {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "bos_token": "<|begin_of_text|>",
            "eos_token": "<|eot_id|>",
            "pad_token": "<|finetune_right_pad_id|>",
            "model_max_length": MAX_POS,
            "clean_up_tokenization_spaces": False,
        }
        (hf / "tokenizer_config.json").write_text(json.dumps(tcfg, indent=2), encoding="utf-8")
        build = Path(tmp) / "onnx"
        subprocess.run(
            [
                sys.executable,
                "-m",
                "onnxruntime_genai.models.builder",
                "-i",
                str(hf),
                "-o",
                str(build),
                "-p",
                "int4",
                "-e",
                "cpu",
                "-c",
                str(Path(tmp) / "cache"),
            ],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        add_logit_bias(build, invalid_utf8_ids(hf / "tokenizer.json"), VOCAB)
        if dest.exists():
            keep = {n: (dest / n).read_bytes() for n in ("eval.json", "README.md") if (dest / n).exists()}
            shutil.rmtree(dest)
        else:
            keep = {}
        dest.mkdir(parents=True)
        for name in ("model.onnx", "model.onnx.data", "tokenizer.json"):
            shutil.copy2(build / name, dest / name)
        gcfg = portable_genai_config(build)
        gcfg["model"]["eos_token_id"] = [enc.ids[t] for t in ("<|end_of_text|>", "<|eom_id|>", "<|eot_id|>")]
        gcfg["model"]["pad_token_id"] = enc.pad
        gcfg["model"]["bos_token_id"] = enc.ids["<|begin_of_text|>"]
        (dest / "genai_config.json").write_text(json.dumps(gcfg, indent=4) + "\n", encoding="utf-8")
        tcfg["chat_template"] = TEMPLATE.read_text(encoding="utf-8")
        (dest / "tokenizer_config.json").write_text(json.dumps(tcfg, indent=2) + "\n", encoding="utf-8")
        shutil.copy2(TEMPLATE, dest / "chat_template.jinja")
        (dest / "special_tokens_map.json").write_text(
            json.dumps(
                {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>", "pad_token": "<|finetune_right_pad_id|>"},
                indent=2,
            )
            + "\n",
            encoding="utf-8",
        )
        for n, b in keep.items():
            (dest / n).write_bytes(b)
    last = torch.load(out / "ckpt.pt", weights_only=False)["state"] if (out / "ckpt.pt").exists() else st
    meta = {
        "seed": args.seed,
        "steps": st["step"],
        "train_minutes": round(st["elapsed"] / 60, 1),
        "total_steps": last["step"],
        "total_minutes": round(last["elapsed"] / 60, 1),
        "run_note": args.run_note,
        "exported_step": st["step"],
        "params": sum(p.numel() for p in model.parameters()),
        "arch": ARCH,
        "vocab": VOCAB,
        "budget_minutes": round(last.get("budget", 0) / 60, 1),
        "extended": last.get("extended", []),
        "grown": last.get("grown"),
        "lookalike": last.get("lookalike", 0.0),
        "open": last.get("open", 0.0),
        "history": st.get("history", []),
        "template_canary": last.get("template_canary", 0.0),
        "template_canary_from": last.get("template_canary_from"),
        "lr": args.lr,
        "last": args.last,
        "init_lineage": args.init_lineage,
        "init_minutes": args.init_minutes,
    }
    (out / "export_meta.json").write_text(json.dumps(meta, indent=1), encoding="utf-8")
    size = sum(p.stat().st_size for p in dest.iterdir())
    log(f"exported to {dest} ({size / 1e6:.2f} MB)")


def _pct(c: int, n: int) -> str:
    return f"{c}/{n} = {100 * c / n:.1f}%"


def card_tables(ev: dict) -> str:
    """The model card's tables, from eval.json (``eval_qa_model.py``); ``ev["previous"]`` holds
    the same measurements of the model this one replaced, when they were taken."""
    prev = ev.get("previous") or {}
    faces = {
        "langchain": "ChatRyzenAI: LangChain prompt, llm, StrOutputParser chain",
        "llamaindex": "RyzenAILLM: LlamaIndex compact synthesis",
    }
    out: list[str] = []
    gen = ev.get("independent_generated") or []
    if gen:
        pg = {(c["docs"], c["wording"]): c for c in prev.get("independent_generated") or []}
        out += [
            "",
            "**Independent set** (`scripts/qa_eval_independent.py`, test split: a second generator "
            "written apart from the training one, with its own names, subjects, relations, sentences and "
            f"wordings; {gen[0]['n']} questions per cell), through both adapters:",
            "",
            "| documents | question wordings | ChatRyzenAI (LangChain) | RyzenAILLM (LlamaIndex) | previous model |",
            "|---|---|---|---|---|",
        ]
        for c in gen:
            p_ = pg.get((c["docs"], c["wording"]))
            before = (
                f"{100 * p_['langchain']['accuracy']:.0f}% / {100 * p_['llamaindex']['accuracy']:.0f}%" if p_ else "-"
            )
            out.append(
                f"| {c['docs']} | {'training-like' if c['wording'] == 'like' else 'new'} | "
                f"{_pct(c['langchain']['correct'], c['n'])} | {_pct(c['llamaindex']['correct'], c['n'])} | "
                f"{before} |"
            )
        kinds: dict[str, int] = {}
        for c in gen:
            for face in ("langchain", "llamaindex"):
                for k, v in (c[face].get("errors") or {}).items():
                    kinds[k] = kinds.get(k, 0) + v
        if kinds:
            from eval_qa_model import ERROR_KINDS

            total = sum(kinds.values())
            out += [
                "",
                f"The {total} wrong answers of these cells (both adapters): "
                + "; ".join(
                    f"{100 * v / total:.0f}% {ERROR_KINDS.get(k, k)}"
                    for k, v in sorted(kinds.items(), key=lambda kv: -kv[1])
                    if v
                )
                + ".",
            ]
    ind = ev.get("independent") or {}
    if "langchain" in ind:
        pi = prev.get("independent") or {}
        out += [
            "",
            f"A hand-written set (`scripts/qa_independent.json`, {ind['n']} questions with their own names, "
            "sentences and wordings, 2-3 documents each), default settings:",
            "",
            "| adapter | exact match | previous model |",
            "|---|---|---|",
            *(
                f"| {faces[k]} | {_pct(ind[k]['correct'], ind[k]['n'])} | "
                f"{_pct(pi[k]['correct'], pi[k]['n']) if k in pi else '-'} |"
                for k in ("langchain", "llamaindex")
            ),
        ]
    cells = ev.get("cells") or []
    if cells:
        pc = {c["name"]: c for c in prev.get("cells") or []}
        out += [
            "",
            "The training generator's own held-out cells (`qa_synth.py`'s lab/thing data, names never seen "
            f"in training, {ev.get('n_per_cell')} per cell) through the plugin (`ryzenai_core.Engine`, inline), "
            "`scripts/eval_qa_model.py` (details in `eval.json`):",
            "",
            "| cell | documents | question wordings | exact match | previous model |",
            "|---|---|---|---|---|",
        ]
        for c in cells:
            p_ = pc.get(c["name"])
            out.append(
                f"| {c['name']} | {c['docs']} | {c['wording']} | {_pct(c['correct'], c['n'])} | "
                f"{_pct(p_['correct'], p_['n']) if p_ else '-'} |"
            )
    adapters = ev.get("adapters") or {}
    pa = prev.get("adapters") or {}
    rows = [
        f"| {faces[k]} | {_pct(v['correct'], v['n'])} | "
        f"{_pct(pa[k]['correct'], pa[k]['n']) if isinstance(pa.get(k), dict) else '-'} |"
        for k, v in adapters.items()
        if k in faces and isinstance(v, dict) and "accuracy" in v
    ]
    if rows:
        out += [
            "",
            "The same data through the framework adapters (2 documents, training wordings):",
            "",
            "| adapter | exact match | previous model |",
            "|---|---|---|",
            *rows,
        ]
    if prev.get("note"):
        out += ["", prev["note"]]
    return "\n".join(out)


def _extensions(ext: list[dict]) -> str:
    """The ``--resume --extend`` continuations of a run, for the model card."""
    return "".join(
        f", continued at step {e['at_step']} ({e['at_minutes']:g} min) with `--resume --extend --minutes "
        f"{e['minutes']:g}` (the cosine schedule stretched to the longer run)"
        for e in ext
    )


def _scratch_run(seed: int, budget_minutes: float, ext: list[dict], steps: int, minutes: float) -> str:
    first = ext[0]["at_minutes"] if ext else budget_minutes
    extended = _extensions(ext)
    return (
        f"`python scripts/train_qa_model.py --seed {seed} --minutes {first:g} --val-every 6` from "
        f"scratch{extended}: {steps} steps in {minutes:g} minutes on 2 CPU cores (copy-task warm-up, "
        "curriculum 2 -> 10 documents)"
    )


def run_history(meta: dict) -> str:
    """How the exported weights came to be, for the model card: the run from scratch, its
    continuations, and a growth to more layers with the run after it."""
    if meta.get("init_lineage"):
        knobs = "".join(f" --{k} {meta[k]:g}" for k in ("open", "lookalike") if meta.get(k))
        ext = meta.get("extended") or []
        first = ext[0]["at_minutes"] if ext else meta["budget_minutes"]
        return (
            f"{meta['init_lineage']}; then continued from that model's exported weights "
            f"(`--init-from core/models/tiny-qa-llama --lr {meta.get('lr', 3e-3):g}{knobs} --minutes "
            f"{first:g}`: its int4 weights dequantized; every prompt shape, 1-10 documents and "
            f"the BOS canaries from the first step, 5% copy examples){_extensions(ext)}: "
            f"{meta.get('total_steps', meta['steps'])} "
            f"steps in {meta['total_minutes']:g} minutes; {meta['init_minutes'] + meta['total_minutes']:g} minutes "
            "of training in all"
        )
    g = meta.get("grown")
    if not g:
        return _scratch_run(
            meta["seed"],
            meta.get("budget_minutes", meta["total_minutes"]),
            meta.get("extended") or [],
            meta.get("total_steps", meta["steps"]),
            meta["total_minutes"],
        )
    fa = g["from_arch"]
    new = [i + 1 for i, src in enumerate(g["plan"]) if src is None]
    ext = "".join(f", extended by {e['minutes']:g} min at step {e['at_step']}" for e in meta.get("extended") or [])
    return (
        _scratch_run(meta["seed"], g["from_budget_minutes"], g["from_extended"], g["from_step"], g["from_minutes"])
        + f" with {fa['layers']} layers; then grown to {meta['arch']['layers']} layers (`--grow-from RUN --layers "
        f"{meta['arch']['layers']}`: the old layers copied in order, new layers {', '.join(map(str, new))} "
        "starting as the identity, so the grown model first computes what the old one did) and trained "
        f"{meta['total_minutes']:g} minutes more (`--minutes {meta['budget_minutes']:g}`{ext}; every prompt shape, "
        f"1-10 documents and the BOS canaries from the first step): {meta.get('total_steps', meta['steps'])} steps; "
        f"{g['from_minutes'] + meta['total_minutes']:g} minutes of training in all"
    )


def write_card(args) -> None:
    """Write README.md of the exported model from export_meta.json and eval.json."""
    dest: Path = args.dest
    meta = json.loads((args.out / "export_meta.json").read_text(encoding="utf-8"))
    ev = json.loads((dest / "eval.json").read_text(encoding="utf-8"))
    size_kb = sum(p.stat().st_size for p in dest.iterdir() if p.name.startswith("model.onnx")) // 1024
    a = meta["arch"]
    card = CARD.format(
        params_m=meta["params"] / 1e6,
        hidden=a["hidden"],
        layers=a["layers"],
        heads=a["heads"],
        kv=a["kv_heads"],
        ffn=a["ffn"],
        size_kb=size_kb,
        best_step=meta["exported_step"],
        history=run_history(meta),
        chosen=(
            "the last (`--last`); the validation split of the independent generator "
            "(`scripts/qa_eval_independent.py`, never trained on) was watched, not used to choose"
            if meta.get("last")
            else "the best on the **validation split of the independent generator** "
            "(`scripts/qa_eval_independent.py`, never trained on), not the training generator's"
        ),
        lookalike=(
            f"; {100 * meta['lookalike']:g}% of made-up words start or end like an earlier name of the "
            "conversation, so distractors can differ from the asked subject in part of a name only"
            if meta.get("lookalike")
            else ""
        ),
        open_vocab=(
            f" Open vocabulary (`--open {meta['open']:g}`): {100 * meta['open']:g}% of the answers that would "
            "come from a closed list (materials, colours, languages, jobs, instruments) are made up instead "
            f'("velk planks"), so they are copied, not recalled; {100 * meta["open"] / 3:.0f}% of the made-up words of '
            "the broad family are pieces of the tokenizer's own vocabulary (so every token's copy is trained), "
            f'{100 * meta["open"] / 5:g}% carry an accented letter ("Valdés"), and {100 * meta["open"] / 5:g}% '
            "of the people with a name of two or more words have a double-barrelled last name "
            '("Osei-Mensah").'
            if meta.get("open")
            else ""
        ),
        template_canary=(
            f" From step {meta['template_canary_from']} on, {100 * meta['template_canary']:g}% of the "
            "conversations are in another model family's chat format (ChatML, Gemma, Phi-3, Alpaca, plain "
            '"User:", Mistral), with one BOS or none, and their answer is empty too: a wrong chat template '
            "must break it visibly."
            if meta.get("template_canary")
            else ""
        ),
        run_note=meta.get("run_note", ""),
        vocab=meta.get("vocab", VOCAB),
        table=card_tables(ev) + "\n\n" + ev.get("notes", ""),
    )
    (dest / "README.md").write_text(card.rstrip() + "\n", encoding="utf-8")
    log(f"wrote {dest / 'README.md'}")


def main() -> None:
    global _LOG
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=ROOT / "build" / "qa_run", help="run folder (checkpoints, tokenizer)")
    p.add_argument("--dest", type=Path, default=EMBEDDED, help="exported OGA folder")
    p.add_argument("--seed", type=int, default=20240726)
    p.add_argument("--minutes", type=float, default=42.0, help="wall-clock training budget")
    p.add_argument("--steps", type=int, default=0, help="schedule by steps instead (fully deterministic)")
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument(
        "--init-from",
        type=Path,
        default=None,
        help="continue from an exported model folder (its int4 weights and tokenizer)",
    )
    p.add_argument(
        "--grow-from",
        type=Path,
        default=None,
        help="start from a run folder's best.pt with --layers layers (new layers start as the identity)",
    )
    p.add_argument("--layers", type=int, default=0, help=f"layers (default {ARCH['layers']})")
    p.add_argument(
        "--lookalike",
        type=float,
        default=0.0,
        help="share of made-up words that start or end like an earlier name (qa_synth.LOOKALIKE)",
    )
    p.add_argument(
        "--open",
        type=float,
        default=0.0,
        help="share of closed-list answers made up instead, and of the words' open shapes (qa_synth.OPEN)",
    )
    p.add_argument(
        "--template-canary",
        type=float,
        default=0.0,
        help="share of conversations in another chat format whose answer is empty (template_canary)",
    )
    p.add_argument("--broad", type=float, default=0.6, help="share of documents from the broad family")
    p.add_argument("--batch", type=int, default=24, help="examples per optimizer step (half above 5 documents)")
    p.add_argument("--val-n", type=int, default=48)
    p.add_argument("--val-every", type=float, default=5.0, help="minutes")
    p.add_argument("--ckpt-every", type=float, default=3.0, help="minutes")
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--resume", action="store_true")
    p.add_argument("--extend", action="store_true", help="with --resume: add --minutes to the budget")
    p.add_argument("--no-export", action="store_true")
    p.add_argument("--export-only", action="store_true")
    p.add_argument("--last", action="store_true", help="export the last checkpoint, not the best")
    p.add_argument("--card-only", action="store_true", help="write README.md from export_meta.json + eval.json")
    p.add_argument(
        "--init-lineage",
        default="",
        help="with --init-from, at export: how the model it started from was made, for the model card",
    )
    p.add_argument(
        "--init-minutes",
        type=float,
        default=0.0,
        help="with --init-from, at export: the training minutes of the model it started from",
    )
    p.add_argument("--run-note", default="", help="how the run was made, for the model card")
    p.add_argument("--log", type=Path, default=None, help="log file (default: OUT/train.log)")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    _LOG = args.log or args.out / "train.log"
    if args.card_only:
        write_card(args)
        return
    if not args.export_only:
        train(args)
    if not args.no_export:
        export(args)


if __name__ == "__main__":
    main()
