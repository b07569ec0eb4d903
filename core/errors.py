"""Every error ryzenai-llm raises on purpose.

One hierarchy, rooted at :class:`RyzenAIError`. Each message names the value that was
wrong, the limit or expectation it broke, and what to do about it::

    RyzenAIError
    ├── RuntimeNotAvailableError      no usable onnxruntime-genai (or onnxruntime), or not the build a model needs
    ├── ModelPackageError             a model folder cannot be used as it is
    │   ├── ModelNotFoundError        the folder (or a name) does not exist
    │   ├── ConfigError               genai_config.json / rai_config.json missing or malformed
    │   ├── UnsupportedModelError     a model type the runtime does not run, or an unknown layout
    │   ├── LfsPointerError           a weight or tokenizer file is a Git LFS pointer, not content
    │   ├── MissingTokenizerError     no tokenizer.json / tokenizer.model in the folder
    │   └── UnsafePathError           a config names a file outside the model folder
    ├── ContextWindowExceededError    a prompt longer than the package's prompt limit
    ├── InvalidRequestError           bad options, messages or tools (also a ValueError)
    │   └── AdapterError              a LoRA adapter file that does not fit the model (or is no adapter)
    ├── ChatTemplateError             the chat template failed to render
    ├── GuidanceUnsupportedError      constrained decoding asked of a runtime without it
    └── GenerationError               the runtime failed, or the model worker died
        ├── WorkerDiedError           the worker process died; the next call starts a new one
        ├── StreamAbandonedError      a stream nobody read was stopped for a call that waited on it
        └── GenerationTimeoutError    a call ran past its timeout (also a TimeoutError)

Errors about caller input also derive from ``ValueError`` so generic handlers keep working.
"""

from __future__ import annotations

from pathlib import Path

__all__ = [
    "AdapterError",
    "ChatTemplateError",
    "ConfigError",
    "ContextWindowExceededError",
    "GenerationError",
    "GenerationTimeoutError",
    "GuidanceUnsupportedError",
    "InvalidRequestError",
    "LfsPointerError",
    "MissingTokenizerError",
    "ModelNotFoundError",
    "ModelPackageError",
    "RuntimeNotAvailableError",
    "RyzenAIError",
    "StreamAbandonedError",
    "UnsafePathError",
    "UnsupportedModelError",
    "WorkerDiedError",
]


class RyzenAIError(Exception):
    """Base class of every error raised by ryzenai-llm."""


class RuntimeNotAvailableError(RyzenAIError, ImportError):
    """onnxruntime-genai (or onnxruntime, for embeddings) is missing, or is not the build a model needs."""


class ModelPackageError(RyzenAIError):
    """A model folder cannot be used as it is."""

    def __init__(self, message: str, *, path: str | Path | None = None) -> None:
        super().__init__(message)
        self.path = Path(path) if path is not None else None

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild, (type(self), str(self), {"path": self.path}))


class ModelNotFoundError(ModelPackageError, FileNotFoundError):
    """The model folder does not exist or is not a folder."""


class ConfigError(ModelPackageError):
    """genai_config.json or rai_config.json is missing or malformed."""


class UnsupportedModelError(ModelPackageError):
    """The installed runtime does not run the package's model type, or this library does not know its layout."""


class LfsPointerError(ModelPackageError):
    """A file holds a Git LFS pointer instead of its content."""


class MissingTokenizerError(ModelPackageError):
    """The folder has no tokenizer."""


class UnsafePathError(ModelPackageError):
    """A config file names a path outside the model folder."""


class InvalidRequestError(RyzenAIError, ValueError):
    """Options, messages or tools given by the caller are not valid."""


class AdapterError(InvalidRequestError):
    """A LoRA adapter file the model cannot use: not an ``.onnx_adapter``, or tensors the model's graph does not take.

    Raised when the adapter is first loaded (its first call, or ``ryzenai-llm doctor MODEL --adapter FILE``),
    naming the file, the tensor, the sizes and the fix.
    """


class ContextWindowExceededError(InvalidRequestError):
    """The prompt does not fit the package's prompt limit.

    Attributes:
        prompt_tokens: tokens in the rendered prompt.
        limit: the largest prompt the package accepts.
        window: prompt + output tokens the package can hold.
    """

    def __init__(self, message: str, *, prompt_tokens: int, limit: int, window: int) -> None:
        super().__init__(message)
        self.prompt_tokens = prompt_tokens
        self.limit = limit
        self.window = window

    def __reduce__(self) -> tuple[object, ...]:
        kwargs = {"prompt_tokens": self.prompt_tokens, "limit": self.limit, "window": self.window}
        return (_rebuild, (type(self), str(self), kwargs))


class ChatTemplateError(InvalidRequestError):
    """The chat template raised or could not be rendered."""


class GuidanceUnsupportedError(RyzenAIError):
    """Constrained decoding was asked of an onnxruntime-genai build that lacks it."""


class GenerationError(RyzenAIError, RuntimeError):
    """The runtime failed while generating, or the model worker died."""


class WorkerDiedError(GenerationError):
    """The model worker process died during the call; the next call starts a new one."""


class StreamAbandonedError(GenerationError):
    """A stream was not read for a while and another call on the model waited: it was stopped.

    The chunks generated before it was stopped are still delivered; this error ends the
    stream instead of a last chunk. Read streams to the end, or close them
    (``with contextlib.closing(llm.stream(...)) as chunks:``).
    """


class GenerationTimeoutError(GenerationError, TimeoutError):
    """A call took longer than its ``timeout`` (it was cancelled), or a worker did not answer in time.

    A worker's deadlines are :mod:`ryzenai_core.workers`'; the message names the value and the setting.

    Attributes:
        phase: where the time ran out: ``"queued"`` (behind other calls on the same model),
            ``"preparing"`` (chat template and tokenizer), ``"prefill"`` (the prompt) or
            ``"generating"`` (new tokens); for a worker's request, its name (``"load"``,
            ``"count_tokens"``, ``"render"``, ...; ``"batch"`` for an encoder's batch).
    """

    def __init__(self, message: str, *, phase: str = "generating") -> None:
        super().__init__(message)
        self.phase = phase

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild, (type(self), str(self), {"phase": self.phase}))


def _rebuild(cls: type[Exception], message: str, kwargs: dict[str, object]) -> Exception:
    """Unpickle errors that take keyword arguments (they cross the worker process boundary)."""
    return cls(message, **kwargs)
