"""Generation options: one pydantic model, ``None`` meaning "the package's default".

Precedence for sampling: the caller's value, then the package's ``search`` section of
genai_config.json, then the library default. Only values that are set are sent to the
runtime (:func:`resolve_search`).
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .errors import InvalidRequestError

__all__ = ["GenerationOptions", "Guidance", "resolve_search", "validated_options"]

OverflowPolicy = Literal["error", "drop_oldest"]


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
    template_vars: dict[str, Any] = Field(default_factory=dict, description="extra chat template variables")
    overflow: OverflowPolicy = Field("error", description="prompt over the limit: 'error' or 'drop_oldest' turns")
    kv_reuse: bool | None = Field(None, description="reuse the cached prefix of the previous call (None: package)")

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


def validated_options(**kwargs: Any) -> GenerationOptions:
    """Build :class:`GenerationOptions`, turning validation errors into :class:`InvalidRequestError`.

    The message names each bad field, its value and the allowed range.
    """
    try:
        return GenerationOptions(**kwargs)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            where = ".".join(str(p) for p in err["loc"]) or "options"
            value = err.get("input")
            problems.append(f"{where}={value!r}: {err['msg']}")
        raise InvalidRequestError("invalid generation options: " + "; ".join(problems)) from None


# Library defaults, used when neither the caller nor the package sets a value.
_LIBRARY_DEFAULTS: dict[str, Any] = {"do_sample": False, "temperature": 1.0, "top_k": 50, "top_p": 1.0}
_SEARCH_KEYS = ("do_sample", "temperature", "top_k", "top_p", "repetition_penalty")


def resolve_search(options: GenerationOptions, package_search: dict[str, Any]) -> dict[str, Any]:
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
