"""Public names a package imports on first use (PEP 562), for the core and both faces.

A package lists its names and the modules that define them; ``import`` of the package then costs
only what it imports itself, and each name's module loads the first time the name is read
(after which it is an ordinary attribute of the package). A face's import checks that its
framework is installed (:func:`require_framework`) without importing it: the framework loads
with the first class that needs it.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_names", "require_framework"]


def require_framework(module: str, extra: str, what: str) -> None:
    """Raise an ImportError that names the extra to install when ``module`` is not installed.

    The module is found, not imported (a framework's import takes about a second).
    """
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # its parent package is missing; a module without a spec
        found = False
    if not found:
        raise ImportError(
            f"{what} needs the `{module}` package, which is not installed. "
            f"Install it with: pip install 'ryzenai-llm[{extra}]'"
        )


def lazy_names(
    package: str,
    names: Mapping[str, str],
    computed: Mapping[str, Callable[[], Any]] | None = None,
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``.

    ``names`` maps each lazy public name to its module, relative to ``package``; ``computed``
    maps names whose value a function gives (``__version__``).
    """
    namespace = sys.modules[package].__dict__
    computed = computed or {}

    def __getattr__(name: str) -> Any:  # noqa: N807 - the module attribute hook
        if name in computed:
            value = computed[name]()
        elif name in names:
            value = getattr(importlib.import_module(names[name], package), name)
        else:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        namespace[name] = value
        return value

    def __dir__() -> list[str]:  # noqa: N807 - the module attribute hook
        return sorted({*namespace, *namespace.get("__all__", ())})

    return __getattr__, __dir__
