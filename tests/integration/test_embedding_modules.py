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


def test_dense_layers_are_applied_not_skipped() -> None:
    # Read as pooling + normalise alone, tiny-embeddinggemma's vectors were 0.6 off sentence-transformers'.
    pkg = EmbeddingPackage.open(EMBEDDINGS / "tiny-embeddinggemma", pooling="mean")  # pooling given: on the host
    assert [(d.path, d.activation, d.weight.shape) for d in pkg.dense] == [
        ("2_Dense", "identity", (192, 48)),
        ("3_Dense", "identity", (48, 192)),
    ]


def test_sentence_transformers_6_module_types_are_read_too(tmp_path: Path) -> None:
    folder = shutil.copytree(EMBEDDINGS / "tiny-embeddinggemma", tmp_path / "st6")
    modules = json.loads((folder / "modules.json").read_text(encoding="utf-8"))
    modules[2]["type"] = "sentence_transformers.base.modules.dense.Dense"  # as sentence-transformers 6 saves it
    (folder / "modules.json").write_text(json.dumps(modules), encoding="utf-8")
    assert [d.path for d in EmbeddingPackage.open(folder, pooling="mean").dense] == ["2_Dense", "3_Dense"]
    modules[2]["type"] = "sentence_transformers.base.modules.WordWeights"
    (folder / "modules.json").write_text(json.dumps(modules), encoding="utf-8")
    with pytest.raises(UnsupportedModelError, match=r"2_Dense \(WordWeights\)"):
        EmbeddingPackage.open(folder, pooling="mean")


def test_sentence_transformers_6_pooling_config_is_read(tmp_path: Path) -> None:
    folder = shutil.copytree(EMBEDDINGS / "tiny-bert-st", tmp_path / "st6")
    # sentence-transformers 6 writes {"embedding_dimension": .., "pooling_mode": "mean", ...}
    (folder / "1_Pooling" / "config.json").write_text(
        json.dumps({"embedding_dimension": 32, "pooling_mode": "cls", "include_prompt": True}), encoding="utf-8"
    )
    package = EmbeddingPackage.open(folder)
    assert (package.pooling, package.pooling_source) == ("cls", "1_Pooling/config.json")
