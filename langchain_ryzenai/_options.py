"""LangChain's conventions for a call's options, mapped onto the core's vocabulary.

The options, their names, aliases and refusals are the core's (:func:`ryzenai_core.vocabulary.call_options`);
this face adds LangChain's: ``max_tokens`` for ``max_new_tokens``, ``model_kwargs`` (generation
options by any name, as if given directly, and chat-template variables), a per-call ``model``
(``model_name``), ``stop`` beside the keywords, and its constructor's checks.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterable, Mapping
from typing import Any

import pydantic
from langchain_core.language_models import BaseChatModel
from pydantic import AliasChoices

from ryzenai_core.errors import InvalidRequestError
from ryzenai_core.faces import reasoning_words
from ryzenai_core.vocabulary import did_you_mean, given_twice, option_name

#: The core's options by LangChain's names (its framework's conventions), in calls and error messages.
OPTION_NAMES = {"max_new_tokens": "max_tokens", "template_vars": "model_kwargs"}
#: A call's keywords that are LangChain's own: model_kwargs, and the model (``model_name`` too).
FACE_KEYWORDS = ("model_kwargs", "model", "model_name")
_TWICE = " (model_kwargs carries generation options as well as chat-template variables)"


def named_model(model: Any) -> str:
    """The model as the caller named it: a path as given, a repository id, an embedded model's name."""
    return os.fspath(model) if isinstance(model, os.PathLike) else str(model)


def call_arguments(
    call: dict[str, Any], bound: Mapping[str, Any], fixed: Collection[str]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(options, own)`` of one call: its options by the core's names, and ``model`` / ``timeout`` if given.

    ``call`` is the call's keywords as the core read them (any name it knows, LangChain's
    ``max_tokens`` too; ``model_kwargs`` and the model as given). An option in the call's
    ``model_kwargs`` counts as if given by keyword; those in the model's ``model_kwargs``
    (``bound``: what construction left there, such as ``tools``) are defaults below the call's.
    Every other key of ``model_kwargs`` is a chat-template variable (``options["template_vars"]``).

    Raises:
        InvalidRequestError: an option given twice in one call; an option the core does not
            have; in ``model_kwargs``, a setting of ``fixed`` (made when the model is created).
    """
    call = dict(call)
    extra = call.pop("model_kwargs", None)
    if extra is None:
        extra = {}
    if not isinstance(extra, Mapping):
        raise InvalidRequestError(
            f"model_kwargs must be a dict of generation options and chat-template variables, got "
            f"{type(extra).__name__}: {extra!r}"
        )
    own: dict[str, Any] = {key: call.pop(key) for key in ("model", "model_name", "timeout") if key in call}
    lifted: dict[str, Any] = {}
    template: dict[str, Any] = {}
    for per_call, source in ((False, bound), (True, extra)):
        for key, value in source.items():
            name = option_name(key, "ChatRyzenAI", OPTION_NAMES, value, where="model_kwargs")
            if not name and per_call and key in ("model", "model_name"):
                name = "model"
            elif not name:
                if key in fixed:
                    raise InvalidRequestError(
                        f"model_kwargs[{key!r}]={value!r} is set when ChatRyzenAI is created "
                        f"(ChatRyzenAI(..., {key}=...)), not per call"
                    )
                template[key] = value
                continue
            keyword = (own.get("model") or own.get("model_name")) if name == "model" else call.get(name)
            if per_call and keyword is not None and normalised(name, keyword) != normalised(name, value):
                called = OPTION_NAMES.get(name, name)
                raise given_twice(called, called, keyword, f"model_kwargs[{key!r}]", value, _TWICE)
            if value is not None:
                lifted[name] = value
    if "model" in lifted and "model" not in own and "model_name" not in own:
        own["model"] = lifted["model"]
    options = {**{k: v for k, v in lifted.items() if k != "model"}, **call}
    variables = {**template, **(call.get("template_vars") or {})}
    if variables:
        options["template_vars"] = variables
    return options, own


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
    kwargs = reasoning_words(kwargs, ("reasoning",))  # reasoning=True is enable_thinking, reasoning="high" an effort
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
        name = option_name(key, "ChatRyzenAI", OPTION_NAMES, value, where="model_kwargs")  # refuses what it lacks
        field = field_of.get(OPTION_NAMES.get(name, name) if name else key)
        if field is None:
            kept[key] = value  # a chat-template variable, or a call option such as tools (taken per call)
            continue
        value = normalised(field, value)
        if field in lifted and lifted[field][1] != value:
            first_key, first_value = lifted[field]
            first = f"model_kwargs[{first_key!r}]"
            raise given_twice(field, first, first_value, f"model_kwargs[{key!r}]", value, _TWICE)
        lifted[field] = (key, value)
        for name in own_names[field]:
            given = normalised(field, kwargs.get(name))
            if given is not None and given != value:
                raise given_twice(field, name, kwargs[name], f"model_kwargs[{key!r}]", value, _TWICE)
            out.pop(name, None)
        out[field] = value
    out["model_kwargs"] = kept
    return out


def normalised(name: str, value: Any) -> Any:
    """``stop`` as a list (one string may be given); other values as they are."""
    return [value] if name == "stop" and isinstance(value, str) else value
