"""A scripted stand-in for a model, for the faces' tests: :class:`FakeModel` (the ``fake_model`` fixture).

While the fixture is on, every LLM engine a face opens (``Engine.get``, whatever its settings) is
a :class:`FakeEngine`: the real :class:`~ryzenai_core.engine.engine.Engine` of the package (its
folder read, its budget, templates and name), whose backend plays a script instead of running a
model. Nothing is loaded and no worker starts, so the faces' conversions, options, metadata,
callbacks and events are tested in ``tests/unit`` in milliseconds.

The backend is a real :class:`~ryzenai_core.engine.inflight.Backend`: a face's call goes through
the in-flight call, its waits, deadline, cancellation and errors as a model's does. It receives
the :class:`~ryzenai_core.request.Request` the real engine would (``FakeModel.requests``: assert
on what a face sent) and prepares it with the core's own code over the package's tokenizer
alone (no model): the options resolve (tools, response formats, the budget of constrained
output), the template renders, the budget plans, ``drop_oldest`` drops, and a bad request fails
with the core's typed error, word for word. ``count_tokens``, ``render``, ``encode`` and
``decode`` are the real ones. Then it plays the call's :class:`Answer`:

    fake.answer("Hello there")                       # what the model writes
    fake.answer("<think>\\nhm\\n</think>\\n\\nfour")      # reasoning split out by the template's markers
    fake.answer('<tool_call>\\n{"name": "add", "arguments": {"a": 1, "b": 2}}\\n</tool_call>')
    fake.answer("Hello", error=WorkerDiedError("..."))  # output, then an error
    fake.fail(GenerationError("boom"))                # an error before any output
    fake.answer("slow", delay=0.2)                    # seconds before each chunk
    fake.answer(chunks=[Chunk("a"), Chunk(...)])     # exactly these chunks
    fake.respond(lambda request: ...)                 # what it writes for calls not scripted, by request

What the model "writes" is tokenized with the package's tokenizer and fed token by token through
the core's incremental decoder and output parser, as a model's tokens are: the call's stop strings
cut it (``stop_sequence``), ``max_new_tokens`` ends it (``finish_reason="length"``), reasoning
and tool calls are split out in the template family's format, and the last chunk carries the
tool calls, usage, timings, plan, dropped messages and provider. Calls with no answer left in the
script write what :meth:`FakeModel.respond` says, else :data:`DEFAULT_WRITES`. ``tests/integration/test_fake_contract.py`` runs the same
scripted conversations through this and through the fixture models and compares the chunks, so
the fake cannot drift from the real thing.

Prompts with images are refused (expanding an image to its tokens is the runtime's processor's
work, which needs the model): image tests run on the vision fixture in ``tests/integration``.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ryzenai_core.engine.engine import Engine
from ryzenai_core.engine.inflight import Backend, PendingCall
from ryzenai_core.errors import GenerationTimeoutError
from ryzenai_core.generation.call import CallControl, Phase
from ryzenai_core.generation.kv_cache import KVCache
from ryzenai_core.generation.prompt_builder import Prepared, PromptBuilder
from ryzenai_core.generation.streaming import Chunk, FinishReason, OutputParser, Timings, Usage
from ryzenai_core.generation.tokens import Tokens, tokens_without_model
from ryzenai_core.lifecycle import Registry
from ryzenai_core.messages import RawPrompt
from ryzenai_core.options import GenerationOptions
from ryzenai_core.package.folder import ModelPackage
from ryzenai_core.prompt.formats import has_tool_calls, parse_tool_calls
from ryzenai_core.request import Request, instructed

__all__ = ["DEFAULT_WRITES", "Answer", "FakeBackend", "FakeEngine", "FakeModel"]

#: What the fake model writes when the script has no answer left: plain prose, longer than the
#: output limits tests set (so ``max_tokens`` ends it, as a random-weight model's answer).
DEFAULT_WRITES = "The NPU pads every prompt to a bucket, and the window holds the prompt and the answer. " * 8

#: How the fake names the device that ran a call (the last chunk's ``provider``), as the CPU runtime does.
PROVIDER = "CPU"


@dataclass
class Answer:
    """One call's script.

    Attributes:
        writes: what the model writes (markers included: ``<think>``, the family's tool calls).
        chunks: exactly these chunks instead (nothing is parsed or counted; the first error
            of ``error`` still follows them).
        error: raised after the output (before any, when there is none): the call's error.
        delay: seconds before each chunk (the first one included).
        timings: the last chunk's timings (default: measured, as a model's).
        reused_prompt_tokens: prompt tokens reported as served from the KV cache.
        provider: the device the last chunk names.
        cut: values of structured output reported as cut short (``finish_reason`` is then ``length``).
    """

    writes: str = DEFAULT_WRITES
    chunks: list[Chunk] | None = None
    error: BaseException | None = None
    delay: float = 0.0
    timings: Timings | None = None
    reused_prompt_tokens: int = 0
    provider: str | None = PROVIDER
    cut: list[str] = field(default_factory=list)


class FakeModel:
    """The script and the record of every fake engine of one test (see the module docstring).

    Attributes:
        requests: every request a fake engine received, in order.
        registry: the registry that makes every LLM engine a :class:`FakeEngine` (the fixture
            puts it in ``Engine.registry`` for the test).
    """

    def __init__(self) -> None:
        self.requests: list[Request] = []
        self.registry = FakeRegistry(self)
        self._answers: list[Answer] = []
        self._respond: Callable[[Request], str] | None = None
        self._lock = threading.Lock()

    def answer(self, writes: str = DEFAULT_WRITES, **script: Any) -> FakeModel:
        """Queue the answer of the next call (see :class:`Answer` for ``script``); returns self."""
        with self._lock:
            self._answers.append(Answer(writes, **script))
        return self

    def fail(self, error: BaseException) -> FakeModel:
        """Queue a call that fails with ``error`` before any output."""
        return self.answer("", error=error)

    def respond(self, writes: Callable[[Request], str]) -> FakeModel:
        """Answer every call the queue has no answer for with ``writes(request)`` (a model as a function); returns self."""
        self._respond = writes
        return self

    def next_answer(self, request: Request) -> Answer:
        """The answer of the next call: queued, else :meth:`respond`'s, else :data:`DEFAULT_WRITES`."""
        with self._lock:
            if self._answers:
                return self._answers.pop(0)
        return Answer(self._respond(request)) if self._respond is not None else Answer()

    def record(self, request: Request) -> None:
        """A fake engine received ``request``."""
        with self._lock:
            self.requests.append(request)

    @property
    def request(self) -> Request:
        """The last request a fake engine received."""
        assert self.requests, "no call reached the engine"
        return self.requests[-1]

    @property
    def options(self) -> GenerationOptions:
        """The options of the last request."""
        return self.request.options

    def engines(self) -> list[FakeEngine]:
        """The fake engines opened so far."""
        return list(self.registry.engines(FakeEngine).values())


class FakeRegistry(Registry):
    """A registry whose LLM engines are :class:`FakeEngine` s (made from the engine ``Engine.get`` creates)."""

    def __init__(self, model: FakeModel) -> None:
        super().__init__()
        self.model = model

    def get(self, key: Hashable, create: Callable[[], Any], name: tuple[Hashable, Hashable] | None = None) -> Any:
        """The engine of ``key``: ``create()``'s real engine made fake (its package, key and execution kept)."""

        def fake() -> Any:
            engine = create()
            if isinstance(engine, Engine) and not isinstance(engine, FakeEngine):
                return FakeEngine(engine.key, engine.execution, engine.package, self.model)
            return engine

        return super().get(key, fake, name)


class FakeEngine(Engine):
    """An :class:`Engine` whose backend is a :class:`FakeBackend` (the package, budget and templates are real)."""

    def __init__(self, key: Any, execution: Any, package: ModelPackage, model: FakeModel) -> None:
        super().__init__(key, execution, package)
        self.fake = FakeBackend(package, model)

    @property
    def backend(self) -> Any:
        """The fake backend (never a model in this process or a worker)."""
        return self.fake


class FakeBackend(Backend):
    """Plays :class:`Answer` s for one package; prepares each request as the real session does."""

    def __init__(self, package: ModelPackage, model: FakeModel) -> None:
        self.package = package
        self.model = model
        self.requests: list[Request] = []

    @functools.cached_property
    def tokens(self) -> Tokens:
        """The package's tokenizer, loaded without its model."""
        tokens = tokens_without_model(self.package)
        assert tokens is not None, "the fake engine needs a runtime that makes a tokenizer without a model (0.16+)"
        return tokens

    @functools.cached_property
    def prompts(self) -> PromptBuilder:
        """The core's prompt builder over the tokenizer alone."""
        return PromptBuilder(self.package, self.tokens, _no_processor)

    # ------------------------------------------------------------------ what Engine calls besides streams
    def call(self, method: str, *args: Any, timeout: float | None = None) -> Any:
        """``count_tokens``, ``render``, ``encode``, ``count_text``, ``decode`` (the real ones) and ``load``."""
        if method == "load":
            return 0.0
        if method in ("count_tokens", "render"):
            return getattr(self.prompts, method)(*args)
        if method in ("encode", "count_text", "decode"):
            return getattr(self.tokens, method)(*args)
        raise NotImplementedError(f"the fake engine has no {method!r}")

    def close(self) -> None:
        """Nothing to free."""

    # ------------------------------------------------------------------ the Backend contract
    def ensure_loaded(self) -> None:
        """Nothing to load."""

    def precheck(self, request: Request) -> None:
        """Record the request (every call reaches here first); refuse what the session refuses before loading."""
        self.requests.append(request)
        self.model.record(request)
        KVCache(self.package).enabled(request.options.kv_reuse, request.options.called("kv_reuse"))

    def launch(self, call: PendingCall) -> None:
        """Play the next answer on a producer thread of its own (as the inline backend runs a model)."""
        answer, put = self.model.next_answer(call.request), call.put

        def produce() -> None:
            try:
                for chunk in self.play(call.request, answer, call.control):
                    put(chunk)
                put(None)
            except BaseException as exc:  # noqa: BLE001 - every failure goes to the caller
                put(exc)

        threading.Thread(target=produce, daemon=True, name="fake-generation").start()

    def timed_out(self, call: PendingCall) -> GenerationTimeoutError:
        """Cancel the call; its timeout error."""
        call.control.cancel.set()
        return call.control.timeout_error()

    def orphan(self, call: PendingCall) -> None:
        """Cancel the call nobody reads."""
        call.control.cancel.set()

    def finish(self, call: PendingCall) -> None:
        """Cancel the call unless it ended."""
        if not call.done:
            call.control.cancel.set()

    # ------------------------------------------------------------------ one call
    def prepare(self, request: Request) -> tuple[Prepared, GenerationOptions]:
        """The request's prompt and resolved options, as the session prepares them (typed errors alike)."""
        options = request.options
        resolved = self.prompts.resolve(options)
        messages = request.messages
        if not isinstance(messages, RawPrompt):
            messages = instructed(messages, options)
        return self.prompts.prepare(messages, resolved), resolved

    def play(self, request: Request, answer: Answer, control: CallControl) -> Any:
        """The chunks of one call (a generator); raises the answer's error after its output."""
        t_call = time.perf_counter()
        control.enter(Phase.PREPARING)
        prep, options = self.prepare(request)
        control.prompt_tokens = len(prep.prompt_ids)
        control.check_deadline()
        control.enter(Phase.PREFILL)
        control.enter(Phase.GENERATING)
        if answer.chunks is not None:
            for chunk in answer.chunks:
                if not _wait(answer.delay, control):
                    return
                yield chunk
            if answer.error is not None:
                raise answer.error
            return
        parser = self.parser(prep, options)
        decoder = self.tokens.incremental_decoder()
        ids = self.tokens.encode(answer.writes) if answer.writes else []
        limit = prep.plan.max_new_tokens
        finish: FinishReason | None = None
        n, pending, first_at = 0, [], None
        for token in ids:
            if n >= limit:  # the model's next token is past the limit
                finish = FinishReason.LENGTH
                break
            if control.cancel.is_set():
                return
            control.check_deadline(n)
            n += 1
            first_at = first_at or time.perf_counter()
            pending.append(token)
            content, reasoning = parser.feed(decoder.feed(token))
            if content or reasoning:
                if not _wait(answer.delay, control):
                    return
                yield Chunk(content, reasoning, token_ids=pending)
                pending = []
            if parser.stopped:
                finish = FinishReason.STOP
                break
        if finish is None:  # all written: the model's end-of-turn token is next (counted, never shown), if it fits
            finish = FinishReason.LENGTH if n >= limit else FinishReason.STOP
            n += finish == FinishReason.STOP
        if answer.error is not None:
            raise answer.error
        if not _wait(answer.delay, control):
            return
        content, reasoning = parser.feed(decoder.flush())
        tail, tail_reasoning = parser.finish()
        end = time.perf_counter()
        timings = answer.timings or Timings(
            time_to_first_token=(first_at or end) - t_call,
            decode_tokens_per_second=(n - 1) / (end - first_at) if first_at and n > 1 and end > first_at else None,
            total=end - t_call,
            reused_prompt_tokens=answer.reused_prompt_tokens,
        )
        if finish == FinishReason.STOP and parser.tool_calls:
            finish = FinishReason.TOOL_CALLS
        yield Chunk(
            text=content + tail,
            reasoning=reasoning + tail_reasoning,
            tool_calls=list(parser.tool_calls),
            finish_reason=FinishReason.LENGTH if answer.cut else finish,
            cut=list(answer.cut),
            usage=Usage(len(prep.prompt_ids), n),
            timings=timings,
            plan=prep.plan,
            token_ids=pending,
            dropped_messages=prep.dropped_messages,
            stop_sequence=parser.stop_sequence,
            provider=answer.provider,
        )

    def parser(self, prep: Prepared, options: GenerationOptions) -> OutputParser:
        """The output parser the session makes for a call (stop strings, reasoning, the template's tool calls)."""
        template = self.prompts.template_for(options)
        tools = prep.tools
        names = [t["function"]["name"] for t in tools]
        guidance = options.guidance
        json_out = guidance is not None and (guidance.shape is not None or guidance.type == "json_schema")
        constrained = json_out and options.enable_thinking is not True
        return OutputParser(
            stop=options.stop,
            reasoning_markers=None if constrained else template.reasoning_markers,
            tool_markers=template.tool_call_markers if tools else None,
            json_tool_calls=bool(tools) and template.tool_call_markers is None and has_tool_calls(template.family),
            parse_tool_calls=(
                functools.partial(parse_tool_calls, family=template.family, tool_names=names) if tools else None
            ),
            start_in_reasoning=prep.start_in_reasoning,
            max_tool_calls=None if options.parallel_tool_calls is not False else 1,
        )


def _wait(seconds: float, control: CallControl) -> bool:
    """Sleep ``seconds`` unless the call is cancelled first; whether it goes on. Raises its timeout error."""
    until = time.monotonic() + seconds
    while not control.cancel.is_set() and (left := until - time.monotonic()) > 0:
        time.sleep(min(left, 0.005))
        control.check_deadline()
    control.check_deadline()
    return not control.cancel.is_set()


def _no_processor() -> Any:
    raise AssertionError(
        "the fake engine prepares text prompts only: expanding an image to its tokens is the runtime's "
        "processor's work (image tests belong in tests/integration)"
    )


def chunk_shape(chunk: Chunk) -> dict[str, Any]:
    """Which of a chunk's fields are set, and their types: what the contract test compares."""
    return {name: type(getattr(chunk, name)).__name__ for name in _SHAPE if getattr(chunk, name) not in (None, [], "")}


_SHAPE: Sequence[str] = (
    "text",
    "reasoning",
    "tool_calls",
    "finish_reason",
    "usage",
    "timings",
    "plan",
    "token_ids",
    "stop_sequence",
    "provider",
    "cut",
)
