"""The loaded model of one package, in this process, and the one generation loop.

A :class:`Session` composes the parts of a generation for a (folder, provider, session
options) key: :mod:`.loader` loads ``og.Model`` + ``og.Tokenizer`` on first use,
:mod:`.tokens` encodes and decodes, :mod:`.prompt_builder` turns a call's messages into a
:class:`Prepared` prompt, :mod:`.scheduler` runs one generation at a time in arrival order (a
Ryzen AI laptop has one NPU), :mod:`.kv_cache` keeps the last generator so a call whose prompt
extends the previous sequence (multi-turn chat, agent loops) prefills only the new tokens, and
:mod:`.stop` decides why the token loop ends. A call's LoRA adapter is loaded and checked once
(:mod:`.adapters`) and set on its generator before the prompt; the kept generator is reused only
by a call with the same adapter.

The :class:`~ryzenai_core.engine.engine.Engine` runs a Session either in this process or in a
worker process; both use exactly this code.
"""

from __future__ import annotations

import functools
import json
import logging
import threading
import time
from collections.abc import Callable, Generator, Sequence
from typing import Any

from ..adapters import LoraAdapter
from ..errors import ContextWindowExceededError, GenerationError, GuidanceUnsupportedError, InvalidRequestError
from ..messages import ChatMessage, RawPrompt
from ..options import GenerationOptions, check_runtime_settings, resolve_search
from ..package.folder import ModelPackage
from ..package.reuse import kv_reuse_default
from ..package.runtime import import_oga, runtime_info
from ..prompt.formats import has_tool_calls, parse_tool_calls
from ..prompt.templates import ChatTemplate
from ..request import instructed
from .adapters import SessionAdapters, adapter_tensors, lora_inputs
from .call import CallControl, CallSpec, Phase
from .closer import Closer, TokenIndex
from .kv_cache import KVCache, feed
from .loader import Loaded, SessionKey, load_model
from .probes import GUIDANCE_PROBE, decode_probe, guidance_applies
from .prompt_builder import Prepared, PromptBuilder
from .scheduler import ReadWatch, Scheduler
from .stop import StopChecker
from .streaming import Chunk, FinishReason, IncrementalDecoder, OutputParser, Timings, Usage
from .tokens import Tokens

__all__ = ["Session", "masked_logits"]

log = logging.getLogger(__name__)


class Session:
    """One loaded model; see the module docstring."""

    def __init__(self, key: SessionKey, package: ModelPackage | None = None) -> None:
        self.key = key
        self.package = ModelPackage.reuse(package, key.path, key.release)  # read again only if the folder changed
        check_runtime_settings(key.provider, key.num_threads)
        self.tokens = Tokens(self.package, self._require)
        self.prompts = PromptBuilder(self.package, self.tokens, lambda: self._processor())
        self.template = self.prompts.templates.default
        self.scheduler = Scheduler()
        self._kv = KVCache(self.package)
        self.adapters = SessionAdapters(self.package)
        self._load_lock = threading.Lock()
        self._loaded: Loaded | None = None
        self._mm_processor: Any = None
        self._token_index: TokenIndex | None = None
        self._unmaskable: str | None = None
        """The runtime's refusal to mask logits, once it refused (see :meth:`_step`)."""
        self._guidance: bool | None = None  # whether the runtime applies guidance, once probed

    # ------------------------------------------------------------------ loading
    @property
    def loaded(self) -> bool:
        """Whether the model is in memory."""
        return self._loaded is not None

    def load(self) -> None:
        """Load the model and tokenizer (once). Thread-safe."""
        self._require()

    def _require(self) -> Loaded:
        """The loaded model (loaded on first use)."""
        loaded = self._loaded
        if loaded is None:
            with self._load_lock:
                if self._loaded is None:
                    self._loaded = load_model(self.key, self.package, self.template)
                loaded = self._loaded
        return loaded

    @property
    def load_seconds(self) -> float | None:
        """How long the load took, once loaded."""
        return self._loaded.seconds if self._loaded is not None else None

    @property
    def device(self) -> str | None:
        """The execution provider that runs the model, once loaded: ``RyzenAI``, ``CPU``, ``DML``, ... (OGA's names)."""
        return self._loaded.device if self._loaded is not None else None

    @property
    def kv_cache(self) -> KVCache:
        """The generator kept for prefix reuse, and the runtime's refusal of a rewind once it refused one."""
        return self._kv

    @property
    def tokenizer(self) -> Any:
        """The ``og.Tokenizer`` (loads the model on first use)."""
        return self._require().tokenizer

    def _processor(self) -> Any:
        """The runtime's multimodal processor (vision packages only; loads the model)."""
        model = self._require().model
        if self._mm_processor is None:
            self._mm_processor = model.create_multimodal_processor()
        return self._mm_processor

    # ------------------------------------------------------------------ tokens
    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``, NUL characters included (see :meth:`.tokens.Tokens.encode`)."""
        return self.tokens.encode(text)

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids``, nothing dropped (see :meth:`.tokens.Tokens.decode`)."""
        return self.tokens.decode(ids)

    def count_text(self, text: str) -> int:
        """Tokens of ``text`` alone (cached)."""
        return self.tokens.count_text(text)

    def incremental_decoder(self) -> IncrementalDecoder:
        """A decoder of generated ids into text deltas that add up to :meth:`decode`."""
        return self.tokens.incremental_decoder()

    # ------------------------------------------------------------------ preparing
    def template_for(self, options: GenerationOptions) -> ChatTemplate:
        """The package's template, or the call's ``chat_template``."""
        return self.prompts.template_for(options)

    def resolve(self, options: GenerationOptions) -> GenerationOptions:
        """What the call's options mean for this package (see :func:`ryzenai_core.request.resolve`)."""
        return self.prompts.resolve(options)

    def render(self, messages: Sequence[ChatMessage], options: GenerationOptions) -> str:
        """The prompt text for ``messages``."""
        return self.prompts.render(messages, options)

    def count_tokens(self, messages: Sequence[ChatMessage], options: GenerationOptions) -> int:
        """Prompt tokens ``messages`` render to (images expanded to their tokens)."""
        return self.prompts.count_tokens(messages, options)

    # ------------------------------------------------------------------ generating
    def kv_reuse_default(self) -> bool:
        """Prefix reuse is on by default only where the runtime's support is known (see :mod:`.kv_cache`)."""
        return kv_reuse_default(self.package)

    def refuse(self, options: GenerationOptions) -> None:
        """Refuse, before loading anything, options this package cannot run (kv_reuse=True unrewindable)."""
        self._kv.enabled(options.kv_reuse, options.called("kv_reuse"))

    def stream(
        self,
        messages: Sequence[ChatMessage] | RawPrompt,
        options: GenerationOptions,
        control: CallControl | None = None,
        reader: ReadWatch | None = None,
    ) -> Generator[Chunk, None, None]:
        """Stream the answer to ``messages`` (or a raw prompt). Closing the iterator stops generation.

        ``control`` carries cancellation, the timeout and the phase (see :class:`CallControl`);
        ``reader`` says whether the caller reads the stream (a call waiting for the model stops
        one left unread, see :class:`~.scheduler.ReadWatch`).
        """
        t_call = time.perf_counter()
        control = control or CallControl(CallSpec.of(options))
        self.refuse(options)
        self.load()
        control.check_deadline()  # it may have waited in a queue before this
        control.enter(Phase.PREPARING)
        resolved = self.resolve(options)
        if not isinstance(messages, RawPrompt):
            messages = instructed(messages, options)  # the answer's form, said in the prompt
        prepared = self.prompts.prepare(messages, resolved, control.check_deadline)
        control.prompt_tokens = len(prepared.prompt_ids)
        return self._stream(prepared, resolved, control, reader, t_call)

    def _stream(
        self,
        prep: Prepared,
        options: GenerationOptions,
        control: CallControl,
        reader: ReadWatch | None,
        t_call: float,
    ) -> Generator[Chunk, None, None]:
        og = import_oga()
        search = resolve_search(options, dict(self.package.search))
        guidance = options.guidance
        parser = self._parser(prep, options)
        decoder = self.incremental_decoder()
        plan = prep.plan
        reuse = self._kv.enabled(options.kv_reuse, options.called("kv_reuse"))
        reuse = reuse and guidance is None and not (search.get("do_sample") and options.seed is not None)

        t_wait = time.perf_counter()
        if not self.scheduler.acquire(control, reader):
            return
        generator = None
        signature = ""
        closer: Closer | None = None
        n = 0
        finish: FinishReason | None = FinishReason.CANCELLED
        timings = Timings(queued=time.perf_counter() - t_wait)
        first_at: float | None = None
        generated: list[int] = []
        pending: list[int] = []  # generated ids not yet reported in a chunk
        try:
            if control.cancel.is_set():
                return
            if guidance is not None:
                self._check_guidance(og, guidance)
            adapter = self._adapter_key(og, options.adapter)
            # The kept generator serves a call with the same search options and the same adapter only.
            signature = json.dumps([search, adapter], sort_keys=True)
            control.enter(Phase.PREFILL)
            t_prefill = time.perf_counter()
            generator, timings.reused_prompt_tokens = self._generator(
                og, prep, search, signature, guidance, reuse, adapter
            )
            timings.prefill = time.perf_counter() - t_prefill
            control.check_deadline()
            control.enter(Phase.GENERATING)
            never = self._require().never_sampled  # a vision package's image markers
            stop = StopChecker(control, generator, self._require().end_ids | never, plan, parser, guidance)
            if guidance is not None and guidance.shape is not None:
                closer = Closer(guidance.shape, self.token_index(), plan.max_new_tokens, generator)
            # The per-token loop: the runtime's step is the only expensive call in it.
            step, next_tokens = self._step(generator, never), generator.get_next_tokens
            decode, parse = decoder.feed, parser.feed
            while (finish := stop.before_step(n)) is None:
                if closer is not None:
                    closer.before_step(n)
                step()
                token = int(next_tokens()[0])
                if closer is not None:
                    closer.feed(token)
                generated.append(token)
                n += 1
                if first_at is None:
                    first_at = time.perf_counter()
                if finish := stop.after_token(token):
                    break
                pending.append(token)
                content, reasoning = parse(decode(token))
                if content or reasoning:
                    yield Chunk(content, reasoning, token_ids=pending)
                    pending = []
                if finish := stop.after_text():
                    break
            stop.check_complete(finish, decoder, generated, closer is not None and closer.complete())
        except GeneratorExit:
            finish = FinishReason.CANCELLED
            raise
        except (GenerationError, GuidanceUnsupportedError, InvalidRequestError):
            self._kv.discard(generator)
            generator = None
            raise
        except Exception as exc:  # noqa: BLE001 - runtime errors from OGA
            self._kv.discard(generator)
            generator = None
            raise _generation_error(exc, guidance) from exc
        finally:
            if generator is not None:
                if reuse and finish != FinishReason.CANCELLED:
                    self._kv.store(generator, prep.prompt_ids, n, signature, plan.window, prep.images)
                else:
                    self._kv.discard(generator)
            self.scheduler.release()
        if finish == FinishReason.CANCELLED:
            return
        content, reasoning = parser.feed(decoder.flush())
        c2, r2 = parser.finish()
        end = time.perf_counter()
        timings.total = end - t_call
        if first_at is not None:
            timings.time_to_first_token = first_at - t_call
            if n > 1 and end > first_at:
                timings.decode_tokens_per_second = (n - 1) / (end - first_at)
        cut = closer.cut_values() if closer is not None else []
        yield Chunk(
            text=content + c2,
            reasoning=reasoning + r2,
            tool_calls=list(parser.tool_calls),
            finish_reason=FinishReason.LENGTH if cut else stop.finish_reason(finish or FinishReason.LENGTH),
            cut=cut,
            usage=Usage(len(prep.prompt_ids), n),
            timings=timings,
            plan=plan,
            token_ids=pending,
            dropped_messages=prep.dropped_messages,
            stop_sequence=parser.stop_sequence,
            provider=self.device,
            adapter=options.adapter.name if options.adapter is not None else None,
        )

    def token_index(self) -> TokenIndex:
        """The package's tokens by their bytes (built on first use: constrained output closing in time)."""
        if self._token_index is None:
            table = self._require().token_bytes
            if table is not None:
                self._token_index = TokenIndex(table.table)
            else:  # a vocabulary not mapped to bytes: each token's own decode
                size = int(self.package.config.get("model", {}).get("vocab_size", 0))
                self._token_index = TokenIndex([self.decode([i]).encode() for i in range(size)])
        return self._token_index

    def _check_guidance(self, og: Any, guidance: Any) -> None:
        """Refuse a constrained call on a runtime that would ignore the constraint (probed once per load)."""
        if self._guidance is None:
            loaded = self._require()
            budget = self.package.budget
            found = guidance_applies(
                og, loaded.model, loaded.tokenizer, sliding_window=self.package.sliding_window, window=budget.window
            )
            self._guidance = found is not False  # a probe that could not run refuses nothing
        if not self._guidance:
            raise GuidanceUnsupportedError(
                f"constrained decoding ({guidance.type}: structured output, JSON mode, a forced tool call) needs "
                f"onnxruntime-genai with guidance; {runtime_info().describe()} ignores it (a probe constrained to "
                f"{GUIDANCE_PROBE!r} wrote something else), so the output would not be constrained. Use a build with "
                "guidance, or drop the schema/grammar/forced tool call."
            )

    def probe(self, prompt_ids: Sequence[int], steps: int, watch: bool = True, exact: bool = False) -> dict[str, Any]:
        """A timed greedy decode of ``steps`` tokens after ``prompt_ids`` (see :func:`.probes.decode_probe`)."""
        control = CallControl()
        if not self.scheduler.acquire(control):
            raise GenerationError("the probe was cancelled while it waited for the model")
        try:
            budget = self.package.budget
            model = self._require().model
            return decode_probe(
                import_oga(),
                model,
                list(prompt_ids),
                steps,
                run=budget.feed_window,
                sliding_window=self.package.sliding_window,
                window=budget.window,
                watch=watch,
                exact=exact,
            )
        finally:
            self.scheduler.release()

    def _parser(self, prep: Prepared, options: GenerationOptions) -> OutputParser:
        """The parser of this call's output: stop strings, reasoning, the template's tool calls."""
        tpl = self.template_for(options)
        tools = prep.tools
        names = [t["function"]["name"] for t in tools]
        # Under a JSON grammar (structured output, a forced call: thinking is closed there unless it
        # was asked for) no reasoning block is written: a marker is then text inside a JSON string. A
        # regex or Lark grammar of the caller's may write one, and it is read as one.
        guidance = options.guidance
        json_out = guidance is not None and (guidance.shape is not None or guidance.type == "json_schema")
        constrained = json_out and options.enable_thinking is not True
        return OutputParser(
            stop=options.stop,
            reasoning_markers=None if constrained else tpl.reasoning_markers,
            tool_markers=tpl.tool_call_markers if tools else None,
            json_tool_calls=bool(tools) and tpl.tool_call_markers is None and has_tool_calls(tpl.family),
            parse_tool_calls=(
                functools.partial(parse_tool_calls, family=tpl.family, tool_names=names) if tools else None
            ),
            start_in_reasoning=prep.start_in_reasoning,
            max_tool_calls=None if options.parallel_tool_calls is not False else 1,
        )

    def _adapter_key(self, og: Any, adapter: LoraAdapter | None) -> str | None:
        """The runtime's name of the call's adapter (loaded and checked on first use), or None."""
        return None if adapter is None else self.adapters.key(og, self._require().model, adapter)

    def load_adapter(self, adapter: LoraAdapter) -> dict[str, int | None]:
        """Load and check ``adapter`` as a call choosing it does, in the model's turn; what ``doctor`` reports.

        Returns ``{"tensors": ..., "lora_inputs": ...}``: the file's tensors and the graph's LoRA
        inputs (None where they cannot be read here).

        Raises:
            AdapterError: the file is no adapter, or does not fit the model.
        """
        control = CallControl()
        if not self.scheduler.acquire(control):
            raise GenerationError("the adapter check was cancelled while it waited for the model")
        try:
            self._adapter_key(import_oga(), adapter)
        finally:
            self.scheduler.release()
        tensors, inputs = adapter_tensors(adapter.path), lora_inputs(self.package)
        return {
            "tensors": None if tensors is None else len(tensors),
            "lora_inputs": None if inputs is None else len(inputs),
        }

    def _generator(
        self,
        og: Any,
        prep: Prepared,
        search: dict[str, Any],
        signature: str,
        guidance: Any,
        reuse: bool,
        adapter: str | None,
    ) -> tuple[Any, int]:
        """A generator with the prompt in it: the kept one rewound (see :mod:`.kv_cache`), or a new one.

        A new generator gets the call's ``adapter`` (the runtime's name) before any token; the kept
        one already has it (its signature names the adapter).

        Returns the generator and how many prompt tokens it reused. A runtime that refuses to
        rewind or extend the kept generator gets a new one, and reuse stays off for the model.
        """
        prompt_ids, plan = prep.prompt_ids, prep.plan
        run = self.package.budget.feed_window
        if reuse:
            taken = self._kv.take(prompt_ids, signature, prep.images, prep.last_image_token, plan.max_length)
            if taken is not None:
                kept, keep = taken
                try:
                    kept.rewind_to(keep)
                    feed(kept, prompt_ids, keep, run)
                    return kept, keep
                except Exception as exc:  # noqa: BLE001 - OGA raises plain RuntimeError
                    self._kv.refuse(exc)
                    reuse = False
                del kept
        else:
            self._kv.clear()
        model = self._require().model
        params = og.GeneratorParams(model)
        max_length = plan.window if reuse and self._kv.may_keep(len(prompt_ids)) else plan.max_length
        # The runtime refuses a max_length below a sliding window baked into the graph; the
        # loop still stops at the planned number of new tokens.
        max_length = min(plan.window, max(max_length, self.package.sliding_window or 0))
        params.set_search_options(max_length=max_length, **search)
        if guidance is not None:
            params.set_guidance(guidance.type, guidance.data)
        generator = og.Generator(model, params)
        if adapter is not None:
            self.adapters.activate(generator, adapter)
        if prep.mm_inputs is not None:
            generator.set_inputs(prep.mm_inputs)
        else:
            feed(generator, prompt_ids, 0, run)
        return generator, 0

    def _step(self, generator: Any, never: frozenset[int]) -> Callable[[], None]:
        """The runtime's step, with ``never`` masked out of what it samples (see :func:`masked_logits`).

        A runtime that refuses to hand over or take back the logits gets the plain step (warned
        once, for the model): ``never`` ids then end the generation (the stop checker has them
        among the end ids) before the model is fed one.
        """
        plain: Callable[[], None] = generator.generate_next_token
        if not never or self._unmaskable is not None:
            return plain
        ids = sorted(never)

        def step() -> None:
            if self._unmaskable is None:
                try:
                    masked_logits(generator, ids)
                except Exception as exc:  # noqa: BLE001 - OGA raises plain RuntimeError
                    self._unmaskable = str(exc)
                    log.warning(
                        "%s: the runtime refused to mask the image markers out of the logits (%s); a generated "
                        "image marker ends the answer instead",
                        self.package.name,
                        exc,
                    )
            plain()

        return step

    def reset_cache(self) -> None:
        """Drop the cached generator (frees its KV cache)."""
        self._kv.clear()


def masked_logits(generator: Any, ids: list[int]) -> None:
    """Set the logits of ``ids`` to -inf for the generator's next step, so it never picks them.

    They are the logits the step would use (the runtime computes them once); a grammar's mask
    and the search options (repetition penalty, temperature, top-k/p) apply after, as they would
    without this.
    """
    logits = generator.get_logits()
    logits[..., ids] = -float("inf")
    generator.set_logits(logits)


def _generation_error(exc: Exception, guidance: Any) -> Exception:
    text = str(exc)
    if guidance is not None and "grammar" in text.lower():
        if "creating grammar" not in text.lower():  # it compiled, then failed while generating
            return InvalidRequestError(
                f"onnxruntime-genai rejected the {guidance.type} guidance while generating: {text}; "
                "simplify the schema/grammar (e.g. smaller repetition counts)"
            )
        return InvalidRequestError(
            f"the {guidance.type} guidance could not be compiled: {text}; fix the schema/grammar"
        )
    if "exceeds max length" in text:
        return ContextWindowExceededError(
            f"the runtime refused the prompt: {text}. This is a bug in the budget accounting; please report it.",
            prompt_tokens=-1,
            limit=-1,
            window=-1,
        )
    return GenerationError(f"onnxruntime-genai failed during generation: {text}")
