"""Train the embedded tiny extractive-QA model (tiny-qa-llama) on 2 CPU cores, then export it.

A ~1.05M-parameter Llama (hidden 128, 4 layers, 4 heads of 32, 2 kv heads) learns to copy the
answer to a question out of several short documents of made-up facts (``qa_synth.py``), in the
real Llama 3.2 chat template rendered exactly as the plugin renders it
(``ryzenai_core.chat_template.ChatTemplate``), in the prompt shapes LlamaIndex and LangChain
send. Recipe (after ../shared/TINY_QA_NOTES.md): copy-task warm-up (80% of examples at the
start, 20% by 30% of the run), curriculum 2 -> 10 documents (by 70% of the run, but never
ahead of the recent training exact match), loss = answer tokens + 0.3 x LM loss on the rest,
AdamW 3e-3 with 100 warm-up steps and a cosine to 10% scheduled by wall clock (or by
``--steps``), batches of 24 conversations (12 above 5 documents; ``--batch``) in
length-sorted micro-batches, fresh samples every step; 60% of conversations have 1-3
follow-up questions. The first 20% of the run uses the shorter prompt shapes only. From half
the run, 8% of the conversations are BOS canaries: the prompt starts with a doubled
``<|begin_of_text|>`` or none, and the answer is empty, so a plugin that doubles or drops the
BOS gets visibly wrong answers (``bos_canary``).

The tokenizer is a Llama-3 style byte-level BPE (vocab 1024 with the 8 Llama-3 special
tokens, trained on the synthetic corpus). The answer is trained as " " + span and ends with
``<|eot_id|>``: a name then has the same tokens in the answer as after a space in the
documents (callers strip the leading space). The date line of the system header is random in
training, so any ``date_string`` (the plugin renders today's date) works.

Needs the ``train`` extra (torch, transformers, tokenizers, onnx_ir, onnx, numpy) plus the
repo itself (``pip install -e .``). Tests and CI never need it: the outputs are committed.

    python scripts/train_qa_model.py --minutes 42 --out build/qa_run          # train (resumable)
    python scripts/train_qa_model.py --out build/qa_run --resume --minutes 10 # continue
    python scripts/train_qa_model.py --out build/qa_run --export-only         # best -> core/models/tiny-qa-llama

Deterministic given ``--seed`` and ``--steps`` (data, init and schedule); with ``--minutes``
the schedule follows the wall clock, so the step count depends on the machine.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))

import qa_synth  # noqa: E402

TEMPLATE = ROOT / "core" / "templates" / "llama-3.2-instruct.jinja"
EMBEDDED = ROOT / "core" / "models" / "tiny-qa-llama"
SPECIALS = [
    "<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
    "<|eom_id|>", "<|python_tag|>", "<|finetune_right_pad_id|>",
]
VOCAB = 1024
MAX_POS = 2048
MAX_TRAIN_LEN = 1024
ARCH = dict(hidden=128, layers=4, heads=4, kv_heads=2, ffn=384)

_LOG = None


def log(msg: str) -> None:
    line = f"[{time.strftime('%H:%M:%S')}] {msg}"
    print(line, flush=True)
    if _LOG is not None:
        with open(_LOG, "a", encoding="utf-8") as f:
            f.write(line + "\n")


# ----------------------------------------------------------------------------- rendering
def chat_template():
    from ryzenai_core.chat_template import ChatTemplate

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
        rest = p[len(done):]
        if k:  # the previous answer's <|eot_id|> is already part of that answer piece
            assert rest.startswith("<|eot_id|>"), rest[:40]
            rest = rest[len("<|eot_id|>"):]
        pieces.append((rest, False))
        # Trained as " " + span (same tokens as in the document; callers strip). The template trims
        # an earlier answer when it renders the history, so the next prefix is matched against that.
        pieces.append((" " + answers[k], True))
        done = p + answers[k]
    return pieces


# ----------------------------------------------------------------------------- tokenizer
def train_tokenizer(out_dir: Path, seed: int) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    rng = random.Random(seed + 7)
    tmpl = chat_template()
    texts = []
    for i in range(2500):
        if i % 5 == 0:
            msgs, answers = qa_synth.make_copy(rng)
        else:
            msgs, answers, _ = qa_synth.make_qa(rng, rng.randint(2, 4), followups=rng.randint(0, 2))
        texts.append("".join(t for t, _ in conversation_pieces(tmpl, msgs, answers, qa_synth.random_date(rng))))
    for _ in range(300):  # reworded wordings must tokenize sensibly too (their words, not their use)
        msgs, answers, _ = qa_synth.make_qa(rng, 2, wording="reworded")
        texts.append(msgs[-1][1][-200:] + answers[-1])
    tok = Tokenizer(models.BPE())
    # Llama-3 style byte-level BPE: a word carries its leading space ("Ġname"), so every word of a
    # copied span is a distinctive token and the answer (" " + span) has the same tokens as the
    # span in the document. (Isolating whitespace instead makes every other token a bare space,
    # which a copying head cannot key on: two runs never left the loss plateau that way.)
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer)
    tok.save(str(out_dir / "tokenizer.json"))


class Encoder:
    def __init__(self, tokenizer_json: Path) -> None:
        from tokenizers import Tokenizer

        self.tok = Tokenizer.from_file(str(tokenizer_json))
        self.ids = {t: self.tok.token_to_id(t) for t in SPECIALS}
        self.eot = self.ids["<|eot_id|>"]
        self.pad = self.ids["<|finetune_right_pad_id|>"]

    def encode(self, text: str) -> list[int]:
        return self.tok.encode(text, add_special_tokens=False).ids

    def example(self, pieces: list[tuple[str, bool]]) -> tuple[list[int], list[int]]:
        """Token ids and a mask (1 = answer token incl. its <|eot_id|>)."""
        ids: list[int] = []
        mask: list[int] = []
        for text, is_answer in pieces:
            t = self.encode(text)
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


SHORT_SHAPES = ["plain_ctx_first", "plain_q_first", "plain_numbered", "lc_system", "lc_system_ctx", "li_text",
                "lc_rlm"]


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


def make_batch(enc: Encoder, tmpl, rng: random.Random, frac: float, batch: int, em: float = 1.0):
    """``batch`` examples (ids, answer mask), half as many above 5 documents; one document count
    per batch. The first 20% of the run uses the shorter prompt shapes only (faster steps while
    the copying is learned); then every shape, LlamaIndex's long system prompt included."""
    n_docs = schedule_docs(frac, rng, em)
    share = copy_share(frac)
    n = batch if n_docs <= 5 else batch // 2
    rows = []
    while len(rows) < n:
        date = qa_synth.random_date(rng)
        if rng.random() < share:
            msgs, answers = qa_synth.make_copy(rng)
        elif frac >= CANARY_FROM and rng.random() < CANARY_SHARE:
            rows.append(bos_canary(enc, tmpl, rng, n_docs, date))
            continue
        else:
            fu = rng.randint(1, 3) if rng.random() < 0.6 else 0
            shape = rng.choice(SHORT_SHAPES) if frac < 0.2 else None
            msgs, answers, _ = qa_synth.make_qa(rng, n_docs, shape=shape, followups=fu)
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


def losses(model, x, m, valid):
    """Summed answer and LM cross-entropies (and their token counts), wrong answer tokens per row."""
    import torch.nn.functional as F

    logits = model(input_ids=x).logits[:, :-1].float()
    tgt = x[:, 1:]
    am = m[:, 1:]
    lm = valid[:, 1:] * (1 - am)
    ce = F.cross_entropy(logits.reshape(-1, logits.size(-1)), tgt.reshape(-1), reduction="none").view_as(am)
    # exact match under teacher forcing == greedy exact match
    pred = logits.argmax(-1)
    wrong = ((pred != tgt).float() * am).sum(1)
    has = am.sum(1) > 0
    return (ce * am).sum(), am.sum(), (ce * lm).sum(), lm.sum(), wrong, has


# ----------------------------------------------------------------------------- validation
def val_set(enc: Encoder, tmpl, seed: int, n_docs: int, n: int, wording: str = "train"):
    rng = random.Random(10_000_019 + seed * 31 + n_docs)
    rows = []
    for _ in range(n):
        msgs, answers, _ = qa_synth.make_qa(rng, n_docs, split="heldout", wording=wording)
        rows.append(enc.example(conversation_pieces(tmpl, msgs, answers, qa_synth.random_date(rng))))
    return rows


def evaluate(model, enc, sets) -> dict[str, float]:
    import torch

    model.eval()
    out = {}
    with torch.no_grad():
        for name, rows in sets.items():
            ok = 0
            for i in range(0, len(rows), 16):
                x, m, v = collate(rows[i: i + 16], enc.pad)
                *_, wrong, has = losses(model, x, m, v)
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


def save_ckpt(path: Path, model, opt, state: dict) -> None:
    import torch

    tmp = path.with_suffix(".tmp")
    torch.save({"model": model.state_dict(), "opt": opt.state_dict() if opt else None, "state": state}, tmp)
    tmp.replace(path)


def train(args) -> None:
    import torch
    import transformers

    torch.set_num_threads(2)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    tok_json = out / "tokenizer.json"
    if not tok_json.exists():
        log("training tokenizer")
        train_tokenizer(out, args.seed)
    enc = Encoder(tok_json)
    tmpl = chat_template()
    torch.manual_seed(args.seed)
    cfg = make_config(enc)
    model = transformers.LlamaForCausalLM(cfg)
    nparams = sum(p.numel() for p in model.parameters())
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    nodecay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.05}, {"params": nodecay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.98), eps=1e-8)
    state = {"step": 0, "elapsed": 0.0, "best": -1.0, "best_step": 0, "budget": args.minutes * 60, "history": []}
    ck = out / "ckpt.pt"
    if args.resume and ck.exists():
        blob = torch.load(ck, weights_only=False)
        model.load_state_dict(blob["model"])
        opt.load_state_dict(blob["opt"])
        state = blob["state"]
        state["budget"] = state["elapsed"] + args.minutes * 60 if args.extend else state["budget"]
        log(f"resumed at step {state['step']} ({state['elapsed'] / 60:.1f} min)")
    log(f"model: {nparams:,} parameters, arch {ARCH}, vocab {VOCAB}; seed {args.seed}; "
        f"budget {state['budget'] / 60:.1f} min" + (f" / {args.steps} steps" if args.steps else ""))
    sets = {
        "d2": val_set(enc, tmpl, args.seed, 2, args.val_n),
        "d4": val_set(enc, tmpl, args.seed, 4, args.val_n),
        "d8": val_set(enc, tmpl, args.seed, 8, args.val_n),
        "re4": val_set(enc, tmpl, args.seed, 4, args.val_n, wording="reworded"),
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
        rows, n_docs = make_batch(enc, tmpl, rng, frac, args.batch, state.get("em", 0.0))
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
            loss = a_sum / n_ans + 0.3 * l_sum / n_lm
            loss.backward()
            a_tot += float(a_sum.detach())
            l_tot += float(l_sum.detach())
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
            log(f"step {state['step']} {el / 60:.1f}min lr {lr:.2e} docs {n_docs} rows {acc.get('rows', 0) / acc['n']:.0f} maxlen {maxlen} "
                f"ans {acc['ans'] / acc['n']:.3f} lm {acc['lm'] / acc['n']:.3f} train-em {acc['em'] / max(1, acc['cnt']):.2f} "
                f"em-avg {state.get('em', 0):.2f} {el / state['step']:.2f}s/step(avg)")
            state["history"].append({"step": state["step"], "min": round(el / 60, 2),
                                     "ans": round(acc["ans"] / acc["n"], 4), "lm": round(acc["lm"] / acc["n"], 4)})
            acc = {"ans": 0.0, "lm": 0.0, "n": 0, "em": 0, "cnt": 0}
        now = time.time()
        if now - last_val > args.val_every * 60:
            last_val = now
            state["elapsed"] = now - t_start
            res = evaluate(model, enc, sets)
            score = res["d2"] + res["d4"] + res["d8"] + res["re4"]
            log(f"val (held-out names, torch, teacher-forced EM) step {state['step']}: "
                + " ".join(f"{k} {v:.2f}" for k, v in res.items()))
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
    score = sum(res.values())
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
32, {kv} kv heads, FFN {ffn}, vocab 1024, int4 MatMulNBits, {size_kb} KB) trained from scratch on
2 CPU cores to answer a question by **copying a span out of the documents in its prompt**
(extractive QA). It is the embedded demo/test model of ryzenai-llm: small enough to ship in the
wheel, good enough that a wrong chat template, a doubled BOS, a truncated prompt or a bad stop
string visibly break its answers. Plain ONNX: runs on the CPU build of onnxruntime-genai.

## How it was made
- `python scripts/train_qa_model.py --seed {seed} --minutes {minutes}` (synthetic data:
  `scripts/qa_synth.py`), {steps} steps on 2 CPU cores, then exported with
  `onnxruntime_genai.models.builder -p int4 -e cpu`: the weights of step {best_step}
  ({train_min:.1f} min, best held-out validation).
- Data, sampled fresh every step: 2-10 short documents of made-up facts about made-up labs,
  institutes and people, and about made-up things ("the Zorblax reactor", "the railway of
  Quenmar": 30 kinds, facts from 20 verbs x when/who/where, 14 attributes, 6 measures and 10
  counts) (names from syllables or random letters, so nothing can be memorised), the other
  documents acting as distractors; a question about one fact; the answer copied verbatim then
  `<|eot_id|>`; 60% of conversations have 1-3 follow-up questions. Prompts are rendered with
  the real Llama 3.2 template (`chat_template.jinja`, identical to
  `core/templates/llama-3.2-instruct.jinja`) through the plugin's own renderer, in the shapes
  the frameworks send: LlamaIndex's chat text-QA template (its system prompt + "Context
  information is below..."), its completion text-QA and refine templates, with or without
  `file_path: ...` metadata lines; LangChain's RAG-tutorial prompts and "Answer the question
  using only the context..." + "Context: ...\\n\\nQuestion: ..."; a few plain shapes.
- The system header's `Today Date:` line was random in training (any date between 2023 and
  2031), so the date the plugin renders (today's) does not matter.
- Recipe: copy-task warm-up (80% -> 20% of examples in the first 30% of the run),
  curriculum 2 -> 10 documents gated by the training exact match, loss = answer + 0.3 x LM,
  AdamW 3e-3 cosine by wall clock, batches of 24 conversations (12 above 5 documents), the
  shorter prompt shapes only in the first 20% of the run. {run_note}
- BOS canaries: from half the run, 8% of the conversations start with a doubled
  `<|begin_of_text|>` or none, and their answer is empty (`<|eot_id|>` at once). A test
  instrument must not be robust to a BOS bug: with a doubled or missing BOS this model answers
  nothing.
- Tokenizer: Llama-3 style byte-level BPE, vocab 1024 (8 Llama-3 special tokens), trained on
  the synthetic corpus.
- The answer is trained as " " + span (the span's own tokens, as after a space in the
  documents), then `<|eot_id|>`: the plugin's output is the span with a leading space; strip it.

## What it can do
Answer short factual questions whose answer is a name, place, year, number, colour, chip
name or research topic written in one of the documents of the prompt, with 2-8 short
documents (prompts up to ~1000 tokens), when the fact is stated in one of the shapes it was
trained on: lab relations (founded/established, founder, location/based in, director/led by,
employees, chip, logo colour, research focus, born in, pet) and generic ones ("X was <verb>
in <year> / by <person> / in <place>", "the <attribute> of X is ...", "X is N meters long",
"X has N rooms"). The question has to reuse the document's words (its verb or attribute).

## What it cannot do
It knows nothing: no world knowledge, no arithmetic, no reasoning, no free text, no
"I don't know" (it always copies something), no summaries. Long or unusual documents (prose
that does not look like its training facts), questions about relations it never saw, more
than ~10 documents, and prompts over ~1000 tokens degrade it fast. English only.

## Measured accuracy
Exact match, held-out names never seen in training, greedy (temperature 0), through the
plugin (`ryzenai_core.Engine`, inline), `scripts/eval_qa_model.py` ({eval_n} per cell;
details in `eval.json`):

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
    cfg = make_config(enc)
    model = transformers.LlamaForCausalLM(cfg)
    model.load_state_dict(blob["model"])
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
            [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(hf), "-o", str(build),
             "-p", "int4", "-e", "cpu", "-c", str(Path(tmp) / "cache")],
            check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
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
            json.dumps({"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>",
                        "pad_token": "<|finetune_right_pad_id|>"}, indent=2) + "\n", encoding="utf-8")
        for n, b in keep.items():
            (dest / n).write_bytes(b)
    meta = {
        "seed": args.seed, "steps": st["step"], "train_minutes": round(st["elapsed"] / 60, 1),
        "exported_step": st["step"], "params": sum(p.numel() for p in model.parameters()), "arch": ARCH,
        "history": st.get("history", []),
    }
    (out / "export_meta.json").write_text(json.dumps(meta, indent=1), encoding="utf-8")
    size = sum(p.stat().st_size for p in dest.iterdir())
    log(f"exported to {dest} ({size / 1e6:.2f} MB)")


def write_card(args) -> None:
    """Write README.md of the exported model from export_meta.json and eval.json."""
    dest: Path = args.dest
    meta = json.loads((args.out / "export_meta.json").read_text(encoding="utf-8"))
    ev = json.loads((dest / "eval.json").read_text(encoding="utf-8"))
    ckpt_state = meta
    lines = ["| cell | documents | question wordings | exact match |", "|---|---|---|---|"]
    for cell in ev["cells"]:
        lines.append(f"| {cell['name']} | {cell['docs']} | {cell['wording']} | "
                     f"{cell['correct']}/{cell['n']} = {100 * cell['accuracy']:.1f}% |")
    adapters = ev.get("adapters") or {}
    faces = {"langchain": "ChatRyzenAI: LangChain prompt, llm, StrOutputParser chain",
             "llamaindex": "RyzenAILLM: LlamaIndex compact synthesis"}
    rows = [f"| {faces[k]} | {v['correct']}/{v['n']} = {100 * v['accuracy']:.1f}% |"
            for k, v in adapters.items() if k in faces and isinstance(v, dict) and "accuracy" in v]
    if rows:
        lines += ["", "Through the framework adapters (2 documents, training wordings, held-out names, answers "
                  "stripped):", "", "| adapter | exact match |", "|---|---|", *rows]
    ind = ev.get("independent") or {}
    if "langchain" in ind:
        lines += ["", f"A hand-written set (`scripts/qa_independent.json`, {ind['n']} questions with their own names, "
                  "sentences and wordings, 2-3 documents each), default settings:", "",
                  "| adapter | exact match |", "|---|---|",
                  *(f"| {faces[k]} | {ind[k]['correct']}/{ind[k]['n']} = {100 * ind[k]['accuracy']:.1f}% |"
                    for k in ("langchain", "llamaindex") if k in ind)]
    size_kb = sum(p.stat().st_size for p in dest.iterdir() if p.name.startswith("model.onnx")) // 1024
    a = meta["arch"]
    card = CARD.format(
        params_m=meta["params"] / 1e6, hidden=a["hidden"], layers=a["layers"], heads=a["heads"], kv=a["kv_heads"],
        ffn=a["ffn"], size_kb=size_kb, seed=meta["seed"], minutes=args.card_minutes or meta["train_minutes"],
        steps=meta.get("total_steps", meta["steps"]), train_min=meta["train_minutes"], best_step=ckpt_state["exported_step"],
        eval_n=ev.get("n_per_cell"), run_note=meta.get("run_note", ""), table="\n".join(lines) + "\n\n" + ev.get("notes", ""),
    )
    (dest / "README.md").write_text(card, encoding="utf-8")
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
    p.add_argument("--card-minutes", type=float, default=0)
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
