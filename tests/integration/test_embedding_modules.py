"""What an embedding folder's sentence-transformers modules ask for, and what the engine does with it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import FIXTURES
from ryzenai_core.embeddings.package import EmbeddingPackage
from ryzenai_core.errors import UnsupportedModelError

EMBEDDINGS = FIXTURES / "embeddings"


def test_dense_layers_it_does_not_apply_are_refused_not_skipped() -> None:
    # Read as pooling + normalise alone, tiny-embeddinggemma's vectors were 0.6 off sentence-transformers'.
    with pytest.raises(UnsupportedModelError, match=r"2_Dense \(Dense\), 3_Dense \(Dense\)") as info:
        EmbeddingPackage.open(EMBEDDINGS / "tiny-embeddinggemma")
    assert "vectors would not be the model's" in str(info.value)


def test_sentence_transformers_6_module_types_are_read_too(tmp_path: Path) -> None:
    folder = shutil.copytree(EMBEDDINGS / "tiny-embeddinggemma", tmp_path / "st6")
    modules = json.loads((folder / "modules.json").read_text(encoding="utf-8"))
    modules[2]["type"] = "sentence_transformers.base.modules.dense.Dense"  # as sentence-transformers 6 saves it
    (folder / "modules.json").write_text(json.dumps(modules), encoding="utf-8")
    with pytest.raises(UnsupportedModelError, match=r"2_Dense \(Dense\)"):
        EmbeddingPackage.open(folder)


def test_sentence_transformers_6_pooling_config_is_read(tmp_path: Path) -> None:
    folder = shutil.copytree(EMBEDDINGS / "tiny-bert-st", tmp_path / "st6")
    # sentence-transformers 6 writes {"embedding_dimension": .., "pooling_mode": "mean", ...}
    (folder / "1_Pooling" / "config.json").write_text(
        json.dumps({"embedding_dimension": 32, "pooling_mode": "cls", "include_prompt": True}), encoding="utf-8"
    )
    package = EmbeddingPackage.open(folder)
    assert (package.pooling, package.pooling_source) == ("cls", "1_Pooling/config.json")
