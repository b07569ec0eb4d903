"""``ryzenai-llm doctor MODEL``'s checks on the loaded model: where it ran, and whether its answers are right.

- ``generation``: a short greedy answer, and the execution provider the runtime reports;
- ``where it ran``: the NPU hardware contexts the worker process holds (``xrt-smi examine -r
  aie-partitions``) and, on Linux, the ``/dev/accel`` nodes it has open. The runtime's device type
  says only that the RyzenAI EP was given a device: hybrid packages decode on the iGPU, and the
  1.3-1.6 custom-op layouts report CPU while their NPU custom ops run;
- ``long prompt recall``: a fact in the middle of a prompt of about 0.9 x the prompt limit, asked
  for at its end; the answer is checked, and so are the logits of the first decode steps (NaN
  logits a few steps in have been reported on NPU packages);
- ``guidance``: an answer constrained to the regex ``yes|no`` must be one of the two (a build
  without guidance ignores constraints: structured output is then refused);
- ``KV reuse``: a second turn of 128 tokens reusing the first's KV cache, against the same turn cold;
- ``long prompt``: on a package whose prompts are fed in several prefill runs, one over the run length.
"""

from __future__ import annotations

import sys
from typing import Any

from ryzenai_core.errors import GuidanceUnsupportedError, RyzenAIError

from . import doctor_npu
from .doctor_report import Report, Status, ms

__all__ = ["check_guidance", "check_long_prompt", "check_needle", "check_reuse", "check_where", "generation"]

PROMPT = "Say hello in one short sentence."
_REUSE_SYSTEM = (
    "You are a friendly assistant on a laptop. Answer in one short sentence, in plain words, without lists, "
    "code or markup. If a question is unclear, say so briefly. Greet the user warmly, thank them when they "
    "thank you, and say goodbye when they leave. Never repeat the question back to the user."
)
NEEDLE = "4711"
_HAYSTACK = (
    "The laptop's NPU runs precompiled fixed shapes. Prompts are padded to length buckets, and the "
    "runtime prefills them before it decodes the answer one token at a time. "
)


def generation(report: Report, engine: Any, pkg: Any, new_tokens: int) -> Any:
    """The ``generation`` check: a short greedy answer; returns its completion."""
    from ryzenai_core.messages import ChatMessage
    from ryzenai_core.options import validated_options

    c = engine.generate([ChatMessage("user", PROMPT)], validated_options(max_new_tokens=new_tokens, temperature=0))
    t = c.timings
    ttft = t.time_to_first_token - t.queued if t and t.time_to_first_token is not None else None
    rate = t.decode_tokens_per_second if t else None
    report.measurements.update(
        {
            "provider": c.provider,
            "ttft_seconds": ttft,
            "decode_tokens_per_second": rate,
            "prompt_tokens": c.usage.prompt_tokens if c.usage else None,
        }
    )
    speed = f"{rate:.1f} tokens/s" if rate else "- tokens/s"
    report.add(
        "generation",
        "ok",
        f"ran on {c.provider}: {c.usage.completion_tokens if c.usage else 0} tokens, time to first token {ms(ttft)}, "
        f"{speed} (a first call: the speed checks below measure)",
    )
    return c


def check_where(report: Report, engine: Any, pkg: Any, provider: str | None, device: str | None) -> None:
    """Where the work ran: the runtime's device, and the NPU hardware contexts the worker holds."""
    pid = engine.worker_pid()
    partitions = doctor_npu.xrt_smi("examine", "-r", "aie-partitions")
    contexts = doctor_npu.hardware_contexts(partitions).get(pid, 0) if partitions is not None and pid else None
    accel = doctor_npu.accel_files(pid) if pid and sys.platform.startswith("linux") else []
    report.measurements["where"] = {
        "worker_pid": pid,
        "device_type": device,
        "hardware_contexts": contexts,
        "accel_open": accel,
    }
    if not pkg.is_ryzenai or provider is not None:
        status: Status = "warn" if pkg.is_ryzenai else "ok"
        why = " (not the NPU: the package runs its plain ONNX graph on the CPU here)" if pkg.is_ryzenai else ""
        report.add("where it ran", status, f"{device} (worker pid {pid}){why}")
        return
    held = []
    if contexts:
        held.append(f"{contexts} NPU hardware context(s) held by the worker (pid {pid}, xrt-smi aie-partitions)")
    if accel:
        held.append(f"{', '.join(accel)} open in the worker")
    split = (
        "prefill on the NPU, decode on the iGPU (a hybrid package)"
        if pkg.mode.value == "hybrid"
        else "prefill and decode on the NPU"
    )
    linux = bool(pid) and sys.platform.startswith("linux")  # /proc/<pid>/fd shows the device nodes it holds
    if held:
        report.add("where it ran", "ok", f"{split}: {'; '.join(held)}; the runtime reports {device}")
    elif partitions is not None or linux:
        sources = (("no NPU hardware context (xrt-smi)", partitions is not None), ("no /dev/accel node open", linux))
        looked = [what for what, on in sources if on]
        report.add(
            "where it ran",
            "warn",
            f"the runtime reports {device}, but the worker (pid {pid}) holds {' and '.join(looked)}: the work may "
            "have run elsewhere (see `xrt-smi examine -r aie-partitions` while a model is loaded)",
        )
    elif pkg.layout == "custom-ops":
        report.add(
            "where it ran",
            "skip",
            f"the runtime reports {device}, as the 1.3-1.6 custom-op layouts always do while their NPU custom ops run; "
            "without xrt-smi the hardware contexts cannot be read",
        )
    else:
        report.add(
            "where it ran",
            "ok" if device == "RyzenAI" else "warn",
            f"the runtime reports {device} ({split} as the package says); without xrt-smi the NPU's hardware contexts "
            "cannot be read, so nodes the EP left to the CPU are not seen",
        )


def _needle_messages(engine: Any, target: int) -> tuple[list[Any], int]:
    """A conversation of about ``target`` prompt tokens: filler, the needle in the middle, the question at the end."""
    from ryzenai_core.messages import ChatMessage

    question = "\n\nWhat is the secret code? Answer with the code only."
    fact = f" The secret code is {NEEDLE}. "

    def messages(repeats: int) -> list[Any]:
        half = _HAYSTACK * (repeats // 2)
        return [ChatMessage("user", half + fact + _HAYSTACK * (repeats - repeats // 2) + question)]

    def count(repeats: int) -> int:
        return len(engine.encode(engine.render(messages(repeats))))

    base, probe = count(0), 8
    per = max(1.0, (count(probe) - base) / probe)
    repeats = max(0, int((target - base) / per))
    while repeats > 0 and (n := count(repeats)) > target:
        repeats -= max(1, int((n - target) / per))
    repeats = max(0, repeats)
    return messages(repeats), count(repeats)


def check_needle(report: Report, engine: Any, pkg: Any) -> None:
    """A fact in the middle of a prompt of ~0.9 x the prompt limit: the answer, and finite logits as it decodes."""
    limit = pkg.budget.prompt_limit
    target = max(16, int(0.9 * limit))
    try:
        messages, n = _needle_messages(engine, target)
        ids = engine.encode(engine.render(messages))
        probe = engine.probe(ids, 12)
        answer = engine.decode(probe["tokens"]).strip()
    except RyzenAIError as exc:
        report.add("long prompt recall", "fail", f"a prompt of about {target} tokens failed: {exc}")
        return
    steps = probe["logits"]
    bad = next((i for i, s in enumerate(steps) if not s["finite"]), None)
    report.measurements["needle"] = {"prompt_tokens": n, "answer": answer, "found": NEEDLE in answer, "logits": steps}
    where = f"a prompt of {n} tokens ({n / limit:.0%} of the prompt limit {limit})"
    if bad is not None:
        report.add(
            "long prompt recall",
            "fail",
            f"{where}: the logits of decode step {bad + 1} are not finite ({steps[bad]['nan']} NaN, "
            f"{steps[bad]['inf']} inf): the answer is noise (cf. amd/RyzenAI-SW#368)",
        )
    elif NEEDLE not in answer:
        report.add(
            "long prompt recall",
            "warn",
            f"{where}: the answer {answer[:60]!r} does not name the code {NEEDLE} from its middle; a model this "
            "size may miss it, but a real package that does points at a long prompt handled wrong"
            + (f"; logits finite for {len(steps)} steps" if steps else ""),
        )
    else:
        report.add(
            "long prompt recall",
            "ok",
            f"{where}: the answer names the code from its middle"
            + (f"; logits finite for the first {len(steps)} decode steps" if steps else ""),
        )


def check_guidance(report: Report, engine: Any) -> None:
    """An answer constrained to the regex ``yes|no``."""
    from ryzenai_core.messages import ChatMessage
    from ryzenai_core.options import validated_options

    options = validated_options(max_new_tokens=4, temperature=0, guidance={"type": "regex", "data": "yes|no"})
    try:
        c = engine.generate([ChatMessage("user", "Is an NPU a processor? Answer yes or no.")], options)
    except GuidanceUnsupportedError as exc:
        report.add("guidance", "fail", f"{exc} (structured output and forced tool calls are refused on this build)")
        return
    except RyzenAIError as exc:
        report.add("guidance", "fail", f"a call constrained to the regex 'yes|no' failed: {exc}")
        return
    text = c.text.strip()
    if text in ("yes", "no"):
        report.add("guidance", "ok", f"an answer constrained to the regex 'yes|no' is {text!r}")
    else:
        detail = f"an answer constrained to the regex 'yes|no' is {text!r}: the constraint was ignored"
        report.add("guidance", "fail", detail)


def check_reuse(report: Report, engine: Any, new_tokens: int, kv_reuse: bool) -> None:
    """A second turn reusing the first's KV cache, against the same turn cold: the same tokens, and faster."""
    from ryzenai_core.messages import ChatMessage
    from ryzenai_core.options import validated_options

    greedy = validated_options(max_new_tokens=new_tokens, temperature=0, **({"kv_reuse": True} if kv_reuse else {}))
    # A conversation long enough to keep: the engine keeps whole multiples of 64 prompt tokens.
    opening = [ChatMessage("system", _REUSE_SYSTEM), ChatMessage("user", PROMPT)]
    first = engine.generate(opening, greedy)
    turns = [*opening, ChatMessage("assistant", first.text), ChatMessage("user", "Now say goodbye.")]
    warm = engine.generate(turns, greedy)
    reused = warm.timings.reused_prompt_tokens if warm.timings else 0
    if not reused:
        report.add(
            "KV reuse",
            "skip",
            "off for this package (the default on Ryzen AI packages, whose runtime support is unverified); "
            "`--kv-reuse` turns it on to compare a warm answer with a cold one",
        )
        return
    cold = engine.generate(turns, validated_options(max_new_tokens=new_tokens, temperature=0, kv_reuse=False))
    same = warm.token_ids == cold.token_ids
    warm_t = warm.timings.time_to_first_token if warm.timings else None
    cold_t = cold.timings.time_to_first_token if cold.timings else None
    report.measurements["reused_prompt_tokens"] = reused
    report.measurements["kv_reuse"] = {
        "reused_prompt_tokens": reused,
        "new_tokens": new_tokens,
        "same_tokens": same,
        "warm_ttft_seconds": warm_t,
        "cold_ttft_seconds": cold_t,
    }
    times = f" (time to first token {ms(warm_t)} warm, {ms(cold_t)} cold)"
    report.add(
        "KV reuse",
        "ok" if same else "fail",
        f"a second turn reused {reused} of {warm.usage.prompt_tokens if warm.usage else '?'} prompt tokens; "
        + (
            f"its {len(warm.token_ids)} greedy tokens equal a cold run's{times}"
            if same
            else f"its greedy answer differs from a cold run's{times}: pass kv_reuse=False"
        ),
    )


def check_long_prompt(report: Report, engine: Any, pkg: Any) -> None:
    """On a package whose prompts are fed in several prefill runs: one prompt over the run length."""
    from ryzenai_core.messages import RawPrompt
    from ryzenai_core.options import validated_options

    budget = pkg.budget
    run = budget.prefill_window
    if not run or budget.prompt_limit <= run + 16:
        report.add("long prompt", "skip", "every prompt the package takes is one prefill run")
        return
    n = min(run + 512, budget.prompt_limit - 8)
    text = "The NPU runs precompiled fixed shapes, and long prompts are fed in runs. "
    ids: list[int] = []
    while len(ids) < n:
        text += text
        ids = engine.encode(text)
    c = engine.generate(RawPrompt(token_ids=ids[:n]), validated_options(max_new_tokens=4, temperature=0))
    windows = c.plan.prefill_windows if c.plan else 1
    t = c.timings
    report.measurements["long_prompt"] = {
        "prompt_tokens": n,
        "prefill_runs": windows,
        "ttft_seconds": t.time_to_first_token if t else None,
    }
    report.add(
        "long prompt",
        "ok",
        f"{n} tokens (over the {run}-token run length) in {windows} prefill run(s) on {c.provider}, "
        f"time to first token {ms(t.time_to_first_token if t else None)} ({pkg.long_prompts['detail']})",
    )
