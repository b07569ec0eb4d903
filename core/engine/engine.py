"""The one object the adapters talk to: :class:`Engine`.

    Engine.get(model, provider=..., execution=...)      one per (folder, provider, threads, release);
                                                        one per NPU model (see Engine.get)
      .stream(messages, options)   -> Iterator[Chunk]    sync
      .astream(messages, options)  -> AsyncIterator[Chunk]
      .generate / .agenerate       -> Completion         aggregates of the stream
      .count_tokens / .encode / .decode / .render

Execution:
- ``"process"`` (default): the model lives in a worker process
  (:mod:`ryzenai_core.engine.worker`). onnxruntime-genai holds the GIL during prefill and decode;
  in a separate process that cannot freeze the caller's threads or asyncio loop, and a
  runtime crash becomes an error for the calls in flight while the next call starts a
  fresh worker.
- ``"inline"``: the model lives in this process (debugging, micro-benchmarks). Async calls
  then run on a thread and the event loop stalls while the runtime holds the GIL.

Set the default with the ``RYZENAI_LLM_EXECUTION`` environment variable.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import threading
from collections.abc import AsyncGenerator, Generator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, cast

from ..adapters import LoraAdapter
from ..errors import InvalidRequestError
from ..generation.loader import SessionKey
from ..generation.streaming import Chunk, Completion, aaggregate, aggregate
from ..lifecycle import REGISTRY, Registry
from ..messages import ChatMessage, RawPrompt
from ..options import Execution, GenerationOptions, check_runtime_settings, llm_execution
from ..package.budget import ContextBudget
from ..package.folder import ModelPackage
from ..package.hub import resolve_model
from ..request import Request
from .client import WorkerClient
from .registry import Slot, folder_identity, npu_identity

if TYPE_CHECKING:  # the inline backend (and with it the session's modules) loads when an inline engine first runs
    from ..generation.session import Session
    from ..prompt.templates import ChatTemplate, PackageTemplates
    from .inline import InlineBackend

__all__ = ["Engine"]

logger = logging.getLogger(__name__)


def _request(
    messages: Sequence[ChatMessage] | RawPrompt, options: GenerationOptions | None, timeout: float | None
) -> Request:
    """The request that :meth:`Engine.stream` and :meth:`Engine.astream` run (the default options when None)."""
    return Request(messages, options or GenerationOptions(), timeout)


class Engine:
    """A model package, ready to generate: see the module docstring.

    Use :meth:`get` to share one engine (and one loaded model) between all adapters that
    name the same folder, provider, thread count and release; on a Ryzen AI package run by its
    own provider, between all that differ only in thread count and in a release with the same
    budget.
    """

    #: the one registry of shared engines (LLMs and encoders), by slot, by NPU identity and by the names callers used
    registry: ClassVar[Registry] = REGISTRY

    def __init__(self, key: SessionKey, execution: Execution, package: ModelPackage | None = None) -> None:
        if execution not in ("process", "inline"):
            raise InvalidRequestError(f"execution {execution!r} is not supported; use 'process' or 'inline'")
        self.key = key
        self.execution = execution
        self.package = package or ModelPackage.open(key.path, release=key.release)
        self._templates: PackageTemplates | None = None  # the template machinery loads when a caller here needs it
        self._backend: InlineBackend | WorkerClient | None = None
        self._backend_lock = threading.Lock()

    @classmethod
    def get(
        cls,
        model: str | os.PathLike[str] | ModelPackage,
        *,
        provider: str | None = None,
        num_threads: int | None = None,
        release: str | None = None,
        execution: Execution | None = None,
        session_options: Mapping[str, Any] | None = None,
    ) -> Engine:
        """The shared engine for a model (created on first use, the model loaded lazily).

        ``model`` is a folder, an embedded model's name or a Hugging Face repository id
        (see :func:`~ryzenai_core.package.hub.resolve_model`). ``session_options`` are ONNX Runtime
        session options overlaid on the package's (``{"log_severity_level": 3}``, ...).
        """
        check_runtime_settings(provider, num_threads)
        provider = None if provider == "auto" else provider  # the package's own
        mode = cast(Execution, llm_execution(execution))
        options = json.dumps(dict(session_options), sort_keys=True) if session_options else "{}"
        name = None
        if not isinstance(model, ModelPackage):
            # A call names its model the same way every time: remember where the name led, so
            # a call does not look the model up again, as long as the name still names the
            # same folder (or still none: an embedded model, a repository id, resolved once
            # per process).
            asked = (os.fspath(model), provider, num_threads, release, mode, options)
            folder = folder_identity(asked[0])
            if (engine := cls.registry.named(asked, folder, Engine)) is not None:
                return engine
            name = (asked, folder)
        path = model.path if isinstance(model, ModelPackage) else resolve_model(model)
        npu = provider == "npu"
        key = SessionKey(str(path.resolve()), None if npu else provider, num_threads, release, options)

        def create() -> Engine:
            package = ModelPackage.open(key.path, release=key.release)
            if npu and not package.is_ryzenai:
                raise InvalidRequestError(
                    f"provider='npu' runs an AMD Ryzen AI package on its own provider, and {package.name} is a "
                    f"plain ONNX package for {package.provider}; use one of AMD's packages "
                    "(amd/Llama-3.2-1B_rai_1.8.0_npu_4K, ...), or provider='auto' to run this one where it belongs"
                )
            shared = npu_identity(key, package, mode)
            if shared is None:
                return cls(key, mode, package)
            engine, made = cls.registry.shared(shared, lambda: cls(key, mode, package))
            if not made:
                logger.info(
                    "%s: num_threads=%s, release=%s share the loaded model of num_threads=%s, release=%s "
                    "(the same generation on the NPU; the model is not loaded twice)",
                    package.name,
                    key.num_threads,
                    key.release,
                    engine.key.num_threads,
                    engine.key.release,
                )
            return engine

        # "npu" has its slot (its check runs once), and shares the engine of the package's own provider
        slot = Slot(dataclasses.replace(key, provider="npu") if npu else key, mode)
        return cls.registry.get(slot, create, name)

    @property
    def budget(self) -> ContextBudget:
        """The package's context budget."""
        return self.package.budget

    @property
    def template(self) -> ChatTemplate:
        """The package's chat template."""
        return self.template_for(None)

    def template_for(self, chat_template: str | None = None) -> ChatTemplate:
        """The template a call with ``chat_template`` renders with (the package's when None)."""
        templates = self._templates
        if templates is None:
            from ..prompt.templates import PackageTemplates

            templates = self._templates = PackageTemplates(self.package)
        return templates.get(chat_template)

    @property
    def backend(self) -> InlineBackend | WorkerClient:
        """The inline session or the worker connection (created on first use)."""
        with self._backend_lock:
            if self._backend is None:
                if self.execution == "inline":
                    from .inline import InlineBackend

                    self._backend = InlineBackend(self.key, self.package)
                else:
                    self._backend = WorkerClient(self.key, self.package)
            return self._backend

    # -- generation
    def run(self, request: Request) -> Generator[Chunk, None, None]:
        """Stream the answer to ``request``; closing the iterator cancels the generation.

        A call whose worker process died before it produced output is sent to a new worker
        (up to ``request.max_retries`` times; a call that was still waiting is always resent).
        """
        return self.backend.stream(request)

    def arun(self, request: Request) -> AsyncGenerator[Chunk, None]:
        """Async twin of :meth:`run`; cancelling the task cancels the generation."""
        return self.backend.astream(request)

    def stream(
        self,
        messages: Sequence[ChatMessage] | RawPrompt,
        options: GenerationOptions | None = None,
        *,
        timeout: float | None = None,
    ) -> Generator[Chunk, None, None]:
        """:meth:`run` of a request made of these parts (closing it cancels the generation)."""
        return self.run(_request(messages, options, timeout))

    def astream(
        self,
        messages: Sequence[ChatMessage] | RawPrompt,
        options: GenerationOptions | None = None,
        *,
        timeout: float | None = None,
    ) -> AsyncGenerator[Chunk, None]:
        """:meth:`arun` of a request made of these parts."""
        return self.arun(_request(messages, options, timeout))

    def generate(
        self,
        messages: Sequence[ChatMessage] | RawPrompt,
        options: GenerationOptions | None = None,
        *,
        timeout: float | None = None,
    ) -> Completion:
        """The whole answer (an aggregate of :meth:`stream`)."""
        return aggregate(self.stream(messages, options, timeout=timeout))

    async def agenerate(
        self,
        messages: Sequence[ChatMessage] | RawPrompt,
        options: GenerationOptions | None = None,
        *,
        timeout: float | None = None,
    ) -> Completion:
        """Async twin of :meth:`generate`."""
        return await aaggregate(self.astream(messages, options, timeout=timeout))

    # -- tokens
    def count_tokens(self, messages: Sequence[ChatMessage], options: GenerationOptions | None = None) -> int:
        """Prompt tokens of ``messages`` with the package's template and tokenizer."""
        return int(self.backend.call("count_tokens", list(messages), options or GenerationOptions()))

    def render(self, messages: Sequence[ChatMessage], options: GenerationOptions | None = None) -> str:
        """The prompt text for ``messages``."""
        return str(self.backend.call("render", list(messages), options or GenerationOptions()))

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``."""
        return list(self.backend.call("encode", text))

    def count_text(self, text: str) -> int:
        """Tokens of ``text`` alone (no template, no special tokens added)."""
        return int(self.backend.call("count_text", text))

    def decode(self, ids: Sequence[int]) -> str:
        """Text of token ids."""
        return str(self.backend.call("decode", list(ids)))

    def probe(
        self, prompt_ids: Sequence[int], steps: int, *, watch: bool = True, exact: bool = False
    ) -> dict[str, Any]:
        """A timed greedy decode of ``steps`` tokens after ``prompt_ids``, for ``ryzenai-llm doctor``.

        ``watch``: whether each step's logits are finite; ``exact``: end-of-sequence held off until
        ``steps`` tokens (as AMD's benchmark). Returns ``{"tokens", "logits", "prefill_seconds",
        "first_token_seconds", "decode_tokens_per_second"}``.
        """
        return dict(self.backend.call("probe", list(prompt_ids), steps, watch, exact))

    def load_adapter(self, adapter: LoraAdapter) -> dict[str, int | None]:
        """Load ``adapter`` into the model's worker and check it with a one-token run, as a call choosing it does.

        Returns ``{"tensors", "lora_inputs"}``: the file's tensor count and the graph's LoRA inputs
        (None where they cannot be read). A later call with the same file does not load it again.

        Raises:
            AdapterError: the file is no adapter, or does not fit the model (the message names the
                tensor, the sizes and the fix).
        """
        return dict(self.backend.call("load_adapter", adapter))

    def load(self) -> float | None:
        """Load the model now (it loads on first use otherwise); returns the load time in seconds."""
        value = self.backend.call("load")
        return None if value is None else float(value)

    def inline_session(self) -> Session:
        """The session of an inline engine (its model in this process), for tools that look at its parts.

        Raises:
            InvalidRequestError: the engine runs its model in a worker process.
        """
        backend = self.backend
        if isinstance(backend, WorkerClient):
            raise InvalidRequestError(
                f"the engine of {self.package.name} runs in a worker process; use execution='inline'"
            )
        return backend.session

    def worker_pid(self) -> int | None:
        """The process id of the worker running the model (None inline, or before a worker started)."""
        backend = self._backend
        return backend.pid if isinstance(backend, WorkerClient) else None

    def close(self) -> None:
        """Free the model (a worker process exits); the next call loads it again.

        A call from another thread meanwhile waits until the worker has exited, so a model's next
        worker never runs beside the last one (two contexts of one model on the NPU).
        """
        with self._backend_lock:
            backend, self._backend = self._backend, None
            if backend is not None:
                backend.close()

    @classmethod
    def close_all(cls) -> None:
        """Close every shared engine, LLMs and encoders (:func:`ryzenai_core.close_all`, run at interpreter exit)."""
        cls.registry.close_all()
