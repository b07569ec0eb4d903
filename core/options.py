"""Generation options: one pydantic model, ``None`` meaning "the package's default".

:class:`GenerationOptions` validates what a caller asks; :meth:`GenerationOptions.plain` gives
the same values as plain data (:class:`~ryzenai_core.call_options.CallOptions`), which is what a
session runs and a worker receives. Precedence for sampling: the caller's value, then the
package's ``search`` section of genai_config.json, then the library default. Only values that
are set are sent to the runtime (:func:`~ryzenai_core.call_options.resolve_search`).
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Mapping
from typing import Annotated, Any, Literal, cast

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from .call_options import (
    CallOptions,
    Execution,
    FormatSpec,
    GuidanceSpec,
    check_runtime_settings,
    forces_tool,
)
from .errors import InvalidRequestError

__all__ = [
    "GenerationOptions",
    "ModelName",
    "Provider",
    "Guidance",
    "ResponseFormat",
    "response_format_from",
    "execution_setting",
    "tool_choice_from",
    "validated_options",
]

OverflowPolicy = Literal["error", "drop_oldest"]
#: ``auto`` (the model may call a tool), ``none`` (tools are not sent), ``required`` (it must
#: call one), or the name of the one tool it must call.
ToolChoice = str
_CHOICE_WORDS = {"auto": "auto", "none": "none", "required": "required", "any": "required"}
_CHOICE_HINT = (
    "use 'auto', 'none', 'required' (or 'any'), a tool name, or {'type': 'function', 'function': {'name': ...}}"
)


def _model_name(value: Any) -> Any:
    """A folder given as a path object, as the text the caller gave (``Path`` -> ``str``)."""
    return os.fspath(value) if isinstance(value, os.PathLike) else value


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


def _provider(value: str | None) -> str | None:
    check_runtime_settings(value)  # when a model object is made, not at its first call
    return value


#: A model as the caller named it: a package folder (a path object becomes its text), a Hugging
#: Face repository id or an embedded model's name. For the faces' ``model`` fields.
ModelName = Annotated[str, BeforeValidator(_model_name)]
#: An execution provider a runtime takes (None: the package's own). For the faces' ``provider`` fields.
Provider = Annotated[str | None, AfterValidator(_provider)]


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


class ResponseFormat(BaseModel):
    """The form of the answer: one JSON object (``json_object``) or a value matching ``json_schema``."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    type: Literal["json_object", "json_schema"]
    json_schema: dict[str, Any] | None = Field(None, description="the schema, for type json_schema")

    @model_validator(mode="after")
    def _schema_given(self) -> ResponseFormat:
        if (self.type == "json_schema") != (self.json_schema is not None):
            raise ValueError("a json_schema response format needs a schema (and json_object none)")
        return self


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


class Guidance(BaseModel):
    """Constrained decoding through onnxruntime-genai guidance.

    Attributes:
        type: ``json_schema``, ``regex`` or ``lark_grammar``.
        data: the schema (a dict, or its JSON text), the regular expression or the grammar.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["json_schema", "regex", "lark_grammar"]
    data: str

    @field_validator("data", mode="before")
    @classmethod
    def _schema_to_text(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return json.dumps(value)
        return value

    @model_validator(mode="after")
    def _check(self) -> Guidance:
        if not self.data.strip():
            raise ValueError(f"guidance of type {self.type!r} needs a non-empty schema, pattern or grammar")
        if self.type == "json_schema":
            try:
                parsed = json.loads(self.data)
            except json.JSONDecodeError as exc:
                raise ValueError(f"json_schema guidance is not valid JSON: {exc}") from exc
            if not isinstance(parsed, dict):
                raise ValueError("json_schema guidance must be a JSON object (a schema)")
        return self


class GenerationOptions(BaseModel):
    """Options of one generation. ``None`` means: use the package's default.

    Unknown fields are rejected, so a typo is an error, not a silently ignored option.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_new_tokens: int | None = Field(None, ge=1, description="new tokens to generate at most (not prompt + new)")
    temperature: float | None = Field(None, ge=0.0, le=100.0, description="0 means greedy decoding")
    top_p: float | None = Field(None, gt=0.0, le=1.0, description="nucleus sampling mass")
    top_k: int | None = Field(None, ge=0, description="sample among the k most likely tokens; 1 = greedy")
    repetition_penalty: float | None = Field(None, gt=0.0, description="1.0 = none")
    do_sample: bool | None = Field(None, description="sample (True) or take the most likely token (False)")
    seed: int | None = Field(None, ge=0, description="random seed; the same seed and prompt give the same output")
    stop: tuple[str, ...] = Field(default=(), description="strings that end the output; never part of it")
    enable_thinking: bool | None = Field(None, description="Qwen3-style reasoning on/off (template variable)")
    guidance: Guidance | None = Field(None, description="constrain the output to a JSON schema, regex or grammar")
    tools: tuple[dict[str, Any], ...] = Field(default=(), description="tool definitions (OpenAI function format)")
    tool_choice: ToolChoice = Field("auto", description="'auto', 'none', 'required' or the one tool's name")
    parallel_tool_calls: bool | None = Field(
        None,
        description="several tool calls in one answer: True allows them, False keeps the first; None: as many as "
        "the template renders back (one per answer where it renders one call per assistant turn)",
    )
    response_format: ResponseFormat | None = Field(None, description="JSON object or JSON schema output")
    chat_template: str | None = Field(None, description="a Jinja chat template (source or file) to use instead")
    template_vars: dict[str, Any] = Field(default_factory=dict, description="extra chat template variables")
    overflow: OverflowPolicy = Field("error", description="prompt over the limit: 'error' or 'drop_oldest' turns")
    kv_reuse: bool | None = Field(None, description="reuse the cached prefix of the previous call (None: package)")
    option_names: dict[str, str] = Field(
        default_factory=dict,
        repr=False,
        description="what the caller calls an option, for error messages ({'max_new_tokens': 'max_tokens'})",
    )

    def called(self, name: str) -> str:
        """The caller's name for the option ``name``."""
        return self.option_names.get(name, name)

    @field_validator("stop", mode="before")
    @classmethod
    def _stop_list(cls, value: Any) -> Any:
        if value is None:
            return ()
        if isinstance(value, str):
            return (value,)
        return tuple(value)

    @field_validator("stop")
    @classmethod
    def _stop_non_empty(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for s in value:
            if not isinstance(s, str) or s == "":
                raise ValueError(f"stop strings must be non-empty strings, got {s!r}")
            if any("\ud800" <= c <= "\udfff" for c in s):
                raise ValueError(
                    f"stop string {s!r} holds a lone surrogate, which is not valid Unicode and no output can "
                    "contain; fix the string"
                )
        return value

    @field_validator("tools", mode="before")
    @classmethod
    def _tools_tuple(cls, value: Any) -> Any:
        return () if value is None else tuple(value)

    @field_validator("tool_choice", mode="before")
    @classmethod
    def _choice(cls, value: Any) -> Any:
        return tool_choice_from(value)

    @field_validator("response_format", mode="before")
    @classmethod
    def _format(cls, value: Any) -> Any:
        return response_format_from(value)

    @field_validator("guidance", mode="before")
    @classmethod
    def _guidance(cls, value: Any) -> Any:
        # what the grammar builders of ryzenai_core.prompt.structured return
        return {"type": value.type, "data": value.data} if isinstance(value, GuidanceSpec) else value

    @field_validator("template_vars")
    @classmethod
    def _not_ours(cls, value: dict[str, Any]) -> dict[str, Any]:
        for key, what in _RESERVED_TEMPLATE_VARS.items():
            if key in value:
                raise ValueError(f"{key!r} cannot be a chat-template variable: it is {what}")
        return value

    @property
    def forced_tool(self) -> bool:
        """Whether the answer must be a tool call."""
        return forces_tool(self.tool_choice)

    def plain(self) -> CallOptions:
        """These options as plain data: what a session runs and a worker receives (no pydantic needed there)."""
        values = {name: getattr(self, name) for name in type(self).model_fields}
        guidance, shape = self.guidance, self.response_format
        values["guidance"] = None if guidance is None else GuidanceSpec(guidance.type, guidance.data)
        values["response_format"] = None if shape is None else FormatSpec(shape.type, shape.json_schema)
        return CallOptions(**values)

    @model_validator(mode="after")
    def _one_constraint(self) -> GenerationOptions:
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
            raise ValueError(f"a call can constrain its output one way only; it got {' and '.join(wanted)}")
        if self.forced_tool:
            names = [_tool_name(t) for t in self.tools]
            if not names:
                raise ValueError(f"tool_choice={self.tool_choice!r} requires a tool call but no tools were given")
            if self.tool_choice != "required" and self.tool_choice not in names:
                bound = ", ".join(names)
                raise ValueError(
                    f"tool_choice names {self.tool_choice!r}, which is not a bound tool; bound tools: {bound}"
                )
        return self


#: Names the chat template gets from the core itself, which a template variable cannot replace.
_RESERVED_TEMPLATE_VARS = {
    "messages": "the conversation itself; pass the messages to the call",
    "add_generation_prompt": "set by the core (True: the prompt opens the answer)",
    "tools": "the call's tools; pass them as tools",
    "chat_template": "the template itself; pass it as chat_template",
    "enable_thinking": "the call's enable_thinking option; pass it as that",
}


def _tool_name(tool: Any) -> str:
    fn = tool.get("function", tool) if isinstance(tool, Mapping) else None
    return str(fn.get("name")) if isinstance(fn, Mapping) else "?"


def validated_options(**kwargs: Any) -> GenerationOptions:
    """Build :class:`GenerationOptions`, turning validation errors into :class:`InvalidRequestError`.

    The message names each bad field (as ``option_names`` calls it), its value and the allowed range.
    """
    names = kwargs.get("option_names") or {}
    try:
        return GenerationOptions(**kwargs)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            message = str(err["msg"]).removeprefix("Value error, ")
            if not err["loc"]:  # a rule over several options
                problems.append(message)
                continue
            where = ".".join(str(p) for p in err["loc"])
            where = names.get(where, where) if isinstance(names, Mapping) else where
            problems.append(f"{where}={err.get('input')!r}: {message}")
        raise InvalidRequestError("invalid generation options: " + "; ".join(problems)) from None
