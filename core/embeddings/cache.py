"""What an encoder engine keeps on disk for its shapes, and where each shape's session really runs.

:class:`EncoderCache` holds, for one model file:

- the static copies of a dynamic graph (one ONNX file per ``(rows, sequence)`` shape);
- the VitisAI provider options of each static shape (:func:`~.vitisai.vitisai_options`: AMD's
  compile configuration, the per-user compile cache, a key per model, shape, release and
  configuration), and so where the NPU's compile of that shape is kept;
- what ``ryzenai-llm warmup`` did (a marker per shape it opened), so that a second warmup
  does nothing.

:meth:`EncoderCache.state` says whether a shape is compiled (the VitisAI pass summary is there),
and :meth:`EncoderCache.placement` where its session runs (:class:`Placement`: on the NPU, partly,
or "VitisAI requested, ran on the CPU", from the pass summary; the CPU for a CPU session).
Nothing here imports onnxruntime.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from .compile_progress import cache_state
from .folder import import_onnx
from .pass_summary import read_pass_summary
from .vitisai import default_cache_root, vitisai_options

__all__ = [
    "NPU_PROVIDER",
    "EncoderCache",
    "Placement",
    "RanOn",
    "ShapeState",
    "cache_root",
    "file_digest",
    "shape_label",
]

NPU_PROVIDER = "VitisAIExecutionProvider"
#: Where a session ran: every operator on the NPU, some of them, none (the CPU), a GPU, or not known.
RanOn = Literal["npu", "partial", "cpu", "gpu", "unknown"]
#: A shape on disk: compiled for the NPU (its pass summary written), opened by a warmup (a session
#: that writes no summary), a compile that did not finish, or nothing yet.
ShapeState = Literal["compiled", "opened", "partial", "absent"]
_GPU_PROVIDERS = ("CUDAExecutionProvider", "DmlExecutionProvider")
_SLUG = re.compile(r"[^a-z0-9._-]+")


def file_digest(path: Path) -> str:
    """The SHA-256 of a file, read in blocks (it keys static copies and the VitisAI cache)."""
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def shape_label(shape: tuple[int, int] | None) -> str:
    """``"1x128"`` for a static shape, ``"dynamic"`` for a session that takes any shape."""
    return f"{shape[0]}x{shape[1]}" if shape else "dynamic"


@dataclass(frozen=True)
class Placement:
    """Where one shape's session runs, as far as this machine can tell.

    Attributes:
        shape: the shape's label (``"1x128"``, ``"dynamic"``).
        provider: the execution provider the session asked for first.
        ran_on: ``npu`` (every operator), ``partial``, ``cpu`` (a CPU session, or VitisAI that
            offloaded nothing), ``gpu`` or ``unknown`` (VitisAI without a pass summary).
        npu_share: the share of the model's operators on the NPU (VitisAI with a summary).
        detail: one line for logs, ``info`` and ``doctor``.
    """

    shape: str
    provider: str
    ran_on: RanOn
    npu_share: float | None
    detail: str

    def describe(self) -> dict[str, Any]:
        """A JSON-ready view (result metadata, ``info --json``)."""
        return {"provider": self.provider, "ran_on": self.ran_on, "npu_share": self.npu_share, "detail": self.detail}


class EncoderCache:
    """One model file's shapes on disk: static copies, VitisAI options and compile state, warmup markers.

    Args:
        root: the engine's cache folder (static copies and warmup markers go under it).
        vitisai_dir: the VitisAI compile cache (default: ``vitisai`` in the per-user cache).
        name: the model's name (in keys and messages).
        onnx_file: the model file the engine runs (before its shape is fixed).
        ort_version: ``onnxruntime.__version__``.
        provider_options: the user's VitisAI options, over the defaults.
    """

    def __init__(
        self,
        *,
        root: Path,
        vitisai_dir: Path | None,
        name: str,
        onnx_file: Path,
        ort_version: str,
        provider_options: Mapping[str, str],
    ) -> None:
        self.root = root
        self.vitisai_dir = vitisai_dir
        self.name = name
        self.onnx_file = onnx_file
        self.ort_version = ort_version
        self.provider_options = dict(provider_options)
        self._digest: str | None = None
        self._options: dict[tuple[int, int], dict[str, str]] = {}
        #: Placements read from a final pass summary: a finished compile's verdict does not change.
        self._placed: dict[tuple[int, int], Placement] = {}
        self._lock = threading.Lock()

    @property
    def digest(self) -> str:
        """The model file's SHA-256 (read once)."""
        if self._digest is None:
            self._digest = file_digest(self.onnx_file)
        return self._digest

    # -- the NPU's compile cache -------------------------------------------------------------------

    def vitisai_options(self, shape: tuple[int, int]) -> dict[str, str]:
        """The VitisAI provider options of one static shape (computed once per shape).

        Raises:
            ConfigError: the compile configuration cannot be read or is not a JSON object.
            InvalidRequestError: an option given under its old and its new name.
        """
        with self._lock:
            if shape not in self._options:
                self._options[shape] = vitisai_options(
                    model_name=self.name,
                    model_digest=self.digest,
                    shape=shape,
                    ort_version=self.ort_version,
                    cache_dir=self.vitisai_dir,
                    overrides=self.provider_options,
                )
            return self._options[shape]

    def compile_folder(self, shape: tuple[int, int]) -> Path:
        """Where the VitisAI EP keeps the compile of ``shape`` (``<cache_dir>/<cache_key>``)."""
        options = self.vitisai_options(shape)
        return Path(options["cache_dir"]) / options["cache_key"]

    def state(self, shape: tuple[int, int] | None, provider: str) -> ShapeState:
        """What is on disk for ``shape`` on ``provider`` (see :data:`ShapeState`)."""
        warmed = self._marker(shape, provider).is_file()
        if provider != NPU_PROVIDER or shape is None:
            return "opened" if warmed else "absent"
        options = self.vitisai_options(shape)
        found = cache_state(options["cache_dir"], options["cache_key"])
        if found == "partial" and warmed:  # a runtime that writes no pass summary opened it
            return "opened"
        return found

    def placement(self, shape: tuple[int, int] | None, provider: str) -> Placement:
        """Where a session of ``shape`` on ``provider`` runs: the pass summary's verdict on VitisAI."""
        label = shape_label(shape)
        if provider != NPU_PROVIDER or shape is None:
            where: RanOn = "gpu" if provider in _GPU_PROVIDERS else "cpu"
            return Placement(label, provider, where, None, f"{provider} (no NPU)" if where == "cpu" else provider)
        with self._lock:
            known = self._placed.get(shape)
        if known is not None:  # every call reports where it ran: the summary is read once, not per call
            return known
        options = self.vitisai_options(shape)
        summary = read_pass_summary(options["cache_dir"], options["cache_key"])
        if summary is None or not summary.recognised:
            folder = Path(options["cache_dir"]) / options["cache_key"]
            why = "no VitisAI pass summary" if summary is None else summary.line()
            return Placement(
                label, provider, "unknown", None, f"VitisAI requested; {why} in {folder}: where it ran is not known"
            )
        placement = Placement(label, provider, summary.verdict, summary.npu_share, summary.line())
        if summary.kind == "final":
            with self._lock:
                self._placed[shape] = placement
        return placement

    def report(self, shapes: list[tuple[int, int]]) -> dict[str, Any]:
        """Where the NPU's compiles of ``shapes`` go and what is there for each (``info``, ``doctor``).

        Returns:
            ``{"dir", "config_file", "shapes": [{"shape", "cache_key", "state", "provider", "ran_on",
            "npu_share", "detail"}]}``; a shape not compiled yet has ``ran_on`` None.

        Raises:
            ConfigError: the compile configuration cannot be read.
        """
        first = self.vitisai_options(shapes[0]) if shapes else {}
        rows = []
        for shape in shapes:
            state = self.state(shape, NPU_PROVIDER)
            placed = self.placement(shape, NPU_PROVIDER) if state != "absent" else None
            rows.append(
                {
                    "shape": shape_label(shape),
                    "cache_key": self.vitisai_options(shape)["cache_key"],
                    "state": state,
                    **(placed.describe() if placed else {"ran_on": None, "npu_share": None, "detail": None}),
                }
            )
        return {"dir": first.get("cache_dir"), "config_file": first.get("config_file"), "shapes": rows}

    # -- warmup markers ----------------------------------------------------------------------------

    def _marker(self, shape: tuple[int, int] | None, provider: str) -> Path:
        if provider == NPU_PROVIDER and shape is not None:
            key = self.vitisai_options(shape)["cache_key"]
        else:  # no compile: the file's identity (not its digest: nothing else needs one) and the runtime
            stat = self.onnx_file.stat()
            ident = f"{self.onnx_file.resolve()}\n{stat.st_size}\n{stat.st_mtime_ns}\n{provider}\n{self.ort_version}"
            slug = _SLUG.sub("-", self.name.lower()).strip("-._")[:32] or "model"
            key = f"{slug}-{shape_label(shape)}-{hashlib.sha256(ident.encode()).hexdigest()[:12]}"
        return self.root / "warmup" / f"{key}.json"

    def mark_warm(self, shape: tuple[int, int] | None, provider: str, seconds: float) -> None:
        """Record that a warmup opened ``shape`` on ``provider`` (the next warmup skips it)."""
        path = self._marker(shape, provider)
        path.parent.mkdir(parents=True, exist_ok=True)
        record = {"model": self.name, "shape": shape_label(shape), "provider": provider, "seconds": round(seconds, 3)}
        record["opened_at"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(record) + "\n", encoding="utf-8")
        os.replace(tmp, path)

    # -- static copies -----------------------------------------------------------------------------

    def static_variant(self, rows: int, seq: int) -> Path:
        """The dynamic graph with its (batch, sequence) axes fixed, written once under :attr:`root`."""
        folder = self.root / "static" / f"{self.name}-{self.digest[:16]}"
        target = folder / f"model_{rows}x{seq}.onnx"
        if target.is_file():
            return target
        onnx = import_onnx()
        from onnxruntime.tools.onnx_model_utils import fix_output_shapes, make_dim_param_fixed

        model = onnx.load(str(self.onnx_file))
        ids = next(i for i in model.graph.input if i.name == "input_ids")
        batch_dim, seq_dim = ids.type.tensor_type.shape.dim
        for dim, value in ((batch_dim, rows), (seq_dim, seq)):
            if dim.HasField("dim_param") and dim.dim_param:
                make_dim_param_fixed(model.graph, dim.dim_param, value)
        fix_output_shapes(model)
        folder.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
        large = model.ByteSize() > 1_800_000_000
        onnx.save_model(model, str(tmp), save_as_external_data=large, location=tmp.name + ".data" if large else None)
        os.replace(tmp, target)
        return target


def cache_root(cache_dir: str | os.PathLike[str] | None, name: str) -> Path:
    """An engine's cache folder: the one given, or ``name`` in the per-user cache (platformdirs)."""
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    return default_cache_root() / name
