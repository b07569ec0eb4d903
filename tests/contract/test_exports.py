from __future__ import annotations

import importlib
import os
import shutil
import site
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

import ryzenai_core
from conftest import ROOT


def test_all_is_sorted_and_complete():
    assert ryzenai_core.__all__ == sorted(ryzenai_core.__all__)
    for name in ryzenai_core.__all__:
        assert hasattr(ryzenai_core, name), name
    public = {n for n in dir(ryzenai_core) if not n.startswith("_") and n[0].isupper()}
    assert public <= set(ryzenai_core.__all__)
    assert set(ryzenai_core.errors.__all__) <= set(ryzenai_core.__all__)  # every error, in the literal list


def test_version_comes_from_metadata():
    from importlib.metadata import version

    assert ryzenai_core.__version__ == version("ryzenai-llm")


def test_every_error_derives_from_the_root():
    for name in ryzenai_core.__all__:
        obj = getattr(ryzenai_core, name)
        if isinstance(obj, type) and issubclass(obj, Exception):
            assert issubclass(obj, ryzenai_core.RyzenAIError), name


def test_py_typed_is_shipped():
    from importlib.resources import files

    assert files("ryzenai_core").joinpath("py.typed").is_file()


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project's wheel, built once for this module's tests."""
    out = tmp_path_factory.mktemp("wheel")
    # Built from a copy of the sources: a build/ folder left in the checkout by an earlier build
    # would put modules that no longer exist into the wheel.
    source = tmp_path_factory.mktemp("source") / "ryzenai-llm"
    skip = shutil.ignore_patterns(".git", ".venv*", "build", "dist", "*.egg-info", "__pycache__", "tests", "benchmarks")
    shutil.copytree(ROOT, source, ignore=skip)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "--no-build-isolation", "-q", "-w", str(out)],
        check=True,
        capture_output=True,
    )
    (found,) = out.glob("ryzenai_llm-*.whl")
    return found


def test_wheel_holds_four_packages_and_no_top_level_core(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"ryzenai_core", "ryzenai_cli", "langchain_ryzenai", "llamaindex_ryzenai", "llama_index"}
    assert "ryzenai_core/models/tiny-random-llama/model.onnx.data" in names
    assert "ryzenai_core/models/tiny-qa-llama/model.onnx.data" in names
    assert "ryzenai_core/models/tiny-qa-llama/README.md" in names
    assert "ryzenai_core/templates/qwen3.jinja" in names
    assert "ryzenai_core/py.typed" in names
    assert "ryzenai_cli/demo_docs/questions.json" in names
    # the demo's pipelines are the CLI's: the library packages carry no demo application
    assert {"ryzenai_cli/demo_langchain.py", "ryzenai_cli/demo_llamaindex.py"} <= set(names)
    assert not [n for n in names if n.startswith(("langchain_ryzenai/demo", "llamaindex_ryzenai/demo"))]


def test_wheel_holds_every_core_module_and_no_other(wheel):
    """Each wing of the core is a package the wheel must list; a module moved away must not linger."""
    names = zipfile.ZipFile(wheel).namelist()
    shipped = {n for n in names if n.startswith("ryzenai_core/") and n.endswith(".py")}
    sources = {"ryzenai_core/" + p.relative_to(ROOT / "core").as_posix() for p in (ROOT / "core").rglob("*.py")}
    assert shipped == sources


def test_wheel_adds_llamaindex_namespace_modules_and_no_namespace_init(wheel):
    """llama_index/ and llama_index/llms/ belong to every LlamaIndex distribution: an __init__.py of ours would
    make them regular packages and hide llama-index-core and the other integrations."""
    ours = sorted(n for n in zipfile.ZipFile(wheel).namelist() if n.startswith("llama_index/"))
    assert ours == [
        "llama_index/embeddings/ryzenai/__init__.py",
        "llama_index/llms/ryzenai/__init__.py",
        "llama_index/postprocessor/ryzenai_rerank/__init__.py",
    ]


@pytest.mark.slow
def test_namespace_modules_import_from_the_installed_wheel(wheel, tmp_path):
    """The wheel installed with pip into a fresh environment whose llama-index-core is another site directory's.

    llama-index-core comes from this test environment's site-packages (a path entry after the
    fresh one's, no network), so llama_index is one namespace package spread over two
    folders, as when integrations are installed separately: ours must join it, not hide it.
    """
    env = tmp_path / "env"
    venv.create(env, with_pip=False)
    python = env / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    site_dir = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index", "-q", str(wheel)],
        check=True,
        capture_output=True,
    )
    here = {p for p in site.getsitepackages() if Path(p).is_dir()}
    (Path(site_dir) / "outer_site_packages.pth").write_text("\n".join(sorted(here)) + "\n", encoding="utf-8")
    check = """
import llama_index.core, llamaindex_ryzenai, ryzenai_core
from llama_index.core.llms import LLM
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.llms.ryzenai import RyzenAILLM
from llama_index.embeddings.ryzenai import RyzenAIEmbedding
from llama_index.postprocessor.ryzenai_rerank import RyzenAIRerank
from llama_index.core.postprocessor.types import BaseNodePostprocessor
assert RyzenAILLM is llamaindex_ryzenai.RyzenAILLM and issubclass(RyzenAILLM, LLM)
assert RyzenAIEmbedding is llamaindex_ryzenai.RyzenAIEmbedding and issubclass(RyzenAIEmbedding, BaseEmbedding)
assert RyzenAIRerank is llamaindex_ryzenai.RyzenAIRerank and issubclass(RyzenAIRerank, BaseNodePostprocessor)
import llama_index.llms.ryzenai as ns
print(ns.__file__, ryzenai_core.__file__, llama_index.core.__file__, sep="\\n")
"""
    out = subprocess.run([str(python), "-c", check], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    ns_file, core_file, llama_core_file = (Path(line) for line in out.stdout.split())
    assert ns_file.is_relative_to(site_dir) and core_file.is_relative_to(site_dir)  # the wheel's, not the checkout's
    assert not llama_core_file.is_relative_to(site_dir)  # llama-index-core from the other folder


@pytest.mark.parametrize(
    ("adapter", "framework", "extra"),
    [("langchain_ryzenai", "langchain_core", "langchain"), ("llamaindex_ryzenai", "llama_index.core", "llamaindex")],
)
def test_adapter_without_its_framework_names_the_extra(monkeypatch, adapter, framework, extra):
    root = framework.split(".")[0]
    for mod in list(sys.modules):
        if mod == adapter or mod.startswith(adapter + ".") or mod == root or mod.startswith(root + "."):
            monkeypatch.delitem(sys.modules, mod)
    monkeypatch.setitem(sys.modules, root, None)  # what an import finds for a package that is not installed
    with pytest.raises(ImportError, match=rf"pip install 'ryzenai-llm\[{extra}\]'"):
        importlib.import_module(adapter)


def test_every_test_has_a_timeout(request: pytest.FixtureRequest) -> None:
    """pytest-timeout is in the test extra and the ini options set a per-test timeout: a hung test fails."""
    import tomllib

    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert any(r.startswith("pytest-timeout") for r in pyproject["project"]["optional-dependencies"]["test"])
    assert request.config.pluginmanager.hasplugin("timeout")
    assert 60 <= float(request.config.getini("timeout")) <= 900


def _modules_after(code: str) -> set[str]:
    """The modules a fresh interpreter has loaded after running ``code``."""
    err = subprocess.run(  # the list on stderr: a worker moves its stdout there
        [sys.executable, "-c", code + "\nimport sys; print(' '.join(sys.modules), file=sys.stderr)"],
        check=True,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    ).stderr
    return set(err.splitlines()[-1].split())


def test_importing_a_face_loads_no_engine():
    """The engine (sessions, templates, the worker client) loads with the first model a face opens."""
    loaded = _modules_after("import langchain_ryzenai, llamaindex_ryzenai")
    assert "ryzenai_core.engine.engine" not in loaded and "ryzenai_core.generation.session" not in loaded


@pytest.mark.parametrize("name", ["langchain_ryzenai.chat_models", "llamaindex_ryzenai.llms"])
def test_a_chat_models_import_loads_no_engine_and_no_template_machinery(name):
    """What the engine, the session and the chat templates cost loads with the first call, while a worker starts."""
    loaded = _modules_after(f"import {name}")
    ours = {
        "ryzenai_core.engine.engine",
        "ryzenai_core.engine.client",
        "ryzenai_core.generation.session",
        "ryzenai_core.prompt.templates",
        "ryzenai_core.prompt.structured",
    }
    assert not ours & loaded, sorted(ours & loaded)


def test_a_worker_starts_without_pydantic():
    """Options are one plain dataclass (GenerationOptions): a worker's start is the interpreter and the core's own modules."""
    loaded = _modules_after("import ryzenai_core.engine.worker")
    assert not {"pydantic", "pydantic_core", "ryzenai_core.faces"} & loaded
    assert "ryzenai_core.options" in loaded  # what it unpickles a call's options with


def test_a_worker_starts_without_the_network_stack():
    """A model worker's start (its imports are most of it) brings no http.client or ssl: only a file: URL imports them."""
    loaded = _modules_after("import ryzenai_core.engine.worker")
    assert not {"http.client", "ssl", "urllib.request"} & loaded


def test_importing_the_core_loads_its_names_on_first_use():
    """``import ryzenai_core`` loads the errors only; a name loads its module when it is first used."""
    loaded = _modules_after("import ryzenai_core")
    assert {m for m in loaded if m.startswith("ryzenai_core")} == {
        "ryzenai_core",
        "ryzenai_core.errors",
        "ryzenai_core.lazy",
    }
    assert "jinja2" not in loaded and "pydantic" not in loaded
    loaded = _modules_after("from ryzenai_core import ChatMessage, __version__; print(__version__)")
    assert "ryzenai_core.messages" in loaded and "ryzenai_core.engine.engine" not in loaded
    assert "__version__" in dir(ryzenai_core) and "Engine" in dir(ryzenai_core)
    with pytest.raises(AttributeError, match="no attribute 'Nothing'"):
        ryzenai_core.Nothing  # noqa: B018


@pytest.mark.parametrize(
    ("code", "absent"),
    [
        (
            "from langchain_ryzenai import ChatRyzenAI",
            (
                "langchain_ryzenai.embeddings",
                "langchain_ryzenai.rerank",
                "ryzenai_core.embeddings",
                "ryzenai_core.rerank",
                "onnxruntime",
                "numpy",
            ),
        ),
        (
            "from llamaindex_ryzenai import RyzenAILLM",
            (
                "llamaindex_ryzenai.embeddings",
                "llamaindex_ryzenai.rerank",
                "llamaindex_ryzenai.postprocessor",
                "ryzenai_core.embeddings",
                "ryzenai_core.rerank",
                "onnxruntime",
            ),
        ),
        # The worker's module (what `python -m ryzenai_core.engine.worker` imports before its model):
        # none of the caller's side (the engine, asyncio) nor the encoders, nor what only some calls
        # use (constrained output, an EP library probe, strftime_now, a built-in template).
        (
            "import ryzenai_core.engine.worker",
            (
                "ryzenai_core.engine.engine",
                "ryzenai_core.embeddings",
                "ryzenai_core.rerank",
                "asyncio",
                "ryzenai_core.prompt.completion",
                "subprocess",
                "datetime",
                "importlib.resources",
            ),
        ),
    ],
    ids=["langchain", "llamaindex", "worker"],
)
def test_a_chat_model_or_a_worker_imports_no_encoder_machinery(code, absent):
    loaded = _modules_after(code)
    assert not set(absent) & loaded, sorted(set(absent) & loaded)
