"""Where a chat template's source and special tokens come from, besides the package's own files.

The built-in fallbacks shipped in ``ryzenai_core/templates`` (:data:`FALLBACK_TEMPLATES`,
:func:`builtin_template`), the special tokens ``transformers`` passes every template, read from
``tokenizer_config.json`` (:data:`SPECIAL_TOKEN_NAMES`, :func:`special_tokens_from_config`),
and a template a caller passes instead, as source or as a file (:func:`read_override`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import ChatTemplateError
from .formats import Family

__all__ = [
    "FALLBACK_TEMPLATES",
    "SPECIAL_TOKEN_NAMES",
    "builtin_template",
    "read_override",
    "special_tokens_from_config",
    "token_text",
]

#: Built-in template file (in ``ryzenai_core/templates``) used when a package ships none.
FALLBACK_TEMPLATES: Mapping[Family, str] = {
    "llama3": "llama-3.2-instruct.jinja",
    "qwen3": "qwen3.jinja",
    "gemma3": "gemma-3-it.jinja",
    "chatml": "chatml.jinja",
}

#: The special-token attributes ``transformers`` passes to every template (its
#: ``SPECIAL_TOKENS_ATTRIBUTES``).
SPECIAL_TOKEN_NAMES: tuple[str, ...] = (
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
)


def token_text(value: Any) -> str | None:
    """A special token's text: a string, or an AddedToken dict's ``content``; None otherwise."""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping) and isinstance(value.get("content"), str):
        return str(value["content"])
    return None


def special_tokens_from_config(config: Mapping[str, Any], names: Sequence[str] = SPECIAL_TOKEN_NAMES) -> dict[str, str]:
    """The special-token strings of a ``tokenizer_config.json``, as templates see them.

    Values may be strings or ``{"content": ...}`` (AddedToken) dicts; missing or ``null``
    tokens are left out (so the template sees them as undefined, as with ``transformers``).

    Args:
        config: the parsed tokenizer configuration.
        names: the keys to read (default: :data:`SPECIAL_TOKEN_NAMES`).
    """
    out: dict[str, str] = {}
    for name in names:
        text = token_text(config.get(name))
        if text is not None:
            out[name] = text
    return out


def builtin_template(name: str) -> str:
    """The source of a template shipped in ``ryzenai_core/templates``.

    Args:
        name: the file name, e.g. ``qwen3.jinja`` (see :data:`FALLBACK_TEMPLATES`).

    Raises:
        ChatTemplateError: no such built-in template.
    """
    from importlib.resources import files  # here: a package with a template of its own never needs it

    resource = files("ryzenai_core").joinpath("templates", name)
    if "/" in name or "\\" in name or not resource.is_file():
        known = ", ".join(sorted(FALLBACK_TEMPLATES.values()))
        raise ChatTemplateError(f"there is no built-in chat template {name!r}; built-in templates: {known}")
    return resource.read_bytes().decode("utf-8")


def _looks_like_file(text: str) -> bool:
    if "{" in text or "\n" in text or len(text) > 4096:
        return False
    try:
        return Path(text).is_file()
    except (OSError, ValueError):  # e.g. a name too long for the file system
        return False


def read_override(override: str | os.PathLike[str]) -> str:
    """A template a caller passes: the source itself, or a file (a path, or a one-line name of a file) read as UTF-8."""
    if isinstance(override, os.PathLike) or _looks_like_file(override):
        path = Path(override)
        try:
            return path.read_bytes().decode("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ChatTemplateError(
                f"cannot read the chat template file {str(path)!r} ({exc}); pass a readable UTF-8 .jinja file "
                "or the template source"
            ) from exc
    return override
