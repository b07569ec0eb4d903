"""What README.md, docs/*.md and benchmarks/*.md point at exists: relative links (and their headings),
the repository paths they name (``core/engine/client.py``, ``tests/...py::test_name``) and the
modules and names they name (``ryzenai_core.options.GenerationOptions``)."""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import pytest

from conftest import ROOT

DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [ROOT / "README.md", *DOCS, *sorted((ROOT / "benchmarks").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _anchors(page: Path) -> set[str]:
    out = set()
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            out.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return out


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_resolve(page: Path) -> None:
    broken = []
    for target in LINK.findall(page.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(target)
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(target)
    assert not broken, f"{page.name}: links that lead nowhere: {broken}"


def test_every_docs_page_is_reachable_from_the_readme() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    missing = [p.name for p in DOCS if f"docs/{p.name}" not in readme]
    assert not missing, f"docs pages the README does not link: {missing}"


#: A path in the repository, written anywhere in a page (text, code spans, diagrams).
REPO_PATH = re.compile(
    r"(?<![\w/.-])((?:core|cli|tests|benchmarks|scripts|langchain_ryzenai|llamaindex_ryzenai|namespaces|docs)/[\w./-]*\w)"
    r"(?:::(\w+))?"
)
#: Written by the scripts, not kept in git: benchmark results and the models the benchmarks build.
WRITTEN = ("benchmarks/results", "benchmarks/models")  # written by the benchmarks, ignored by git
#: A module of the project, or a name in one, by its import name.
DOTTED = re.compile(r"(?<![\w.])((?:ryzenai_core|ryzenai_cli|langchain_ryzenai|llamaindex_ryzenai)(?:\.\w+)+)")
FOLDERS = {"ryzenai_core": "core", "ryzenai_cli": "cli", "langchain_ryzenai": "langchain_ryzenai",
           "llamaindex_ryzenai": "llamaindex_ryzenai"}  # fmt: skip


@cache
def _names(path: Path) -> frozenset[str]:
    """What a module's top level binds (its definitions, assignments and imports)."""
    names: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        for n in [node, *(node.body + node.orelse if isinstance(node, (ast.If, ast.Try)) else [])]:
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(n.name)
            elif isinstance(n, (ast.Assign, ast.AnnAssign)):
                targets = n.targets if isinstance(n, ast.Assign) else [n.target]
                names.update(x.id for t in targets for x in ast.walk(t) if isinstance(x, ast.Name))
            elif (
                isinstance(n, ast.ImportFrom) and n.level == 1 and n.names[0].name == "*"
            ):  # errors, in the core's face
                names |= _names(path.parent / f"{n.module}.py")
            elif isinstance(n, (ast.Import, ast.ImportFrom)):
                names.update((a.asname or a.name).split(".")[0] for a in n.names)
    return frozenset(names)


def _resolves(dotted: str) -> bool:
    """Whether ``dotted`` is a module of the project, or a module and a name its top level binds."""
    top, *parts = dotted.split(".")
    for i in range(len(parts), -1, -1):
        base = ROOT / FOLDERS[top] / Path(*parts[:i])
        for module in (base.with_suffix(".py"), base / "__init__.py"):
            if module.is_file():
                return i == len(parts) or parts[i] in _names(module)
    return False


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_paths_named_in_a_page_exist(page: Path) -> None:
    missing = []
    for match in REPO_PATH.finditer(page.read_text(encoding="utf-8")):
        path, test = match.groups()
        if any(c in path for c in "*{") or path.startswith(WRITTEN):
            continue
        if not (ROOT / path).exists():
            missing.append(path)
        elif test and test not in _names(ROOT / path):
            missing.append(f"{path}::{test}")
    assert not missing, f"{page.name} names paths that do not exist: {missing}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_modules_named_in_a_page_exist(page: Path) -> None:
    missing = sorted({m for m in DOTTED.findall(page.read_text(encoding="utf-8")) if not _resolves(m)})
    assert not missing, f"{page.name} names modules or names that do not exist: {missing}"
