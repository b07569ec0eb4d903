"""The loaded model of one package, in this process, and the one generation loop.

A :class:`Session` owns ``og.Model`` + ``og.Tokenizer`` for a (folder, provider, session
options) key, loads them on first use, and runs one generation at a time in arrival
order (:class:`FifoLock`): a Ryzen AI laptop has one NPU. It keeps the last generator
so a call whose prompt extends the previous sequence (multi-turn chat, agent loops)
prefills only the new tokens (``kv_reuse``; when that is exact: :mod:`ryzenai_core.generation.kv_cache`).

The :class:`~ryzenai_core.engine.engine.Engine` runs a Session either in this process or in a
worker process; both use exactly this code.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import (
    ChatTemplateError,
    ContextWindowExceededError,
    GenerationError,
    GuidanceUnsupportedError,
    InvalidRequestError,
    ModelPackageError,
    RuntimeNotAvailableError,
    UnsupportedModelError,
)
from ..images import IMAGE_TYPES, InputSize, prepare_images, read_input_size
from ..messages import ChatMessage, RawPrompt, check_prompt_text, check_text, normalize_tools
from ..options import GenerationOptions, check_runtime_settings, resolve_search
from ..package.budget import BudgetPlan
from ..package.capabilities import load_problem
from ..package.folder import ModelPackage
from ..package.runtime import EpSearch, explain_ryzenai_failure, import_oga, prepare_ryzenai_runtime, runtime_info
from ..prompt.formats import has_tool_calls, parse_tool_calls
from ..prompt.templates import ChatTemplate, PackageTemplates
from ..request import resolve
from . import call
from .call import CallControl, abandoned_error, timeout_error
from .kv_cache import KVCache, feed, kv_reuse_default
from .streaming import Chunk, IncrementalDecoder, OutputParser, Timings, Usage
from .token_bytes import TokenBytes, byte_zero_token

__all__ = ["CallControl", "FifoLock", "Prepared", "Session", "SessionKey", "timeout_error"]

log = logging.getLogger(__name__)


class FifoLock:
    """A lock that serves waiters strictly in arrival order."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiters: deque[threading.Event] = deque()
        self._held = False

    def acquire(self, timeout: float | None = None) -> bool:
        """Wait for our turn (at most ``timeout`` seconds); whether we got it."""
        with self._lock:
            if not self._held and not self._waiters:
                self._held = True
                return True
            me = threading.Event()
            self._waiters.append(me)
        if me.wait(timeout):
            return True
        with self._lock:
            if me.is_set():  # handed over while the wait timed out
                return True
            self._waiters.remove(me)
            return False

    def release(self) -> None:
        """Hand the lock to the next waiter, if any."""
        with self._lock:
            if self._waiters:
                self._waiters.popleft().set()  # ownership passes directly
            else:
                self._held = False

    def __enter__(self) -> FifoLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


@dataclass(frozen=True)
class SessionKey:
    """What makes two loaded models the same one."""

    path: str
    provider: str | None = None
    num_threads: int | None = None
    release: str | None = None
    session_options: str = "{}"
    """Extra ONNX Runtime session options, as sorted JSON (overlaid on the package's)."""


@dataclass
class Prepared:
    """A rendered, tokenized, planned request."""

    prompt: str
    prompt_ids: list[int]
    plan: BudgetPlan
    dropped_messages: int = 0
    start_in_reasoning: bool = False
    tools: list[dict[str, Any]] = field(default_factory=list)
    images: str = ""
    """Digests of the prompt's images, in order ("" for text): part of the KV cache key."""
    mm_inputs: Any = None
    """The multimodal processor's inputs (expanded ids, pixel values); never pickled."""
    last_image_token: int = -1
    """Index of the prompt's last image token (-1 without images)."""

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "mm_inputs": None}


class Session:
    """One loaded model; see the module docstring."""

    def __init__(self, key: SessionKey) -> None:
        self.key = key
        self.package = ModelPackage.open(key.path, release=key.release)
        check_runtime_settings(key.provider, key.num_threads)
        self._templates = PackageTemplates(self.package)
        self.template = self._templates.default
        self._text_counts: dict[str, int] = {}
        self._load_lock = threading.Lock()
        self._gen_lock = FifoLock()
        self._model: Any = None
        self._tokenizer: Any = None
        self._end_ids: frozenset[int] = frozenset()
        self._kv = KVCache(self.package)
        self._holder: CallControl | None = None
        self._mm_processor: Any = None
        self._image_tokens: frozenset[int] | None = None
        self._bytes: TokenBytes | None = None
        self.load_seconds: float | None = None
        self.device: str | None = None
        """The execution provider that runs the model, as onnxruntime-genai names its device
        (``RyzenAI``, ``CPU``, ``DML``, ...), once loaded."""

    # ------------------------------------------------------------------ loading
    @property
    def loaded(self) -> bool:
        """Whether the model is in memory."""
        return self._model is not None

    def load(self) -> None:
        """Load the model and tokenizer (once). Thread-safe."""
        if self._model is not None:
            return
        with self._load_lock:
            if self._model is not None:
                return
            self._load()

    def _load(self) -> None:
        pkg = self.package
        provider = self.key.provider
        problem = load_problem(pkg, provider)
        if problem is not None:
            raise problem
        ep: EpSearch | None = None
        if pkg.is_ryzenai and provider is None:
            # What AMD's native loader reads, checked before it fails deep in native code; then the
            # EP library made findable as AMD's tools do, in the process that loads the model.
            for warning in [*pkg.check_npu_files(), *pkg.path_warnings]:
                log.warning(warning)
            ep = prepare_ryzenai_runtime()
        og = import_oga()
        start = time.perf_counter()
        try:
            config = og.Config(str(pkg.path))
            if provider is not None:
                config.clear_providers()
                if provider != "cpu":
                    config.append_provider(provider)
            threads = self.key.num_threads
            if threads is None and (provider == "cpu" or (provider is None and pkg.provider == "cpu")):
                threads = max(1, min(4, os.cpu_count() or 1))
            extra = json.loads(self.key.session_options)
            if threads is not None:
                extra["intra_op_num_threads"] = threads
            if extra:
                config.overlay(json.dumps({"model": {"decoder": {"session_options": extra}}}))
            if provider is not None and pkg.has_vision:
                # clear_providers() reaches the decoder only; the vision and embedding models
                # would still ask for the package's own provider.
                cleared: dict[str, Any] = {"session_options": {"provider_options": []}}
                parts = {p: cleared for p in ("vision", "embedding")}
                config.overlay(json.dumps({"model": parts}))
            model = og.Model(config)
            tokenizer = og.Tokenizer(model)
        except Exception as exc:  # noqa: BLE001 - OGA raises plain RuntimeError/OSError
            raise self._load_error(exc, ep) from exc
        end_ids = set(pkg.eos_token_ids)
        for marker in self.template.end_of_turn:
            ids = tokenizer.encode(marker)
            if len(ids) == 1:
                end_ids.add(int(ids[0]))
        try:
            end_ids.update(int(i) for i in tokenizer.eos_token_ids)
        except Exception:  # noqa: BLE001 - older OGA builds lack it
            pass
        # Generated text is decoded from the tokens' bytes where the vocabulary maps to them.
        self._bytes = TokenBytes.for_runtime(
            pkg.tokenizer_files, tokenizer.encode, lambda ids: tokenizer.decode(list(ids))
        )
        self.load_seconds = time.perf_counter() - start
        self.device = str(getattr(model, "device_type", "") or "") or _device_guess(provider, pkg.provider)
        self._tokenizer = tokenizer
        self._end_ids = frozenset(end_ids)
        self._model = model

    def _load_error(self, exc: Exception, ep: EpSearch | None = None) -> Exception:
        pkg = self.package
        text = str(exc)
        info = runtime_info()
        if "unsupported model_type" in text.lower():
            return UnsupportedModelError(
                f"{info.describe()} does not run model.type {pkg.model_type!r} of {pkg.name}: {text}. Upgrade "
                "onnxruntime-genai (on a Ryzen AI PC: the Ryzen AI release the package was built for), or check "
                "genai_config.json.",
                path=pkg.path / "genai_config.json",
            )
        if "session_options" in text and self.key.session_options != "{}":
            return InvalidRequestError(
                f"onnxruntime-genai rejected the session options {self.key.session_options}: {text}. Use option "
                "names and value types from onnxruntime-genai's genai_config.json reference."
            )
        if pkg.layout in ("custom-ops", "vitisai"):
            return RuntimeNotAvailableError(
                f"{pkg.name} uses the Ryzen AI {'1.3-1.6 custom-ops' if pkg.layout == 'custom-ops' else '1.4 VitisAI'} "
                f"layout, which only the matching Ryzen AI runtime can load; found {info.describe()}. "
                f"Use the Ryzen AI release the package was built for, or a newer package. ({text})"
            )
        provider = self.key.provider
        if provider not in (None, "cpu") and ("interface not available" in text.lower() or provider in text.lower()):
            return RuntimeNotAvailableError(
                f"provider={provider!r} is not available in {info.describe()}: {text}. Install the "
                f"onnxruntime-genai build for it (e.g. onnxruntime-genai-{provider} in place of the CPU one), or "
                "use provider='cpu'"
            )
        cause = explain_ryzenai_failure(text, ep) if pkg.provider == "RyzenAI" and provider is None else None
        if cause is not None:
            return RuntimeNotAvailableError(f"loading {pkg.name} on the NPU failed: {cause}. ({text})")
        if "ryzenai" in text.lower() or "vitisai" in text.lower() or "custom op" in text.lower():
            return RuntimeNotAvailableError(
                f"loading {pkg.name} needs the Ryzen AI execution provider ({pkg.provider}), which "
                f"{info.describe()} does not have: {text}. Run it in the Ryzen AI environment the installer "
                "created, on a PC with the NPU driver installed (e.g. `conda activate ryzen-ai-1.8.0`); to run "
                "its weights on the CPU anyway (only plain ONNX graphs can), pass provider='cpu'."
            )
        return ModelPackageError(
            f"onnxruntime-genai ({info.describe()}) could not load {pkg.path}: {text}. Check that the "
            "package is complete (`git lfs pull`) and built for this runtime version.",
            path=pkg.path,
        )

    @property
    def tokenizer(self) -> Any:
        """The ``og.Tokenizer`` (loads the model on first use)."""
        self.load()
        return self._tokenizer

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (no special tokens added: templates carry their own BOS).

        The whole text is encoded: onnxruntime-genai's tokenizer reads its input as a C
        string and would stop at the first NUL character (PDF and OCR text often holds
        them), so the text is encoded between NULs and each NUL becomes the vocabulary's
        own token for byte 0.

        Raises:
            InvalidRequestError: a lone surrogate, or a NUL for a tokenizer without a byte-0 token.
        """
        check_prompt_text(text)
        tokenizer = self.tokenizer
        if "\x00" not in text:
            return _int_list(tokenizer.encode(text))
        nul = self._nul_token_id()
        if nul is None:
            raise InvalidRequestError(
                f"the prompt holds a NUL character at position {text.index(chr(0))}, and the tokenizer of "
                f"{self.package.name} has no token for byte 0; remove NUL characters (text.replace('\\x00', ''))"
            )
        ids: list[int] = []
        for i, part in enumerate(text.split("\x00")):
            if i:
                ids.append(nul)
            if part:
                ids.extend(_int_list(tokenizer.encode(part)))
        return ids

    @functools.cached_property
    def _nul_token(self) -> tuple[int | None]:
        return (byte_zero_token(self.package.tokenizer_files),)

    def _nul_token_id(self) -> int | None:
        return self._nul_token[0]

    @property
    def _token_bytes(self) -> TokenBytes | None:
        self.load()
        return self._bytes

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids`` (special tokens skipped; invalid bytes become U+FFFD, nothing is dropped).

        Byte-level and byte-fallback vocabularies are decoded from the tokens' bytes
        (:class:`~ryzenai_core.generation.token_bytes.TokenBytes`): the runtime's decode ends at a NUL and
        drops the text after bytes that are not valid UTF-8. Other tokenizers use the runtime's
        decode between the byte-0 tokens, joined with NUL, so no text after one is lost.
        """
        if not len(ids):
            return ""
        table = self._token_bytes
        if table is not None:
            return table.decode([int(i) for i in ids])
        tokenizer = self.tokenizer
        nul = self._nul_token_id()
        if nul is None or nul not in ids:
            return str(tokenizer.decode(list(ids)))
        parts: list[list[int]] = [[]]
        for i in ids:
            if i == nul:
                parts.append([])
            else:
                parts[-1].append(int(i))
        return "\x00".join(str(tokenizer.decode(p)) if p else "" for p in parts)

    def incremental_decoder(self) -> IncrementalDecoder:
        """A decoder of generated ids into text deltas that add up to :meth:`decode`."""
        table = self._token_bytes
        return IncrementalDecoder(self.decode, token_bytes=table.table if table is not None else None)

    # ------------------------------------------------------------------ preparing
    def template_for(self, options: GenerationOptions) -> ChatTemplate:
        """The package's template, or the call's ``chat_template``."""
        return self._templates.get(options.chat_template)

    def resolve(self, options: GenerationOptions) -> GenerationOptions:
        """What the call's options mean for this package (see :func:`ryzenai_core.request.resolve`)."""
        return resolve(options, self.template_for(options), self.package.budget, self.count_text)

    def count_text(self, text: str) -> int:
        """Tokens of ``text`` alone (cached: fixed texts such as a tool call's framing are counted often)."""
        cache = self._text_counts
        if text not in cache:
            if len(cache) >= 1024:
                cache.clear()
            cache[text] = len(self.encode(text))
        return cache[text]

    def render(self, messages: Sequence[ChatMessage], options: GenerationOptions) -> str:
        """The prompt text for ``messages``."""
        return self._render(messages, self.resolve(options))

    def _render(self, messages: Sequence[ChatMessage], options: GenerationOptions) -> str:
        """:meth:`render` with options already resolved."""
        if not messages:
            raise InvalidRequestError("the message list is empty; send at least one user message")
        template = self.template_for(options)
        for i, m in enumerate(messages):
            if m.has_images and not self.package.has_vision:
                raise InvalidRequestError(
                    f"message #{i} ({m.role}) has an image, and {self.package.name} has no vision model; "
                    "send text only or use a multimodal package (e.g. Gemma 3)"
                )
            if m.has_images and m.role != "tool" and not template.renders_images(m.role):
                fix = (
                    "put the image in the first user message (the system message can keep its text)"
                    if m.role == "system"
                    else "use the package's own template, or one that renders {'type': 'image'} parts"
                )
                raise InvalidRequestError(
                    f"message #{i} ({m.role}) has an image, and the chat template of {self.package.name} "
                    f"({template.family}) renders no images in a {m.role} message; {fix}"
                )
        check_text(messages)
        extra = options.template_vars
        tools = normalize_tools(list(options.tools)) if options.tools else None
        tool_turns = [i for i, m in enumerate(messages) if m.role == "tool" or m.tool_calls]
        if (tools or tool_turns) and not template.supports_tools:
            what = f"{len(tools)} tool(s)" if tools else f"a tool call or result (message #{tool_turns[0]})"
            raise InvalidRequestError(
                f"the chat template of {self.package.name} ({template.family}) does not render tools, so "
                f"{what} would be silently left out of the prompt; send the call without tools, or use a "
                "package whose template has tools (Llama 3.2, Qwen3)"
            )
        view = [_template_view(m) for m in messages]
        try:
            return template.render(view, tools=tools, enable_thinking=options.enable_thinking, **extra)
        except ChatTemplateError as exc:
            # Templates such as Gemma 3's require user and assistant turns to alternate; two
            # system, user (or assistant) messages in a row are one turn to them: merge and render again.
            merged = _merge_consecutive(view)
            if "alternate" not in getattr(exc, "template_message", "") or len(merged) == len(view):
                raise
            return template.render(merged, tools=tools, enable_thinking=options.enable_thinking, **extra)

    # ------------------------------------------------------------------ images
    def _processor(self) -> Any:
        """The runtime's multimodal processor (vision packages only; loads the model)."""
        self.load()
        if self._mm_processor is None:
            self._mm_processor = self._model.create_multimodal_processor()
        return self._mm_processor

    def _prompt_ids(self, prompt: str, messages: Sequence[ChatMessage]) -> tuple[list[int], Any, str, int]:
        """Ids of a rendered prompt, with, for images, the processor's inputs, their key and last token.

        Without images: ``(ids, None, "", -1)``; with images, the ids the processor expanded.
        """
        if not any(m.has_images for m in messages):
            return self.encode(prompt), None, "", -1
        og = import_oga()
        images = prepare_images([(i, m.content) for i, m in enumerate(messages) if m.has_images], self._image_size)
        inputs = self._processor()(prompt, images=og.Images.open_bytes(*[img.png for img in images]))
        ids = [int(i) for i in _as_numpy(inputs["input_ids"]).reshape(-1)]
        soft = self._image_token_ids()
        last = max((n for n, t in enumerate(ids) if t in soft), default=-1)
        return ids, inputs, ",".join(img.digest for img in images), last

    @functools.cached_property
    def _image_size(self) -> InputSize | None:
        """The size the package's image pipeline resizes to: larger images are scaled down before encoding."""
        parts = self.package.vision_parts
        processor = parts.get("processor") if parts else None
        return read_input_size(self.package.path / processor) if processor else None

    def _image_token_ids(self) -> frozenset[int]:
        if self._image_tokens is None:
            found = set()
            for marker in ("<image_soft_token>", "<end_of_image>"):
                ids = self.encode(marker)
                if len(ids) == 1:
                    found.add(ids[0])
            self._image_tokens = frozenset(found)
        return self._image_tokens

    def count_tokens(self, messages: Sequence[ChatMessage], options: GenerationOptions) -> int:
        """Prompt tokens ``messages`` render to (images expanded to their tokens)."""
        return len(self._prompt_ids(self.render(messages, options), messages)[0])

    def prepare(
        self,
        messages: Sequence[ChatMessage] | RawPrompt,
        options: GenerationOptions,
        check: Callable[[], None] | None = None,
    ) -> Prepared:
        """Render, tokenize and plan; apply the overflow policy (``check`` runs before each render).

        ``options`` are already resolved (:meth:`resolve`), as :meth:`stream` does once per call.

        Raises:
            ContextWindowExceededError: the prompt does not fit (policy ``error``, or nothing
                left to drop; a raw prompt is never cut).
        """
        budget = self.package.budget
        if isinstance(messages, RawPrompt):
            ids = list(messages.token_ids) if messages.token_ids is not None else self.encode(messages.text or "")
            vocab = self.package.config["model"].get("vocab_size")
            bad = [i for i in ids if i < 0 or (isinstance(vocab, int) and i >= vocab)]
            if bad:
                raise InvalidRequestError(
                    f"token id {bad[0]} is outside the vocabulary (0..{vocab - 1 if isinstance(vocab, int) else '?'}); "
                    "send ids produced by this package's tokenizer"
                )
            text = messages.text if messages.text is not None else self.decode(ids)
            plan = budget.plan(len(ids), options.max_new_tokens)
            tools = normalize_tools(list(options.tools)) if options.tools else []
            return Prepared(text, ids, plan, 0, False, tools)
        check = check or (lambda: None)

        def attempt(msgs: list[ChatMessage]) -> tuple[str, tuple[list[int], Any, str, int], BudgetPlan]:
            check()
            prompt = self._render(msgs, options)
            tokens = self._prompt_ids(prompt, msgs)
            return prompt, tokens, budget.plan(len(tokens[0]), options.max_new_tokens, images=tokens[1] is not None)

        msgs = list(messages)
        dropped = 0
        try:
            prompt, tokens, plan = attempt(msgs)
        except ContextWindowExceededError as exc:
            if options.overflow != "drop_oldest":
                raise
            # Find the fewest oldest turns to drop by bisection: a few renders, not one per turn.
            steps = _drop_steps(msgs)
            if not steps:
                raise self._nothing_to_drop(exc) from None
            fitting = {}  # drops -> the prepared prompt, for each count that fits
            try:
                fitting[len(steps)] = attempt(_after_drops(msgs, len(steps)))
            except ContextWindowExceededError as last:
                raise self._nothing_to_drop(last) from None
            lo, hi = 1, len(steps)  # hi always fits
            while lo < hi:
                mid = (lo + hi) // 2
                try:
                    fitting[mid] = attempt(_after_drops(msgs, mid))
                    hi = mid
                except ContextWindowExceededError:
                    lo = mid + 1
            dropped = sum(steps[:hi])
            prompt, tokens, plan = fitting[hi]
        tpl = self.template_for(options)
        markers = tpl.reasoning_markers
        start_in_reasoning = bool(markers) and prompt.rstrip("\n").endswith(markers[0]) if markers else False
        tools = normalize_tools(list(options.tools)) if options.tools else []
        ids, inputs, images, last_image = tokens
        return Prepared(prompt, ids, plan, dropped, start_in_reasoning, tools, images, inputs, last_image)

    @staticmethod
    def _nothing_to_drop(exc: ContextWindowExceededError) -> ContextWindowExceededError:
        return ContextWindowExceededError(
            f"{exc} Dropping old turns did not help: the system prompt and the newest message "
            f"alone take {exc.prompt_tokens} tokens.",
            prompt_tokens=exc.prompt_tokens,
            limit=exc.limit,
            window=exc.window,
        )

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
    ) -> Generator[Chunk, None, None]:
        """Stream the answer to ``messages`` (or a raw prompt). Closing the iterator stops generation.

        ``control`` carries cancellation, the timeout and the phase (see :class:`CallControl`).
        """
        t_call = time.perf_counter()
        control = control or CallControl()
        self.refuse(options)
        self.load()
        control.check_deadline()  # it may have waited in a queue before this
        control.budget_name = options.called("max_new_tokens")
        control.enter("preparing")
        options = self.resolve(options)
        prepared = self.prepare(messages, options, control.check_deadline)
        control.prompt_tokens = len(prepared.prompt_ids)
        return self._stream(prepared, options, control, t_call)

    def _acquire(self, control: CallControl) -> bool:
        """Wait for the model: False if cancelled; stops an unread stream holding it (see ABANDON_AFTER)."""
        if self._gen_lock.acquire(timeout=0):
            return True
        control.enter("queued")
        while True:
            wait = call.QUEUED_POLL
            if control.deadline is not None:
                wait = min(call.QUEUED_POLL, max(0.0, control.deadline - time.monotonic()))
            if self._gen_lock.acquire(timeout=wait):
                return True
            control.check_deadline()
            if control.cancel.is_set():
                return False
            self._preempt_idle_holder()

    def _preempt_idle_holder(self) -> None:
        holder = self._holder
        if holder is None:
            return
        now = time.monotonic()
        with holder.lock:
            if holder.preempted:
                return
            suspended = holder.suspended_since is not None and now - holder.suspended_since >= call.ABANDON_AFTER
            idle = holder.idle_since is not None and now - holder.idle_since >= call.ABANDON_AFTER
            if not (suspended or idle):
                return
            holder.preempted = True
            holder.cancel.set()
            if suspended:
                # Its generator is paused at a yield and will not touch the model again (it
                # checks `_holder` under the same lock when resumed): hand the model over.
                self._holder = None
                self._gen_lock.release()

    def _stream(
        self, prep: Prepared, options: GenerationOptions, control: CallControl, t_call: float
    ) -> Generator[Chunk, None, None]:
        cancel = control.cancel
        og = import_oga()
        tpl = self.template_for(options)
        search = resolve_search(options, dict(self.package.search))
        guidance = options.guidance
        if guidance is not None and not hasattr(og.GeneratorParams, "set_guidance"):
            raise GuidanceUnsupportedError(
                f"constrained decoding ({guidance.type}) needs onnxruntime-genai with guidance support; "
                f"{runtime_info().describe()} lacks it. Upgrade onnxruntime-genai, or drop the schema/grammar."
            )
        parser = OutputParser(
            stop=options.stop,
            reasoning_markers=tpl.reasoning_markers,
            tool_markers=tpl.tool_call_markers if prep.tools else None,
            json_tool_calls=bool(prep.tools) and tpl.tool_call_markers is None and has_tool_calls(tpl.family),
            parse_tool_calls=(
                functools.partial(
                    parse_tool_calls, family=tpl.family, tool_names=[t["function"]["name"] for t in prep.tools]
                )
                if prep.tools
                else None
            ),
            start_in_reasoning=prep.start_in_reasoning,
            max_tool_calls=None if options.parallel_tool_calls is not False else 1,
        )
        decoder = self.incremental_decoder()
        plan = prep.plan
        reuse = self._kv.enabled(options.kv_reuse, options.called("kv_reuse"))
        reuse = reuse and guidance is None and not (search.get("do_sample") and options.seed is not None)
        signature = json.dumps(search, sort_keys=True)

        t_wait = time.perf_counter()
        if not self._acquire(control):
            return
        self._holder = control
        owner = True
        deadline = control.deadline
        generator = None
        n = 0
        finish = "length"
        timings = Timings(queued=time.perf_counter() - t_wait)
        first_at: float | None = None
        generated: list[int] = []
        pending: list[int] = []  # generated ids not yet reported in a chunk
        try:
            if cancel.is_set():
                finish = "cancelled"
                return
            control.enter("prefill")
            t_prefill = time.perf_counter()
            generator, reused = self._generator(og, prep, plan, search, signature, guidance, reuse)
            timings.reused_prompt_tokens = reused
            timings.prefill = time.perf_counter() - t_prefill
            control.check_deadline()
            control.enter("generating")
            # The per-token loop: bound methods looked up once; the runtime's step is the only
            # expensive call in it.
            cancelled, is_done, step = cancel.is_set, generator.is_done, generator.generate_next_token
            next_tokens, end_ids = generator.get_next_tokens, self._end_ids
            decode, parse, max_new, monotonic = decoder.feed, parser.feed, plan.max_new_tokens, time.monotonic
            while n < max_new:
                if cancelled():
                    finish = "cancelled"
                    break
                if deadline is not None and monotonic() > deadline:
                    control.tokens = n
                    raise control.timeout_error()
                if is_done():
                    finish = "stop"
                    break
                step()
                token = int(next_tokens()[0])
                generated.append(token)
                n += 1
                if first_at is None:
                    first_at = time.perf_counter()
                if token in end_ids:
                    finish = "stop"
                    break
                pending.append(token)
                content, reasoning = parse(decode(token))
                if content or reasoning:
                    control.suspended_since = monotonic()
                    yield Chunk(content, reasoning, token_ids=pending)
                    with control.lock:
                        control.suspended_since = None
                        owner = self._holder is control  # else it was handed to a call that waited
                    if not owner:
                        raise abandoned_error(n)
                    pending = []
                if parser.stopped:
                    finish = "stop"
                    break
            if finish == "length" and guidance is not None and not _complete_json(guidance, decoder, generated):
                raise GenerationError(
                    f"the constrained output ({guidance.type}) was not complete after {plan.max_new_tokens} "
                    f"tokens (max_new_tokens {plan.requested_new_tokens}, window {plan.window}); raise "
                    "max_new_tokens or bound the schema's strings and arrays"
                )
        except GeneratorExit:
            finish = "cancelled"
            raise
        except (GenerationError, GuidanceUnsupportedError, InvalidRequestError):
            if owner:
                self._discard(generator)
            generator = None
            raise
        except Exception as exc:  # noqa: BLE001 - runtime errors from OGA
            self._discard(generator)
            generator = None
            raise _generation_error(exc, guidance) from exc
        finally:
            with control.lock:
                control.suspended_since = None
                owner = owner and self._holder is control
            if owner:
                if generator is not None:
                    if reuse and finish != "cancelled":
                        self._kv.store(generator, prep.prompt_ids, n, signature, plan.window, prep.images)
                    else:
                        self._discard(generator)
                self._holder = None
                self._gen_lock.release()
        if finish == "cancelled":
            return
        content, reasoning = parser.feed(decoder.flush())
        c2, r2 = parser.finish()
        content, reasoning = content + c2, reasoning + r2
        if parser.tool_calls and finish == "stop":
            finish = "tool_calls"
        end = time.perf_counter()
        timings.total = end - t_call
        if first_at is not None:
            timings.time_to_first_token = first_at - t_call
            if n > 1 and end > first_at:
                timings.decode_tokens_per_second = (n - 1) / (end - first_at)
        yield Chunk(
            text=content,
            reasoning=reasoning,
            tool_calls=list(parser.tool_calls),
            finish_reason=finish,
            usage=Usage(len(prep.prompt_ids), n),
            timings=timings,
            plan=plan,
            token_ids=pending,
            dropped_messages=prep.dropped_messages,
            stop_sequence=parser.stop_sequence,
            provider=self.device,
        )

    def _discard(self, generator: Any) -> None:
        self._kv.discard(generator)
        del generator

    def _generator(
        self,
        og: Any,
        prep: Prepared,
        plan: BudgetPlan,
        search: dict[str, Any],
        signature: str,
        guidance: Any,
        reuse: bool,
    ) -> tuple[Any, int]:
        """A generator with the prompt in it: the kept one rewound (see :mod:`.kv_cache`), or a new one.

        Returns the generator and how many prompt tokens it reused. A runtime that refuses to
        rewind or extend the kept generator gets a new one, and reuse stays off for the model.
        """
        prompt_ids = prep.prompt_ids
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
        params = og.GeneratorParams(self._model)
        max_length = plan.window if reuse and self._kv.may_keep(len(prompt_ids)) else plan.max_length
        # The runtime refuses a max_length below a sliding window baked into the graph; the
        # loop still stops at the planned number of new tokens.
        max_length = min(plan.window, max(max_length, self.package.sliding_window or 0))
        params.set_search_options(max_length=max_length, **search)
        if guidance is not None:
            params.set_guidance(guidance.type, guidance.data)
        generator = og.Generator(self._model, params)
        if prep.mm_inputs is not None:
            generator.set_inputs(prep.mm_inputs)
        else:
            feed(generator, prompt_ids, 0, run)
        return generator, 0

    def reset_cache(self) -> None:
        """Drop the cached generator (frees its KV cache)."""
        self._kv.clear()


def _device_guess(provider: str | None, package_provider: str) -> str:
    """The device a model runs on, for runtimes without ``Model.device_type``: OGA's names."""
    chosen = provider or package_provider
    return {"cpu": "CPU", "dml": "DML"}.get(chosen, chosen)


def _template_view(message: ChatMessage) -> ChatMessage:
    """The message as the chat template sees it: each image part is ``{"type": "image"}``."""
    if not message.has_images or not isinstance(message.content, list):
        return message
    parts = [{"type": "image"} if p.get("type") in IMAGE_TYPES else p for p in message.content]
    return dataclasses.replace(message, content=parts)


def _merge_consecutive(messages: Sequence[ChatMessage]) -> list[ChatMessage]:
    """Consecutive plain system, user or assistant messages joined into one (texts by a blank line)."""
    out: list[ChatMessage] = []
    for m in messages:
        prev = out[-1] if out else None
        plain = m.role in ("system", "user", "assistant") and not m.tool_calls and m.reasoning is None
        if prev is not None and plain and prev.role == m.role and not prev.tool_calls and prev.reasoning is None:
            if isinstance(prev.content, str) and isinstance(m.content, str):
                content: str | list[dict[str, Any]] = f"{prev.content}\n\n{m.content}"
            else:
                content = _parts(prev.content) + [{"type": "text", "text": "\n\n"}] + _parts(m.content)
            out[-1] = dataclasses.replace(prev, content=content)
        else:
            out.append(m)
    return out


def _parts(content: str | list[dict[str, Any]]) -> list[dict[str, Any]]:
    return list(content) if isinstance(content, list) else [{"type": "text", "text": content}]


def _int_list(ids: Any) -> list[int]:
    """Python ints of the runtime's token ids (a numpy array: one conversion, not one per id)."""
    return list(ids.tolist()) if hasattr(ids, "tolist") else [int(i) for i in ids]


def _as_numpy(tensor: Any) -> Any:
    return tensor.as_numpy() if hasattr(tensor, "as_numpy") else tensor


def _turn_end(msgs: list[ChatMessage], i: int) -> int:
    """End (exclusive) of the turn at ``i``.

    A user message goes with the replies to it (up to the next user message), so what is left
    still starts with a user turn, as templates that need turns to alternate (Gemma 3's)
    require; when those replies hold the newest message, which stays, it goes alone. An
    assistant's tool calls go with their results.
    """
    end = i + 1
    if msgs[i].role == "user":
        while end < len(msgs) and msgs[end].role in ("assistant", "tool"):
            end += 1
        return end if end < len(msgs) else i + 1
    if msgs[i].tool_calls:
        while end < len(msgs) and msgs[end].role == "tool":
            end += 1
    return end


def _oldest_droppable(msgs: list[ChatMessage]) -> int | None:
    """Index of the oldest turn that may go: not a system prompt, not holding the newest message.

    A turn with tool calls goes with all its tool results, so one whose results reach the
    newest message stays (a tool result is never left without its call).
    """
    for i, m in enumerate(msgs[:-1]):
        if m.role != "system":
            return i if _turn_end(msgs, i) < len(msgs) else None
    return None


def _drop_steps(msgs: list[ChatMessage]) -> list[int]:
    """How many messages each successive oldest-turn drop removes, until nothing may go."""
    work = list(msgs)
    steps = []
    while (victim := _oldest_droppable(work)) is not None:
        steps.append(_drop_turn(work, victim))
    return steps


def _after_drops(msgs: list[ChatMessage], k: int) -> list[ChatMessage]:
    """``msgs`` after its ``k`` oldest droppable turns went."""
    work = list(msgs)
    for _ in range(k):
        victim = _oldest_droppable(work)
        if victim is None:
            break
        _drop_turn(work, victim)
    return work


def _drop_turn(msgs: list[ChatMessage], i: int) -> int:
    """Drop the turn at ``i`` (a call with its tool results); how many messages went."""
    end = _turn_end(msgs, i)
    del msgs[i:end]
    return end - i


def _complete_json(guidance: Any, decoder: IncrementalDecoder, generated: list[int]) -> bool:
    """A JSON-schema output that hit the token limit exactly when it was complete."""
    if guidance.type != "json_schema":
        return False
    try:
        json.loads(decoder.decode_all(generated))
        return True
    except ValueError:
        return False


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
