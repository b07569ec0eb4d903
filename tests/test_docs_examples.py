"""The README's ```python examples run, on the fixture models, so they cannot rot.

Each block runs as written, in a subprocess of its own, after the substitutions below map the
names of real packages to fixtures that stand for them here. A block preceded by a line
``<!-- no-run: REASON -->`` is skipped with that reason.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import FIXTURES

ROOT = Path(__file__).parent.parent
MODELS = FIXTURES / "models"

# The real package names in the examples, and the fixture that stands for each here.
STAND_INS = {
    '"amd/Llama-3.2-1B_rai_1.8.0_npu_4K"': repr(str(MODELS / "tiny-llama")),
    '"Qwen3-4B_rai_1.8.0_npu_4K"': repr(str(MODELS / "tiny-qwen3")),
    '"Gemma-3-4b_rai_1.8.0_npu_16K"': repr(str(MODELS / "tiny-gemma3-vision")),
    '"BAAI/bge-small-en-v1.5"': repr(str(FIXTURES / "embeddings" / "tiny-bert-st")),
    '"cross-encoder/ms-marco-MiniLM-L6-v2"': repr(str(FIXTURES / "rerank" / "tiny-bert-cross-encoder")),
}
BLOCK = re.compile(r"(<!-- no-run: (?P<why>[^>]*?) -->\s*\n)?```python\n(?P<code>.*?)```", re.S)


def _blocks() -> list[tuple[str, str, str | None]]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return [
        (f"README.md:{text[: m.start('code')].count(chr(10)) + 1}", m.group("code"), m.group("why"))
        for m in BLOCK.finditer(text)
    ]


BLOCKS = _blocks()


def test_the_readme_has_examples() -> None:
    assert len(BLOCKS) >= 4


@pytest.mark.parametrize(("where", "code", "why"), BLOCKS, ids=[b[0] for b in BLOCKS])
def test_example_runs(where: str, code: str, why: str | None, tmp_path: Path) -> None:
    if why is not None:
        pytest.skip(why)
    image = tmp_path / "photo.png"
    from PIL import Image

    Image.new("RGB", (32, 32), (200, 30, 30)).save(image)
    for name, stand_in in {**STAND_INS, '"file:///path/to/photo.png"': repr(image.as_uri())}.items():
        code = code.replace(name, stand_in)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert run.returncode == 0, f"{where} failed:\n{code}\n{run.stderr[-3000:]}"
