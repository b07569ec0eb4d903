"""A call's generation options as plain data: what a session runs, in this process or in a worker.

:class:`~ryzenai_core.options.GenerationOptions` (pydantic) validates what a caller asks; its
:meth:`~ryzenai_core.options.GenerationOptions.plain` gives the same values as a
:class:`CallOptions`, a frozen dataclass. The session, the prompt builder and
:func:`~ryzenai_core.request.resolve` work on these, and they are what travels to a worker, so a
worker imports no pydantic: its start is an interpreter, the core's own modules and
onnxruntime-genai. Also here because a worker needs them: the runtime settings check
(:func:`check_runtime_settings`) and the sampling options sent to the runtime (:func:`resolve_search`);
and where an LLM runs (:func:`llm_execution`), which a face reads before it imports pydantic.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any, Literal

from .errors import InvalidRequestError

__all__ = [
    "ENV_EXECUTION",
    "PROVIDERS",
    "CallOptions",
    "Execution",
    "FormatSpec",
    "GuidanceSpec",
    "as_call_options",
    "check_runtime_settings",
    "forces_tool",
    "llm_execution",
    "resolve_search",
]

#: Where a model runs: ``"process"`` (a worker process) or ``"inline"`` (this process).
Execution = Literal["process", "inline"]
#: The environment variable that sets where LLMs run when a model object does not say (default ``"process"``).
ENV_EXECUTION = "RYZENAI_LLM_EXECUTION"


def llm_execution(execution: Execution | None) -> str:
    """Where an LLM runs: its own ``execution`` setting, else :data:`ENV_EXECUTION`, else ``"process"``."""
    return execution or os.environ.get(ENV_EXECUTION, "process")


#: Execution providers a call may choose instead of the package's own.
PROVIDERS = ("cpu", "cuda", "dml")


def check_runtime_settings(provider: str | None, num_threads: int | None = None) -> None:
    """Refuse a provider or thread count no runtime takes (checked when a model object is made).

    Raises:
        InvalidRequestError: naming the value and what is accepted.
    """
    if provider is not None and provider not in PROVIDERS:
        raise InvalidRequestError(
            f"provider {provider!r} is not supported; use None (the package's own: Ryzen AI for AMD's packages), "
            f"or one of {', '.join(repr(p) for p in PROVIDERS)}"
        )
    if num_threads is not None and num_threads < 1:
        raise InvalidRequestError(f"num_threads is {num_threads}; it must be at least 1 (or None)")


def forces_tool(tool_choice: str) -> bool:
    """Whether a ``tool_choice`` makes the answer a tool call (``required`` or a tool's name)."""
    return tool_choice not in ("auto", "none")


@dataclass(frozen=True)
class GuidanceSpec:
    """Constrained decoding, as :class:`~ryzenai_core.options.Guidance` validated it."""

    type: str
    """``json_schema``, ``regex`` or ``lark_grammar``."""
    data: str
    """The schema (JSON text), the regular expression or the grammar."""
    shape: Any = field(default=None, compare=False, repr=False)
    """What the output may be, when the core wrote the grammar (a
    :class:`~ryzenai_core.prompt.completion.Shape`): the generation loop closes it within the budget."""


@dataclass(frozen=True)
class FormatSpec:
    """The form of the answer, as :class:`~ryzenai_core.options.ResponseFormat` validated it."""

    type: str
    """``json_object`` or ``json_schema``."""
    json_schema: dict[str, Any] | None = None


@dataclass(frozen=True)
class CallOptions:
    """The options of one generation as plain data: the fields of :class:`~ryzenai_core.options.GenerationOptions`.

    ``None`` means the package's default. Made by ``GenerationOptions.plain()``, which validated them.
    """

    max_new_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    repetition_penalty: float | None = None
    do_sample: bool | None = None
    seed: int | None = None
    stop: tuple[str, ...] = ()
    enable_thinking: bool | None = None
    guidance: GuidanceSpec | None = None
    tools: tuple[dict[str, Any], ...] = ()
    tool_choice: str = "auto"
    parallel_tool_calls: bool | None = None
    response_format: FormatSpec | None = None
    chat_template: str | None = None
    template_vars: dict[str, Any] = field(default_factory=dict)
    overflow: str = "error"
    kv_reuse: bool | None = None
    option_names: dict[str, str] = field(default_factory=dict, repr=False)

    def called(self, name: str) -> str:
        """The caller's name for the option ``name``."""
        return self.option_names.get(name, name)

    @property
    def forced_tool(self) -> bool:
        """Whether the answer must be a tool call."""
        return forces_tool(self.tool_choice)

    def replace(self, **changes: Any) -> CallOptions:
        """A copy with ``changes``."""
        return dataclasses.replace(self, **changes)


def as_call_options(options: Any) -> CallOptions:
    """``options`` as :class:`CallOptions` (a ``GenerationOptions`` is turned into them; None: the defaults)."""
    if isinstance(options, CallOptions):
        return options
    if options is None:
        return CallOptions()
    return options.plain()  # type: ignore[no-any-return]  # a GenerationOptions


# Library defaults, used when neither the caller nor the package sets a value.
_LIBRARY_DEFAULTS: dict[str, Any] = {"do_sample": False, "temperature": 1.0, "top_k": 50, "top_p": 1.0}
_SEARCH_KEYS = ("do_sample", "temperature", "top_k", "top_p", "repetition_penalty")


def resolve_search(options: CallOptions, package_search: dict[str, Any]) -> dict[str, Any]:
    """Search options for onnxruntime-genai (without ``max_length``).

    Caller's value, then the package's ``search``, then the library default. An explicit
    ``temperature=0`` means greedy; an explicit positive temperature turns sampling on
    unless ``do_sample=False`` is given too.
    """
    out: dict[str, Any] = {}
    for key in _SEARCH_KEYS:
        value = getattr(options, key)
        if value is None:
            value = package_search.get(key, _LIBRARY_DEFAULTS.get(key))
        if value is not None:
            out[key] = value
    if options.temperature is not None and options.do_sample is None:
        out["do_sample"] = options.temperature > 0
    if out.get("temperature") == 0:
        out["do_sample"] = False
        out["temperature"] = 1.0
    if options.seed is not None:
        out["random_seed"] = options.seed
    return out
