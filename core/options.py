"""A call's generation options: one frozen dataclass, declared once, ``None`` meaning "the package's default".

:class:`GenerationOptions` is what a face builds, what a :class:`~ryzenai_core.request.Request`
carries, what a session runs and what a worker receives. Each field is declared once, with the
check of its values (:func:`_option`); a value is checked when the options are made
(``__post_init__``, pure functions, no pydantic: a worker's start is the interpreter, the core's
own modules and onnxruntime-genai), so every ``GenerationOptions`` holds valid values. Adding an
option is adding a field: every face then takes it per call by its name
(:func:`~ryzenai_core.vocabulary.call_options`).

Precedence for sampling: the caller's value, then the package's ``search`` section of
genai_config.json, then the library default. Only values that are set are sent to the runtime
(:func:`resolve_search`). Also here: where an LLM runs (:func:`llm_execution`) and the runtime
settings check (:func:`check_runtime_settings`), which a worker needs too.
"""

from __future__ import annotations

import dataclasses
import json
import numbers
import os
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, cast, get_args

from .adapters import LoraAdapter
from .errors import InvalidRequestError

__all__ = [
    "CALL_SETTINGS",
    "EFFORTS",
    "ENV_EXECUTION",
    "OPTIONS",
    "PROVIDERS",
    "Effort",
    "Execution",
    "GenerationOptions",
    "Guidance",
    "ResponseFormat",
    "check_runtime_settings",
    "execution_setting",
    "forces_tool",
    "llm_execution",
    "resolve_search",
    "response_format_from",
    "tool_choice_from",
    "validated_options",
]

# ---------------------------------------------------------------------- where a model runs
#: Where a model runs: ``"process"`` (a worker process) or ``"inline"`` (this process).
Execution = Literal["process", "inline"]
#: The environment variable that sets where LLMs run when a model object does not say (default ``"process"``).
ENV_EXECUTION = "RYZENAI_LLM_EXECUTION"


def llm_execution(execution: Execution | None) -> str:
    """Where an LLM runs: its own ``execution`` setting, else :data:`ENV_EXECUTION`, else ``"process"``."""
    return execution or os.environ.get(ENV_EXECUTION, "process")


#: The encoders' former name for :data:`Execution` and its values (``"thread"`` is ``"inline"``).
_ISOLATION: dict[str, Execution] = {"process": "process", "thread": "inline"}


def execution_setting(execution: Execution | None, isolation: str | None, owner: str) -> Execution | None:
    """The ``execution`` setting, given by its name or by the deprecated ``isolation``.

    ``isolation`` (``"process"`` or ``"thread"``) was the encoders' name for ``execution``
    (``"process"`` or ``"inline"``); it still works, with a ``DeprecationWarning`` naming the
    new spelling. Values are returned as given: the caller validates them.

    Args:
        execution: the new spelling's value (or None).
        isolation: the old spelling's value (or None).
        owner: who takes the setting, for messages (``"RyzenAIEmbeddings"``).

    Raises:
        InvalidRequestError: both given and disagreeing.
    """
    if isolation is None:
        return execution
    new = cast(Execution, _ISOLATION.get(isolation, isolation))  # an unknown value is refused by the caller
    warnings.warn(
        f"{owner}: isolation={isolation!r} is deprecated; use execution={new!r}",
        DeprecationWarning,
        stacklevel=4,
    )
    if execution is not None and execution != new:
        raise InvalidRequestError(
            f"{owner} got isolation={isolation!r} and execution={execution!r}; pass only execution "
            "('process' or 'inline')"
        )
    return new


#: The execution providers every model takes, LLM or encoder (None is ``"auto"``): ``"auto"`` runs
#: it where it belongs (an AMD package on its own Ryzen AI provider, another LLM package on the
#: provider its config names, an encoder on the NPU where onnxruntime has VitisAI, else the CPU);
#: ``"npu"`` insists on the NPU (an error where it cannot be); ``"cpu"``, ``"cuda"``, ``"dml"``
#: choose that device.
PROVIDERS = ("auto", "npu", "cpu", "cuda", "dml")


def check_runtime_settings(provider: str | None, num_threads: int | None = None) -> None:
    """Refuse a provider or thread count no runtime takes (checked when a model object is made).

    Raises:
        InvalidRequestError: naming the value and what is accepted.
    """
    if provider is not None and provider not in PROVIDERS:
        raise InvalidRequestError(
            f"provider {provider!r} is not supported; use one of {', '.join(repr(p) for p in PROVIDERS)} "
            "('auto' or None: where the model belongs, the Ryzen AI NPU for AMD's packages; 'npu' insists on it)"
        )
    if num_threads is not None and num_threads < 1:
        raise InvalidRequestError(f"num_threads is {num_threads}; it must be at least 1 (or None)")


# ---------------------------------------------------------------------- tool choice and the answer's form
#: ``auto`` (the model may call a tool), ``none`` (tools are not sent), ``required`` (it must
#: call one), or the name of the one tool it must call.
ToolChoice = str
_CHOICE_WORDS = {"auto": "auto", "none": "none", "required": "required", "any": "required"}
_CHOICE_HINT = (
    "use 'auto', 'none', 'required' (or 'any'), a tool name, or {'type': 'function', 'function': {'name': ...}}"
)


def tool_choice_from(value: Any) -> ToolChoice:
    """A tool choice in any of the forms frameworks and OpenAI use, as the core's word or a tool name.

    ``None``/``"auto"``; ``False``/``"none"``; ``True``/``"any"``/``"required"``; a tool name;
    ``{"type": "function", "function": {"name": ...}}``, ``{"type": "tool", "name": ...}``,
    ``{"type": "auto" | "any" | "none" | "required"}``.

    Raises:
        InvalidRequestError: any other value.
    """
    if value is None or value is True or value is False:
        return "auto" if value is None else ("required" if value else "none")
    if isinstance(value, Mapping):
        kind = value.get("type")
        fn = value.get("function")
        if kind == "function" and isinstance(fn, Mapping) and isinstance(fn.get("name"), str) and fn["name"]:
            return str(fn["name"])
        if kind == "tool" and isinstance(value.get("name"), str) and value["name"]:
            return str(value["name"])
        if kind in _CHOICE_WORDS:
            return _CHOICE_WORDS[kind]
    elif isinstance(value, str) and value:
        return _CHOICE_WORDS.get(value, value)
    raise InvalidRequestError(f"tool_choice {value!r} is not understood; {_CHOICE_HINT}")


def forces_tool(tool_choice: str) -> bool:
    """Whether a ``tool_choice`` makes the answer a tool call (``required`` or a tool's name)."""
    return tool_choice not in ("auto", "none")


@dataclass(frozen=True)
class ResponseFormat:
    """The form of the answer: one JSON object (``json_object``) or a value matching ``json_schema``.

    Raises:
        InvalidRequestError: another type, or a schema missing (``json_schema``) or given (``json_object``).
    """

    type: Literal["json_object", "json_schema"]
    json_schema: dict[str, Any] | None = None
    """The schema, for type ``json_schema``."""

    def __post_init__(self) -> None:
        if self.type not in ("json_object", "json_schema"):
            raise InvalidRequestError(f"response format type {self.type!r}: use 'json_object' or 'json_schema'")
        if (self.type == "json_schema") != isinstance(self.json_schema, dict):
            raise InvalidRequestError("a json_schema response format needs a schema (a dict), and json_object none")


def response_format_from(value: Any) -> ResponseFormat | None:
    """A response format in the forms frameworks and OpenAI use (None for plain text).

    ``{"type": "text"}``; ``{"type": "json_object"}``; ``{"type": "json_schema", "schema": {...}}``
    and OpenAI's ``{"type": "json_schema", "json_schema": {"schema": {...}}}``.

    Raises:
        InvalidRequestError: any other value.
    """
    if value is None or isinstance(value, ResponseFormat):
        return value
    if isinstance(value, Mapping):
        kind = value.get("type")
        if kind == "text":
            return None
        if kind == "json_object":
            return ResponseFormat(type="json_object")
        schema = value.get("schema")
        nested = value.get("json_schema")
        if schema is None and isinstance(nested, Mapping):
            schema = nested.get("schema")
        if kind == "json_schema" and isinstance(schema, Mapping):
            return ResponseFormat(type="json_schema", json_schema=dict(schema))
    raise InvalidRequestError(
        f"response_format {value!r} is not understood; use {{'type': 'json_schema', 'schema': {{...}}}}, "
        "{'type': 'json_object'} or {'type': 'text'}"
    )


@dataclass(frozen=True)
class Guidance:
    """Constrained decoding through onnxruntime-genai guidance.

    Raises:
        InvalidRequestError: another type, empty data, or a ``json_schema`` that is not a JSON object.
    """

    type: Literal["json_schema", "regex", "lark_grammar"]
    """``json_schema``, ``regex`` or ``lark_grammar``."""
    data: str
    """The schema (a dict becomes its JSON text), the regular expression or the grammar."""
    shape: Any = field(default=None, compare=False, repr=False)
    """What the output may be, when the core wrote the grammar (a
    :class:`~ryzenai_core.prompt.completion.Shape`): the generation loop closes it within the budget."""

    def __post_init__(self) -> None:
        if self.type not in ("json_schema", "regex", "lark_grammar"):
            raise InvalidRequestError(f"guidance type {self.type!r}: use 'json_schema', 'regex' or 'lark_grammar'")
        if isinstance(self.data, Mapping):
            object.__setattr__(self, "data", json.dumps(self.data))
        if not isinstance(self.data, str) or not self.data.strip():
            raise InvalidRequestError(f"guidance of type {self.type!r} needs a non-empty schema, pattern or grammar")
        if self.type == "json_schema":
            try:
                parsed = json.loads(self.data)
            except json.JSONDecodeError as exc:
                raise InvalidRequestError(f"json_schema guidance is not valid JSON: {exc}") from None
            if not isinstance(parsed, dict):
                raise InvalidRequestError("json_schema guidance must be a JSON object (a schema)")


# ---------------------------------------------------------------------- the checks of the fields' values
Check = Callable[[Any], Any]
"""A field's check: the value as stored (converted where a form is accepted), or ValueError with the reason."""


def _number(kind: type, *, ge: float | None = None, gt: float | None = None, le: float | None = None) -> Check:
    """An ``int`` or ``float`` (None allowed) within the bounds."""
    word = "an integer" if kind is int else "a number"

    def check(value: Any) -> Any:
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise ValueError(f"Input should be {word}")
        if kind is int and not isinstance(value, numbers.Integral):
            if not float(value).is_integer():
                raise ValueError("Input should be an integer, got a number with a fractional part")
        value = kind(value)
        if ge is not None and not value >= ge:
            raise ValueError(f"Input should be greater than or equal to {ge}")
        if gt is not None and not value > gt:
            raise ValueError(f"Input should be greater than {gt}")
        if le is not None and not value <= le:
            raise ValueError(f"Input should be less than or equal to {le}")
        return value

    return check


def _flag(value: Any) -> bool | None:
    if value is not None and not isinstance(value, bool):
        raise ValueError("Input should be True, False or None")
    return value


def _text(value: Any) -> str | None:
    if value is not None and not isinstance(value, str):
        raise ValueError("Input should be a string")
    return value


#: The reasoning efforts a call may name, as providers and runtimes spell them (OpenAI's ``reasoning_effort``,
#: Ollama's ``think``); what each means depends on the chat template (:func:`ryzenai_core.request.resolve`).
Effort = Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"]
EFFORTS: tuple[str, ...] = get_args(Effort)


def _effort(value: Any) -> str | None:
    if value is None:
        return None
    if value not in EFFORTS:
        raise ValueError(f"Input should be one of {', '.join(repr(e) for e in EFFORTS)} (or None)")
    return str(value)


def _adapter(value: Any) -> LoraAdapter | None:
    if value is not None and not isinstance(value, LoraAdapter):
        raise ValueError(
            "a call chooses an adapter by its name in the model object's adapters={name: file}; the core takes "
            "a LoraAdapter (LoraAdapter.of(path))"
        )
    return value


def _overflow(value: Any) -> str:
    if value not in ("error", "drop_oldest"):
        raise ValueError("Input should be 'error' or 'drop_oldest'")
    return str(value)


def _stop(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    strings = (value,) if isinstance(value, str) else _sequence(value, "strings")
    for s in strings:
        if not isinstance(s, str) or s == "":
            raise ValueError(f"stop strings must be non-empty strings, got {s!r}")
        if any("\ud800" <= c <= "\udfff" for c in s):
            raise ValueError(
                f"stop string {s!r} holds a lone surrogate, which is not valid Unicode and no output can "
                "contain; fix the string"
            )
    return strings


def _tools(value: Any) -> tuple[dict[str, Any], ...]:
    tools = () if value is None else _sequence(value, "tool definitions (dicts)")
    for t in tools:
        if not isinstance(t, Mapping):
            raise ValueError(f"each tool should be a dict (OpenAI function format), got {type(t).__name__}")
    return tuple(t if isinstance(t, dict) else dict(t) for t in tools)


def _sequence(value: Any, of: str) -> tuple[Any, ...]:
    if isinstance(value, tuple):
        return value
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        raise ValueError(f"Input should be a list of {of}")
    return tuple(value)


def _dict(value: Any) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise ValueError("Input should be a dict")
    return value if isinstance(value, dict) else dict(value)


def _template_vars(value: Any) -> dict[str, Any]:
    variables = _dict(value)
    for key, what in _RESERVED_TEMPLATE_VARS.items():
        if key in variables:
            raise ValueError(f"{key!r} cannot be a chat-template variable: it is {what}")
    return variables


#: Names the chat template gets from the core itself, which a template variable cannot replace.
_RESERVED_TEMPLATE_VARS = {
    "messages": "the conversation itself; pass the messages to the call",
    "add_generation_prompt": "set by the core (True: the prompt opens the answer)",
    "tools": "the call's tools; pass them as tools",
    "chat_template": "the template itself; pass it as chat_template",
    "enable_thinking": "the call's enable_thinking option; pass it as that",
    "reasoning_effort": "the call's reasoning_effort option; pass it as that",
}


def _guidance(value: Any) -> Guidance | None:
    if value is None or isinstance(value, Guidance):
        return value
    if not isinstance(value, Mapping) or set(value) != {"type", "data"}:
        raise ValueError("Input should be a Guidance or a dict {'type': ..., 'data': ...}")
    return Guidance(type=value["type"], data=value["data"])


def _option(default: Any, check: Check, doc: str, *, factory: Callable[[], Any] | None = None, **more: Any) -> Any:
    """A field of :class:`GenerationOptions`: its default, the check of its values and what it means."""
    if factory is not None:
        return field(default_factory=factory, metadata={"check": check, "doc": doc}, **more)
    return field(default=default, metadata={"check": check, "doc": doc}, **more)


# ---------------------------------------------------------------------- the options
@dataclass(frozen=True)
class GenerationOptions:
    """Options of one generation. ``None`` means: use the package's default.

    Made with the options' own names (a typo is a ``TypeError``; :func:`validated_options` and
    :func:`~ryzenai_core.vocabulary.call_options` name the closest option). Values are checked
    when made: a bad value is an :class:`~ryzenai_core.errors.InvalidRequestError` naming the
    option (as ``option_names`` calls it), the value and the limit. ``stop`` takes one string
    or a list, ``tool_choice`` and ``response_format`` the forms frameworks and OpenAI use
    (:func:`tool_choice_from`, :func:`response_format_from`), ``guidance`` a dict ``{"type", "data"}``.
    """

    max_new_tokens: int | None = _option(None, _number(int, ge=1), "new tokens to generate at most (not prompt + new)")
    temperature: float | None = _option(None, _number(float, ge=0, le=100), "0 means greedy decoding")
    top_p: float | None = _option(None, _number(float, gt=0, le=1), "nucleus sampling mass")
    top_k: int | None = _option(None, _number(int, ge=0), "sample among the k most likely tokens; 1 = greedy")
    repetition_penalty: float | None = _option(None, _number(float, gt=0), "1.0 = none")
    seed: int | None = _option(None, _number(int, ge=0), "random seed; the same seed and prompt give the same output")
    stop: tuple[str, ...] = _option((), _stop, "strings that end the output; never part of it")
    enable_thinking: bool | None = _option(None, _flag, "Qwen3-style reasoning on/off (template variable)")
    reasoning_effort: str | None = _option(
        None,
        _effort,
        "how much to reason: 'none' turns reasoning off; a level goes to a template that reads reasoning_effort "
        "(gpt-oss's low, medium, high) and is refused where the template has no such level",
    )
    guidance: Guidance | None = _option(None, _guidance, "constrain the output to a JSON schema, regex or grammar")
    tools: tuple[dict[str, Any], ...] = _option((), _tools, "tool definitions (OpenAI function format)")
    tool_choice: ToolChoice = _option("auto", tool_choice_from, "'auto', 'none', 'required' or the one tool's name")
    parallel_tool_calls: bool | None = _option(
        None,
        _flag,
        "several tool calls in one answer: True allows them, False keeps the first; None: as many as the "
        "template renders back (one per answer where it renders one call per assistant turn)",
    )
    response_format: ResponseFormat | None = _option(None, response_format_from, "JSON object or JSON schema output")
    chat_template: str | None = _option(None, _text, "a Jinja chat template (source or file) to use instead")
    template_vars: dict[str, Any] = _option(None, _template_vars, "extra chat template variables", factory=dict)
    overflow: Literal["error", "drop_oldest"] = _option(
        "error", _overflow, "prompt over the limit: 'error' or 'drop_oldest' turns"
    )
    kv_reuse: bool | None = _option(None, _flag, "reuse the cached prefix of the previous call (None: package)")
    adapter: LoraAdapter | None = _option(
        None, _adapter, "the LoRA adapter to run with (None: the base model); a face chooses it by name"
    )
    option_names: dict[str, str] = _option(
        None,
        _dict,
        "what the caller calls an option, for error messages ({'max_new_tokens': 'max_tokens'}); not compared",
        factory=dict,
        repr=False,
        compare=False,
    )

    def __post_init__(self) -> None:
        """Check (and store in their one form) the values; the rules over several options after."""
        names = self.option_names if isinstance(self.option_names, Mapping) else {}
        problems = []
        for name, default, check in _CHECKS:
            value = getattr(self, name)
            if value is default:  # a default is valid as it is
                continue
            try:
                checked = check(value)
            except ValueError as exc:  # InvalidRequestError too
                problems.append(f"{names.get(name, name)}={value!r}: {exc}")
                continue
            if checked is not value:
                object.__setattr__(self, name, checked)
        if not problems:
            problems = self._rules()
        if problems:
            raise InvalidRequestError("invalid generation options: " + "; ".join(problems))

    def _rules(self) -> list[str]:
        """What several options must be together: one constraint on the output; a forced call's tools."""
        wanted = [
            what
            for what, on in (
                ("guidance", self.guidance is not None),
                ("response_format", self.response_format is not None),
                (f"tool_choice={self.tool_choice!r}", self.forced_tool),
            )
            if on
        ]
        if len(wanted) > 1:
            return [f"a call can constrain its output one way only; it got {' and '.join(wanted)}"]
        if self.forced_tool:
            names = [_tool_name(t) for t in self.tools]
            if not names:
                return [f"tool_choice={self.tool_choice!r} requires a tool call but no tools were given"]
            if self.tool_choice != "required" and self.tool_choice not in names:
                bound = ", ".join(names)
                return [f"tool_choice names {self.tool_choice!r}, which is not a bound tool; bound tools: {bound}"]
        return []

    def called(self, name: str) -> str:
        """The caller's name for the option ``name``."""
        return self.option_names.get(name, name)

    @property
    def forced_tool(self) -> bool:
        """Whether the answer must be a tool call."""
        return forces_tool(self.tool_choice)

    def replace(self, **changes: Any) -> GenerationOptions:
        """A copy with ``changes`` (checked as any options are)."""
        return dataclasses.replace(self, **changes)


_FIELDS = dataclasses.fields(GenerationOptions)
#: Each field's name, default and check, in the order they are checked.
_CHECKS = tuple((f.name, f.default, f.metadata["check"]) for f in _FIELDS)
#: The options a call may set, by their own names (every field but ``option_names``).
OPTIONS = tuple(f.name for f in _FIELDS if f.name != "option_names")
#: What a call may set besides its options: the seconds it may take (None: no limit).
CALL_SETTINGS = ("timeout",)


def _tool_name(tool: Any) -> str:
    fn = tool.get("function", tool) if isinstance(tool, Mapping) else None
    return str(fn.get("name")) if isinstance(fn, Mapping) else "?"


# ---------------------------------------------------------------------- options by name
def validated_options(**kwargs: Any) -> GenerationOptions:
    """:class:`GenerationOptions` from keywords by the options' own names.

    Raises:
        InvalidRequestError: a name that is no option (with the option it most likely means, or
            what to use instead of an option the core does not have), or a bad value (naming the
            option as ``option_names`` calls it, the value and the limit).
    """
    unknown = {key: value for key, value in kwargs.items() if key not in OPTIONS and key != "option_names"}
    if unknown:
        from .vocabulary import not_options  # the words for a wrong name (that module reads this one's names)

        problems = not_options(unknown, kwargs.get("option_names") or {})
        raise InvalidRequestError("invalid generation options: " + "; ".join(problems))
    return GenerationOptions(**kwargs)


# ---------------------------------------------------------------------- what the runtime is sent
# Library defaults, used when neither the caller nor the package sets a value.
_LIBRARY_DEFAULTS: dict[str, Any] = {"do_sample": False, "temperature": 1.0, "top_k": 50, "top_p": 1.0}
_SEARCH_KEYS = ("temperature", "top_k", "top_p", "repetition_penalty")


def resolve_search(options: GenerationOptions, package_search: Mapping[str, Any]) -> dict[str, Any]:
    """Search options for onnxruntime-genai (without ``max_length``).

    Caller's value, then the package's ``search``, then the library default. Whether to sample
    is the package's unless the caller gives a temperature: ``temperature=0`` is greedy, a
    positive one samples.
    """
    asked = {key: getattr(options, key) for key in _SEARCH_KEYS}
    out: dict[str, Any] = {}
    for key in ("do_sample", *_SEARCH_KEYS):
        value = asked.get(key)
        if value is None:
            value = package_search.get(key, _LIBRARY_DEFAULTS.get(key))
        if value is not None:
            out[key] = value
    if options.temperature is not None:
        out["do_sample"] = options.temperature > 0
    if out.get("temperature") == 0:
        out["do_sample"] = False
        out["temperature"] = 1.0
    if options.seed is not None:
        out["random_seed"] = options.seed
    return out
