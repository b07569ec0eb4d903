"""Helpers shared by the framework adapters (no framework imports here)."""

from __future__ import annotations

import importlib

__all__ = ["require_framework"]


def require_framework(module: str, extra: str, what: str) -> None:
    """Import ``module`` or raise an ImportError that names the extra to install."""
    try:
        importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(
            f"{what} needs the `{module}` package, which is not installed. "
            f"Install it with: pip install 'ryzenai-llm[{extra}]'"
        ) from exc
