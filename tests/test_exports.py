from __future__ import annotations

import builtins
import importlib
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import ryzenai_core


def test_all_is_sorted_and_complete():
    assert ryzenai_core.__all__ == sorted(ryzenai_core.__all__)
    for name in ryzenai_core.__all__:
        assert hasattr(ryzenai_core, name), name
    public = {n for n in dir(ryzenai_core) if not n.startswith("_") and n[0].isupper()}
    assert public <= set(ryzenai_core.__all__)


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


def test_wheel_holds_four_packages_and_no_top_level_core(tmp_path):
    root = Path(__file__).resolve().parents[1]
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            str(root),
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("ryzenai_llm-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"ryzenai_core", "ryzenai_cli", "langchain_ryzenai", "llamaindex_ryzenai"}
    assert "ryzenai_core/models/tiny-random-llama/model.onnx.data" in names
    assert "ryzenai_core/models/tiny-qa-llama/model.onnx.data" in names
    assert "ryzenai_core/models/tiny-qa-llama/README.md" in names
    assert "ryzenai_core/templates/qwen3.jinja" in names
    assert "ryzenai_core/py.typed" in names
    assert "ryzenai_cli/demo_docs/questions.json" in names


@pytest.mark.parametrize(
    ("adapter", "framework", "extra"),
    [("langchain_ryzenai", "langchain_core", "langchain"), ("llamaindex_ryzenai", "llama_index.core", "llamaindex")],
)
def test_adapter_without_its_framework_names_the_extra(monkeypatch, adapter, framework, extra):
    real_import = builtins.__import__
    root = framework.split(".")[0]

    def fake_import(name, *args, **kwargs):
        if name == root or name.startswith(root + "."):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    for mod in list(sys.modules):
        if mod == adapter or mod.startswith(adapter + ".") or mod == root or mod.startswith(root + "."):
            monkeypatch.delitem(sys.modules, mod)
    monkeypatch.setattr(builtins, "__import__", fake_import)
    monkeypatch.setattr(importlib, "import_module", lambda name, package=None: fake_import(name))
    with pytest.raises(ImportError, match=rf"pip install 'ryzenai-llm\[{extra}\]'"):
        importlib.__import__(adapter)
