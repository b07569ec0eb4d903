"""The ```python examples of README.md and docs/*.md run, on the fixture models, so they cannot rot.

A page's blocks run in order in one subprocess, as a reader would type them into one session:
later blocks use the names earlier ones define. Each block is compiled on its own, under the
page's name and line numbers (a traceback points into the page), with top-level ``await``
allowed: a block that awaits runs in ``asyncio.run``, as in an asyncio REPL or a notebook. The
substitutions below map the names of real packages to fixtures that stand for them here. The
working folder holds what the examples open: ``photo.png`` and a copy of ``docs/``. A block
preceded by a line ``<!-- no-run: REASON -->`` is left out, with that reason. Shell blocks
(```bash, ```console, ```text) are not run.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import FIXTURES, ROOT

MODELS = FIXTURES / "models"

# The real package names in the examples, and the fixture that stands for each here.
STAND_INS = {
    '"amd/Llama-3.2-1B_rai_1.8.0_npu_4K"': repr(str(MODELS / "tiny-llama")),
    '"C:/models/Llama-3.2-1B_rai_1.8.0_npu_4K"': repr(str(MODELS / "tiny-llama")),
    '"Qwen3-4B_rai_1.8.0_npu_4K"': repr(str(MODELS / "tiny-qwen3")),
    '"amd/Qwen3-4B_rai_1.8.0_npu_4K"': repr(str(MODELS / "tiny-qwen3")),
    '"amd/Gemma-3-4b_rai_1.8.0_npu_16K"': repr(str(MODELS / "tiny-gemma3-vision")),
    '"C:/models/Qwen3-4B_rai_1.8.0_npu_4K"': repr(str(MODELS / "tiny-qwen3")),
    '"Gemma-3-4b_rai_1.8.0_npu_16K"': repr(str(MODELS / "tiny-gemma3-vision")),
    '"BAAI/bge-small-en-v1.5"': repr(str(FIXTURES / "embeddings" / "tiny-bert-st")),
    '"C:/models/Qwen3-4B-multilora"': repr(str(MODELS / "tiny-qwen3-lora")),
    '"C:/adapters/sql.onnx_adapter"': repr(str(MODELS / "tiny-qwen3-lora" / "adapters" / "alpha.onnx_adapter")),
    '"C:/adapters/support.onnx_adapter"': repr(str(MODELS / "tiny-qwen3-lora" / "adapters" / "beta.onnx_adapter")),
    '"cross-encoder/ms-marco-MiniLM-L6-v2"': repr(str(FIXTURES / "rerank" / "tiny-bert-cross-encoder")),
    '"BAAI/bge-reranker-base"': repr(str(FIXTURES / "rerank" / "tiny-xlmr-reranker")),
    # EmbeddingGemma at 1/16 of its width: its Matryoshka sizes are 48, 32, 16, 8 (768, 512, 256, 128 / 16).
    '"onnx-community/embeddinggemma-300m-ONNX", dimensions=256': repr(
        str(FIXTURES / "embeddings" / "tiny-embeddinggemma")
    )
    + ", dimensions=16",
}
BLOCK = re.compile(r"(<!-- no-run: (?P<why>[^>]*?) -->\s*\n)?```python\n(?P<code>.*?)```", re.S)
# Any fence a reader would take for Python (```python, ```py, ```pycon, ```python3 ...).
PY_FENCE = re.compile(r"^\s*```\s*py", re.M)

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

# Runs in the subprocess: the page's blocks (name, first line, code) come on stdin.
RUNNER = """
import ast, asyncio, inspect, json, sys
namespace = {"__name__": "__main__"}
for where, line, code in json.load(sys.stdin):
    compiled = compile("\\n" * (line - 1) + code, where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    if compiled.co_flags & inspect.CO_COROUTINE:
        asyncio.run(eval(compiled, namespace))
    else:
        exec(compiled, namespace)
"""


def _name(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


def _blocks(page: Path) -> list[tuple[int, str, str | None]]:
    """(first line of the code, code, why it is not run or None) of each ```python block."""
    text = page.read_text(encoding="utf-8")
    return [(text[: m.start("code")].count("\n") + 1, m.group("code"), m.group("why")) for m in BLOCK.finditer(text)]


EXAMPLES = [(page, _blocks(page)) for page in PAGES if _blocks(page)]


def _markdown_files() -> list[Path]:
    """The repository's own markdown (not the fixtures' model cards, not environments)."""
    out = []
    for path in sorted(ROOT.rglob("*.md")):
        parts = path.relative_to(ROOT).parts
        if any(p.startswith(".") or p.endswith(".egg-info") or p in {"node_modules", "build", "dist"} for p in parts):
            continue
        if parts[:2] == ("tests", "fixtures"):
            continue
        out.append(path)
    return out


def test_the_docs_have_examples() -> None:
    assert sum(len(blocks) for _, blocks in EXAMPLES) >= 15
    assert {_name(p) for p, _ in EXAMPLES} >= {"README.md", "docs/langchain.md", "docs/llamaindex.md"}


def test_every_page_with_python_examples_is_run() -> None:
    """A page with Python examples is among the pages run, and every Python fence in it is a block
    that runs (or says why not): a new page, or a block fenced ```py, cannot slip by."""
    run = {_name(p): len(blocks) for p, blocks in EXAMPLES}
    missed = {}
    for path in _markdown_files():
        fences = len(PY_FENCE.findall(path.read_text(encoding="utf-8")))
        if fences != run.get(_name(path), 0):
            missed[_name(path)] = (fences, run.get(_name(path), 0))
    assert not missed, f"pages whose Python fences (found, run) are not all run: {missed}"


def test_a_block_not_run_says_why() -> None:
    blank = [
        f"{_name(p)}:{line}" for p, blocks in EXAMPLES for line, _, why in blocks if why is not None and not why.strip()
    ]
    assert not blank, f"no-run markers without a reason: {blank}"


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize(("page", "blocks"), EXAMPLES, ids=[p.name for p, _ in EXAMPLES])
def test_page_examples_run(page: Path, blocks: list[tuple[int, str, str | None]], tmp_path: Path) -> None:
    runnable = [(line, code) for line, code, why in blocks if why is None]
    if not runnable:
        pytest.skip("; ".join(sorted({why for _, _, why in blocks if why})))
    from PIL import Image

    image = tmp_path / "photo.png"
    Image.new("RGB", (32, 32), (200, 30, 30)).save(image)
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    stand_ins = {**STAND_INS, '"file:///path/to/photo.png"': repr(image.as_uri())}
    sources = []
    for line, code in runnable:
        for name, stand_in in stand_ins.items():
            code = code.replace(name, stand_in)
        sources.append((_name(page), line, code))
    run = subprocess.run(
        [sys.executable, "-c", RUNNER],
        input=json.dumps(sources),
        capture_output=True,
        text=True,
        timeout=840,
        cwd=tmp_path,
    )
    if run.returncode != 0:
        pytest.fail(f"{_name(page)} failed:\n{run.stderr[-4000:]}", pytrace=False)


# The packages whose docstrings' ``>>>`` examples run (the same stand-ins as the pages).
DOCSTRING_PACKAGES = ("langchain_ryzenai", "llamaindex_ryzenai", "ryzenai_core", "ryzenai_cli")

# Runs in the subprocess: every docstring example of the modules that have one, stand-ins put in.
DOCTEST_RUNNER = """
import doctest, importlib, json, sys
modules, stand_ins = json.load(sys.stdin)
runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
for name in modules:
    for test in doctest.DocTestFinder().find(importlib.import_module(name)):
        for example in test.examples:
            for real, stand_in in stand_ins.items():
                example.source = example.source.replace(real, stand_in)
        runner.run(test)
print(json.dumps(runner.summarize(verbose=False)._asdict()))
sys.exit(1 if runner.failures else 0)
"""


def _docstring_modules() -> list[str]:
    """The modules of the packages above whose source holds a ``>>>`` example."""
    roots = {"langchain_ryzenai": ROOT / "langchain_ryzenai", "llamaindex_ryzenai": ROOT / "llamaindex_ryzenai"}
    roots |= {"ryzenai_core": ROOT / "core", "ryzenai_cli": ROOT / "cli"}
    found = []
    for package in DOCSTRING_PACKAGES:
        for path in sorted(roots[package].rglob("*.py")):
            if ">>> " in path.read_text(encoding="utf-8"):
                parts = path.relative_to(roots[package]).with_suffix("").parts
                found.append(".".join((package, *(p for p in parts if p != "__init__"))))
    return found


@pytest.mark.slow
def test_docstring_examples_run(tmp_path: Path) -> None:
    """The recipes in docstrings (serialization, Settings.tokenizer) run as written, on the fixtures."""
    modules = _docstring_modules()
    assert {"langchain_ryzenai._shared", "llamaindex_ryzenai.llms"} <= set(modules)
    run = subprocess.run(
        [sys.executable, "-c", DOCTEST_RUNNER],
        input=json.dumps([modules, STAND_INS]),
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
        env={**os.environ, "RYZENAI_LLM_EXECUTION": "inline"},  # the models in this process: no worker to start
    )
    assert run.returncode == 0, f"docstring examples failed:\n{run.stdout[-4000:]}\n{run.stderr[-2000:]}"
    summary = json.loads(run.stdout.strip().splitlines()[-1])
    assert summary["attempted"] >= 7 and summary["failed"] == 0
