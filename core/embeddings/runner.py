"""Where an encoder's onnxruntime session runs: here, or in a worker process of its own.

:class:`SessionSpec` is everything a process needs to open one session; :class:`Runner` feeds
it a padded batch and pools the output; :class:`LocalBackend` runs one in this process and
:class:`WorkerBackend` in ``python -m ryzenai_core.embeddings.worker``, which a crash of the
execution provider cannot take down with the caller. A worker is a
:class:`~ryzenai_core.workers.WorkerConnection`, as an LLM's is: its start and every batch have a
deadline, and a worker that dies or hangs is replaced.
"""

from __future__ import annotations

import importlib
import logging
import os
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Literal

from ..errors import GenerationError, RuntimeNotAvailableError, UnsupportedModelError
from ..ipc import Ready, Run
from ..workers import Deadline, WorkerConnection

if TYPE_CHECKING:
    import numpy as np

log = logging.getLogger("ryzenai_core")

Pooling = Literal["cls", "mean"]


def import_onnxruntime() -> ModuleType:
    """Import onnxruntime, or raise :class:`RuntimeNotAvailableError` saying how to get it."""
    try:
        return importlib.import_module("onnxruntime")
    except ImportError as exc:
        raise RuntimeNotAvailableError(
            f"embedding models run on onnxruntime, which is not installed ({exc}). On a Ryzen AI machine, "
            "run in the environment the Ryzen AI installer created (its onnxruntime-vitisai provides the "
            "import name and the NPU); elsewhere install the CPU build: pip install 'ryzenai-llm[cpu]'"
        ) from exc


def pool(hidden: np.ndarray, attention_mask: np.ndarray, mode: Pooling, *, output: str = "output") -> np.ndarray:
    """Pool per-token states ``(rows, sequence, hidden)`` into one vector per row.

    ``cls`` takes the first token; ``mean`` averages the tokens the mask keeps (padding left
    out), as sentence-transformers does.

    Raises:
        UnsupportedModelError: the states do not have the shape the mask says.
    """
    import numpy as np

    if hidden.ndim != 3 or hidden.shape[:2] != attention_mask.shape:
        raise UnsupportedModelError(
            f"the model's {output} has shape {list(hidden.shape)}, but {mode} pooling needs per-token states "
            f"(rows, sequence, hidden) = {list(attention_mask.shape)} + [hidden]; export last_hidden_state"
        )
    if mode == "cls":
        return np.asarray(hidden[:, 0, :], dtype=np.float32)
    mask = attention_mask[..., None].astype(np.float32)
    summed = (hidden.astype(np.float32) * mask).sum(axis=1)
    return np.asarray(summed / np.clip(mask.sum(axis=1), 1e-9, None), dtype=np.float32)


@dataclass(frozen=True)
class SessionSpec:
    """Everything a process needs to open one onnxruntime session (pickled to the worker)."""

    onnx_file: str
    providers: tuple[str, ...]
    provider_options: tuple[dict[str, str], ...]
    inputs: tuple[str, ...]
    output: str
    pooling: Pooling | None
    """How to pool per-token states into a vector per row; None returns the output as it is (logits)."""
    intra_op_threads: int | None = None


class Runner:
    """One onnxruntime session: feeds a padded batch, returns pooled (not normalised) vectors or raw outputs."""

    def __init__(self, spec: SessionSpec) -> None:
        ort = import_onnxruntime()
        options = ort.SessionOptions()
        options.log_severity_level = 3
        if spec.intra_op_threads:
            options.intra_op_num_threads = spec.intra_op_threads
        self.spec = spec
        try:
            self.session = ort.InferenceSession(
                spec.onnx_file,
                sess_options=options,
                providers=list(spec.providers),
                provider_options=[dict(o) for o in spec.provider_options],
            )
        except Exception as exc:  # noqa: BLE001 - onnxruntime's own exception types
            raise UnsupportedModelError(
                f"onnxruntime {ort.__version__} could not open {spec.onnx_file} on {list(spec.providers)}: "
                f"{type(exc).__name__}: {exc}. Check the file (re-export it), or the provider options",
                path=spec.onnx_file,
            ) from exc
        self.providers: list[str] = list(self.session.get_providers())

    def run(self, ids: np.ndarray, mask: np.ndarray, types: np.ndarray) -> np.ndarray:
        """Pooled vectors (or the raw output, without pooling) of one padded batch."""
        import numpy as np

        arrays = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
        feeds = {name: arrays[name] for name in self.spec.inputs}
        try:
            (hidden,) = self.session.run([self.spec.output], feeds)
        except Exception as exc:  # noqa: BLE001 - onnxruntime's own exception types
            raise GenerationError(
                f"onnxruntime failed on a batch of shape {list(ids.shape)} of {Path(self.spec.onnx_file).name}: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        if self.spec.pooling is None:
            return np.asarray(hidden, dtype=np.float32)
        return pool(np.asarray(hidden), mask, self.spec.pooling, output=self.spec.output)


class LocalBackend:
    """A session in this process."""

    def __init__(self, spec: SessionSpec) -> None:
        self.runner = Runner(spec)
        self.pid = os.getpid()

    def run(self, ids: np.ndarray, mask: np.ndarray, types: np.ndarray) -> np.ndarray:
        """The output of one padded batch."""
        return self.runner.run(ids, mask, types)

    def close(self) -> None:
        """Nothing to release: the session goes with this object."""


class WorkerBackend(WorkerConnection):
    """One worker process (``python -m ryzenai_core.embeddings.worker``) with one session.

    Its start opens the session (on the NPU, compiling it or reading the compile cache), within
    :data:`~ryzenai_core.workers.LOAD_TIMEOUT`; each batch has :data:`~ryzenai_core.workers.CALL_TIMEOUT`.
    A batch cannot be stopped inside onnxruntime, so a worker that runs out of time is replaced at
    once; one that died is replaced by the next call.
    """

    module = "ryzenai_core.embeddings.worker"
    what = "encoder worker"

    def __init__(self, spec: SessionSpec) -> None:
        super().__init__(spec)
        self._run_lock = threading.Lock()  # one batch at a time: the worker runs them in turn

    def first_frame_deadline(self) -> Deadline:
        """The start opens the session: the load's deadline."""
        return Deadline.load()

    def started(self, proc: subprocess.Popen[bytes], ready: Ready) -> None:
        """Log the new worker and the providers its session runs on."""
        log.info("%s %s started for %s (%s)", self.what, proc.pid, self.spec.onnx_file, ready.info)

    def run(self, ids: np.ndarray, mask: np.ndarray, types: np.ndarray) -> np.ndarray:
        """The output of one padded batch, from the worker (started, or restarted after a crash, on demand)."""
        doing = f"a batch of {ids.shape[0]} x {ids.shape[1]} tokens of {Path(self.spec.onnx_file).name}"
        with self._run_lock:
            vectors: np.ndarray = self.request(
                lambda rid: Run(rid, ids, mask, types), Deadline.call(), doing=doing, phase="batch", grace=0
            )
        return vectors
