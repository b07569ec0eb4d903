from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
MODELS = FIXTURES / "models"
REPLICAS = FIXTURES / "replicas"
TINY_LLAMA = MODELS / "tiny-llama"
TINY_QWEN3 = MODELS / "tiny-qwen3"
TINY_GEMMA3 = MODELS / "tiny-gemma3-text"


@pytest.fixture(autouse=True)
def _no_release_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests see no RYZENAI_VERSION unless they set it."""
    monkeypatch.delenv("RYZENAI_VERSION", raising=False)


@pytest.fixture
def copy_package(tmp_path: Path):
    """Copy a fixture folder into tmp_path (optionally under another name) for mutation."""

    def _copy(src: Path, name: str | None = None) -> Path:
        dst = tmp_path / (name or src.name)
        shutil.copytree(src, dst)
        return dst

    return _copy


@pytest.fixture
def llamaindex_event_loop():
    """A main-thread event loop, closed after the test.

    Sync LlamaIndex code (token estimates, memory, streaming query engines) runs coroutines
    through ``llama_index.core.async_utils.asyncio_run``, which otherwise creates a loop it
    never closes (a ResourceWarning once ``asyncio.run`` replaces it).
    """
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    yield loop
    asyncio.set_event_loop(None)
    loop.close()
