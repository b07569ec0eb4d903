"""What decides which LLM engine a call gets, in the one registry (:mod:`ryzenai_core.lifecycle`).

An engine is shared by every caller that names the same folder, provider, thread count,
release, execution and session options (its :class:`Slot`); on a Ryzen AI package run by its
own provider, by every caller whose generation would be the same on the NPU (see
:func:`npu_identity`), so the NPU never holds two copies of a model. How a caller named a
model (a folder, an embedded model's name, a repository id, with its settings) is remembered
with the folder it named then (:func:`folder_identity`), so the next call with that name skips
the lookup as long as the name still names the same folder.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, NamedTuple

from ..errors import RyzenAIError
from ..generation.loader import SessionKey
from ..package.folder import ModelPackage

__all__ = ["Slot", "folder_identity", "npu_identity"]


class Slot(NamedTuple):
    """What decides which engine a call gets: the session's key and the execution."""

    key: SessionKey
    execution: str


def folder_identity(name: str) -> tuple[int, int] | None:
    """(device, inode) of what ``name`` names in the file system (a symlink's target), None if nothing."""
    try:
        st = os.stat(name)
    except (OSError, ValueError):
        return None
    return (st.st_dev, st.st_ino)


def npu_identity(key: SessionKey, package: ModelPackage, mode: str) -> tuple[Any, ...] | None:
    """What decides a generation of a Ryzen AI package on its own provider; None for other runs.

    The model runs on the NPU there: the CPU thread count does not change a generation, and a
    release matters only through the budget it gives (two releases with the same prompt limit
    plan the same calls). Engines with the same identity share one loaded model, so the NPU
    never holds two copies of it. A CPU run keeps its thread count (it is its speed).
    """
    if not package.is_ryzenai or key.provider is not None:
        return None
    try:
        budget = dataclasses.replace(package.budget, prompt_limit_source="")
    except RyzenAIError:  # a package whose budget cannot be read: its calls say why, nothing is shared
        return None
    return (key.path, key.session_options, mode, budget)
