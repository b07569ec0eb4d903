"""Models that ship inside the ryzenai-llm wheel (no download needed)."""

from __future__ import annotations

from pathlib import Path

__all__ = ["DEFAULT_MODEL", "default_model_path", "embedded_models"]

_HERE = Path(__file__).resolve().parent

#: Name of the embedded default model.
DEFAULT_MODEL = "tiny-qa-llama"


def embedded_models() -> dict[str, Path]:
    """Embedded model folders by name."""
    return {p.name: p for p in sorted(_HERE.iterdir()) if (p / "genai_config.json").is_file()}


def default_model_path() -> Path:
    """Folder of the embedded default model."""
    return embedded_models()[DEFAULT_MODEL]
