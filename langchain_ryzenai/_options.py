"""LangChain's vocabulary of call options, mapped onto the core's.

Keyword arguments, ``model_kwargs`` and constructor fields as LangChain users write them
(``max_tokens``, ``stop_sequences``, ``model_name``, ...) become core option names; names of
other runtimes' options that ChatRyzenAI does not have are refused with what to use instead.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

import pydantic
from langchain_core.language_models import BaseChatModel
from pydantic import AliasChoices

from ryzenai_core.errors import InvalidRequestError
from ryzenai_core.faces import did_you_mean

#: What the core's options are called in this face, for error messages.
OPTION_NAMES = {"max_new_tokens": "max_tokens", "template_vars": "model_kwargs"}

#: Keyword arguments a call accepts (``invoke(..., **kwargs)``, ``bind(**kwargs)``).
CALL_KWARGS = frozenset(
    {
        "chat_template",
        "enable_thinking",
        "guidance",
        "kv_reuse",
        "max_tokens",
        "model",
        "model_kwargs",
        "model_name",
        "overflow",
        "parallel_tool_calls",
        "reasoning",
        "repetition_penalty",
        "response_format",
        "seed",
        "temperature",
        "timeout",
        "tool_choice",
        "tools",
        "top_k",
        "top_p",
    }
)

#: Other names of per-call options, as other runtimes and providers spell them (accepted in ``model_kwargs``).
_OPTION_ALIASES = {
    "max_new_tokens": "max_tokens",
    "max_completion_tokens": "max_tokens",
    "max_output_tokens": "max_tokens",
    "random_seed": "seed",
    "stop_sequences": "stop",
    "reasoning": "enable_thinking",
    "model_name": "model",
}

_BEAM_SEARCH = "beam search is not supported (decoding is greedy or sampled); leave it out"
#: Generation options of other runtimes and providers that ChatRyzenAI does not have, and what to use instead.
_UNSUPPORTED_OPTIONS = {
    "max_length": (
        "onnxruntime-genai's max_length counts prompt + new tokens and ChatRyzenAI sets it from the package's "
        "budget; use max_tokens (new tokens)"
    ),
    "min_length": "a minimum answer length is not supported; leave it out",
    "min_new_tokens": "a minimum answer length is not supported; leave it out",
    "do_sample": "use temperature=0 for greedy decoding, a positive temperature to sample",
    "num_beams": _BEAM_SEARCH,
    "length_penalty": _BEAM_SEARCH,
    "early_stopping": _BEAM_SEARCH,
    "diversity_penalty": _BEAM_SEARCH,
    "num_return_sequences": "a call returns one answer; use batch() for several",
    "n": "a call returns one answer; use batch() for several",
    "presence_penalty": "use repetition_penalty",
    "frequency_penalty": "use repetition_penalty",
    "no_repeat_ngram_size": "use repetition_penalty",
    "min_p": "use top_p or top_k",
    "typical_p": "use top_p or top_k",
    "num_predict": "use max_tokens",
    "num_ctx": "the context window is the package's (response_metadata['budget_plan']['window'])",
    "logprobs": "token log-probabilities are not reported",
    "top_logprobs": "token log-probabilities are not reported",
    "logit_bias": "constrain the output with response_format or with_structured_output",
}
#: Options a call takes by keyword or inside ``model_kwargs``, each with every keyword that names it.
CALL_OPTIONS: dict[str, tuple[str, ...]] = {
    **{name: (name,) for name in CALL_KWARGS - {"model_kwargs", "reasoning", "model_name"}},
    "enable_thinking": ("enable_thinking", "reasoning"),
    "model": ("model", "model_name"),
    "stop": ("stop",),
}


def named_model(model: Any) -> str:
    """The model as the caller named it: a path as given, a repository id, an embedded model's name."""
    return os.fspath(model) if isinstance(model, os.PathLike) else str(model)


def generation_option(key: str, value: Any) -> str:
    """The per-call option a ``model_kwargs`` key names (after ``_OPTION_ALIASES``), or ``""``.

    Raises:
        InvalidRequestError: a generation option ChatRyzenAI does not have.
    """
    if key in _UNSUPPORTED_OPTIONS:
        raise InvalidRequestError(
            f"model_kwargs[{key!r}]={value!r} is a generation option ChatRyzenAI does not have: "
            f"{_UNSUPPORTED_OPTIONS[key]}"
        )
    name = _OPTION_ALIASES.get(key, key)
    return name if name in CALL_OPTIONS else ""


def given_twice(name: str, first: str, first_value: Any, key: str, value: Any) -> InvalidRequestError:
    return InvalidRequestError(
        f"{name} is given twice: {first}={first_value!r} and model_kwargs[{key!r}]={value!r}; give it once "
        f"(model_kwargs carries generation options as well as chat-template variables)"
    )


def _field_names(cls: type[pydantic.BaseModel], fields: Iterable[str]) -> dict[str, tuple[str, ...]]:
    """Each field with every name the constructor takes for it (the name, its alias and validation aliases)."""
    out: dict[str, tuple[str, ...]] = {}
    for name in fields:
        info = cls.model_fields[name]
        names = [name]
        if info.alias:
            names.append(info.alias)
        if isinstance(info.validation_alias, str):
            names.append(info.validation_alias)
        elif isinstance(info.validation_alias, AliasChoices):
            names.extend(c for c in info.validation_alias.choices if isinstance(c, str))
        out[name] = tuple(dict.fromkeys(names))
    return out


def refuse_unknown(
    cls: type[pydantic.BaseModel], kwargs: Mapping[str, Any], base: type[pydantic.BaseModel], note: str = "."
) -> None:
    """Refuse constructor arguments that name no field of ``cls``, with the closest known name.

    Args:
        cls: the class being built.
        kwargs: its constructor arguments.
        base: the framework's base class, whose fields the message leaves out of "takes".
        note: what the message says after the list of ``cls``'s own fields.

    Raises:
        InvalidRequestError: an unknown parameter.
    """
    every = _field_names(cls, cls.model_fields)
    accepted = {n for names in every.values() for n in names}
    renamed = getattr(cls, "renamed_settings", {})  # former names, taken (with a warning) by the class itself
    unknown = [k for k in kwargs if k not in accepted and k not in renamed]
    if unknown:
        own = sorted(set(cls.model_fields) - set(base.model_fields) - {"api_key", "base_url"})
        problems = []
        for key in unknown:
            match = did_you_mean(key, accepted)
            problems.append(
                f"{cls.__name__} got an unknown parameter {key!r}" + (f"; did you mean {match!r}?" if match else ".")
            )
        raise InvalidRequestError(" ".join(problems) + f" {cls.__name__} takes {', '.join(own)}{note}")


def init_kwargs(cls: type[BaseChatModel], kwargs: dict[str, Any]) -> dict[str, Any]:
    """Constructor arguments, checked, with the generation options of ``model_kwargs`` moved to their fields.

    Raises:
        InvalidRequestError: an unknown parameter; an option given both directly and in
            ``model_kwargs`` with different values; an option ChatRyzenAI does not have.
    """
    refuse_unknown(
        cls,
        kwargs,
        BaseChatModel,
        " (and LangChain's callbacks, tags, metadata, cache, rate_limiter, ...); chat-template variables go in "
        "model_kwargs.",
    )
    extra = kwargs.get("model_kwargs")
    if not isinstance(extra, Mapping) or not extra:
        return kwargs
    fields = set(cls.model_fields) - set(BaseChatModel.model_fields) - {"model_kwargs", "api_key", "base_url"}
    own_names = _field_names(cls, fields)
    field_of = {n: field for field, names in own_names.items() for n in names}
    out = dict(kwargs)
    kept: dict[str, Any] = {}
    lifted: dict[str, tuple[str, Any]] = {}
    for key, value in extra.items():
        generation_option(key, value)  # refuses what ChatRyzenAI does not have
        field = field_of.get(_OPTION_ALIASES.get(key) or key)
        if field is None:
            kept[key] = value  # a chat-template variable, or a call option such as tools (taken per call)
            continue
        value = normalised(field, value)
        if field in lifted and lifted[field][1] != value:
            first_key, first_value = lifted[field]
            raise given_twice(field, f"model_kwargs[{first_key!r}]", first_value, key, value)
        lifted[field] = (key, value)
        for name in own_names[field]:
            given = normalised(field, kwargs.get(name))
            if given is not None and given != value:
                raise given_twice(field, name, kwargs[name], key, value)
            out.pop(name, None)
        out[field] = value
    out["model_kwargs"] = kept
    return out


def normalised(name: str, value: Any) -> Any:
    """``stop`` as a list (one string may be given); other values as they are."""
    return [value] if name == "stop" and isinstance(value, str) else value
