"""Every name a module exports is its own: a module's ``__all__`` lists only what it defines.

A package's ``__init__`` is the one exception: it is the face of its package (``ryzenai_core``,
``langchain_ryzenai``, ...) and names what its modules define. Code inside the project imports a
name from the module that defines it.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

from conftest import ROOT

PACKAGES = ("core", "cli", "langchain_ryzenai", "llamaindex_ryzenai")
MODULES = sorted(p for folder in PACKAGES for p in (ROOT / folder).rglob("*.py") if p.name != "__init__.py")


def _defined(tree: ast.Module) -> set[str]:
    """The names a module's top level binds itself (not by import)."""
    names: set[str] = set()
    for node in tree.body:
        for n in [node, *(node.body + node.orelse if isinstance(node, (ast.If, ast.Try)) else [])]:
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(n.name)
            elif isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = n.targets if isinstance(n, ast.Assign) else [n.target]
                names.update(x.id for t in targets for x in ast.walk(t) if isinstance(x, ast.Name))
    return names


@cache
def _defined_in(path: Path) -> set[str]:
    return _defined(ast.parse(path.read_text(encoding="utf-8")))


def _exported(tree: ast.Module) -> list[str]:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return list(ast.literal_eval(node.value))
    return []


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_a_module_exports_only_what_it_defines(path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    foreign = sorted(set(_exported(tree)) - _defined(tree))
    assert not foreign, f"{path.relative_to(ROOT)} exports names it imports: {foreign}; import them from their module"


#: Import name -> folder, as the project installs them.
NAMES = {
    "ryzenai_core": "core",
    "ryzenai_cli": "cli",
    "langchain_ryzenai": "langchain_ryzenai",
    "llamaindex_ryzenai": "llamaindex_ryzenai",
}


def _module_path(module: str) -> Path | None:
    top, _, rest = module.partition(".")
    if top not in NAMES:
        return None
    base = ROOT / NAMES[top] / Path(*rest.split(".")) if rest else ROOT / NAMES[top]
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _importers() -> list[Path]:
    folders = (*PACKAGES, "namespaces", "tests", "benchmarks", "scripts")
    return sorted(p for folder in folders for p in (ROOT / folder).rglob("*.py"))


def _module_of(path: Path) -> str | None:
    """The import name of a project file (None outside the packages)."""
    rel = path.relative_to(ROOT)
    names = {folder: name for name, folder in NAMES.items()}
    if rel.parts[0] not in names:
        return None
    parts = [names[rel.parts[0]], *rel.with_suffix("").parts[1:]]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported_from(path: Path, node: ast.ImportFrom) -> str | None:
    if not node.level:
        return node.module
    own = _module_of(path)
    if own is None:
        return None
    base = own.split(".") if path.name == "__init__.py" else own.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


@pytest.mark.parametrize("path", _importers(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_names_are_imported_from_the_module_that_defines_them(path: Path) -> None:
    """A package's face (its ``__init__``) is for code outside the package: tests, the CLI's demo, users."""
    package = (_module_of(path) or "").partition(".")[0]
    wrong = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.ImportFrom) or (source := _imported_from(path, node)) is None:
            continue
        source_path = _module_path(source)
        if source_path is None or (source_path.name == "__init__.py" and source.partition(".")[0] != package):
            continue
        defined = _defined_in(source_path)
        for alias in node.names:
            if alias.name in defined or alias.name == "*" or _module_path(f"{source}.{alias.name}") is not None:
                continue
            wrong.append(f"{alias.name} from {source}")
    assert not wrong, f"{path.relative_to(ROOT)} imports names from a module that does not define them: {wrong}"
