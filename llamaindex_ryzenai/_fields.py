"""Constructor fields of the LlamaIndex classes: aliases resolved, unknown names refused with the closest ones."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from llama_index.core.schema import BaseComponent

from ryzenai_core.errors import InvalidRequestError
from ryzenai_core.faces import reasoning_words
from ryzenai_core.vocabulary import did_you_mean

#: Constructor names other LlamaIndex LLMs use for a field of ours (OpenAI's ``max_tokens``).
FIELD_ALIASES = {"max_tokens": "max_new_tokens"}
#: Constructor words for reasoning other LlamaIndex LLMs use (Ollama's ``thinking``: a bool, or a level).
REASONING_FIELDS = ("thinking",)


def checked_fields(
    cls: type[BaseComponent], data: Mapping[str, Any], aliases: Mapping[str, str] = FIELD_ALIASES
) -> dict[str, Any]:
    """Constructor (or ``model_copy`` update) fields with aliases resolved; unknown names refused.

    ``class_name`` (added by ``to_dict`` / ``model_dump``) is dropped when it names this class.
    ``aliases`` are other names of fields (default: the LLM's, :data:`FIELD_ALIASES`); with the
    LLM's, :data:`REASONING_FIELDS` too (``thinking=True`` is ``enable_thinking``, ``thinking="high"``
    a ``reasoning_effort``).

    Raises:
        InvalidRequestError: an unknown field (with the closest accepted names), another class's
            ``class_name``, or an alias and its field given different values (a ``ValueError``).
    """
    fields = dict(data)
    if "class_name" in fields:
        if fields["class_name"] != cls.class_name():
            raise InvalidRequestError(
                f"class_name={fields['class_name']!r}: these fields describe another LLM, not {cls.class_name()}; "
                f"load them with that class (or llama_index.core.llms.loading.load_llm)"
            )
        del fields["class_name"]
    if aliases is FIELD_ALIASES:
        fields = reasoning_words(fields, REASONING_FIELDS)
    for alias, name in aliases.items():
        if alias in fields:
            value = fields.pop(alias)
            if name in fields and fields[name] != value:
                raise InvalidRequestError(
                    f"{alias}={value!r} and {name}={fields[name]!r} disagree ({alias} is another name for "
                    f"{name}); pass only {name}"
                )
            fields[name] = value
    accepted = sorted(cls.model_fields)
    renamed = getattr(cls, "renamed_settings", {})  # former names, taken (with a warning) by the class itself
    unknown = [key for key in fields if key not in cls.model_fields and key not in renamed]
    if unknown:
        named = []
        for key in unknown:
            close = did_you_mean(str(key), [*accepted, *aliases])
            hint = f" (did you mean {close!r}?)" if close else ""
            named.append(f"{key!r}{hint}")
        also = f" (and {', '.join(f'{a} for {n}' for a, n in aliases.items())})" if aliases else ""
        raise InvalidRequestError(
            f"{cls.__name__} got unknown field(s) {', '.join(named)}; accepted fields: {', '.join(accepted)}{also}"
        )
    return fields
