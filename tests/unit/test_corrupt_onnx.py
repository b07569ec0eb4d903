"""A damaged model.onnx in an encoder folder gives a typed error naming the file and the fix."""

from __future__ import annotations

import shutil

import pytest

from conftest import FIXTURES
from ryzenai_core.embeddings.package import EmbeddingPackage
from ryzenai_core.errors import ModelPackageError
from ryzenai_core.rerank.package import RerankPackage


@pytest.mark.parametrize(
    ("kind", "folder"),
    [
        (EmbeddingPackage, FIXTURES / "embeddings" / "tiny-bert-st"),
        (RerankPackage, FIXTURES / "rerank" / "tiny-bert-cross-encoder"),
    ],
)
def test_a_damaged_onnx_file_is_a_typed_error_with_the_fix(tmp_path, kind, folder):
    copy = tmp_path / folder.name
    shutil.copytree(folder, copy)
    onnx_files = sorted(copy.rglob("*.onnx"))
    assert onnx_files
    for f in onnx_files:
        f.write_bytes(b"\x0a\xff\xff\xff\xff\x0f not protobuf")
    with pytest.raises(
        ModelPackageError, match=r"cannot be read as an ONNX model .*damaged or incomplete.*Download it again"
    ):
        kind.open(copy)
