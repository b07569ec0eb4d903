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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal

from ..errors import GenerationError, RuntimeNotAvailableError, UnsupportedModelError
from ..ipc import Ready, Run
from ..workers import Deadline, WorkerConnection

if TYPE_CHECKING:
    import numpy as np

log = logging.getLogger("ryzenai_core")

Pooling = Literal["cls", "mean"]
#: The environment variable of :func:`compile_deadline`.
COMPILE_TIMEOUT_ENV = "RYZENAI_LLM_COMPILE_TIMEOUT"


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


#: What wraps a session's creation (showing progress while it runs): called with the creation, returns its result.
Opener = Callable[[Callable[[], Any]], Any]


def _call(create: Callable[[], Any]) -> Any:
    return create()


def compile_deadline() -> Deadline:
    """How long a worker may take to start when its session compiles for the NPU (``RYZENAI_LLM_COMPILE_TIMEOUT``).

    Default 3600 s: a first compile took up to 1,789 s a shape in a published Ryzen AI 1.8 study;
    a load from the compile cache keeps the load's deadline.
    """
    return Deadline(float(os.environ.get(COMPILE_TIMEOUT_ENV, "3600")), COMPILE_TIMEOUT_ENV)


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
    """A session in this process, created when it is first opened (:meth:`open`) or run."""

    def __init__(self, spec: SessionSpec) -> None:
        self.spec = spec
        self.pid = os.getpid()
        self._runner: Runner | None = None
        self._open_lock = threading.Lock()

    @property
    def is_open(self) -> bool:
        """Whether the session exists."""
        return self._runner is not None

    def open(self, wrap: Opener | None = None, deadline: Deadline | None = None) -> bool:
        """Create the session if it does not exist yet (through ``wrap``, which shows progress); whether it did.

        ``deadline`` is for a worker's start: a session in this process cannot be stopped.
        """
        with self._open_lock:
            if self._runner is not None:
                return False
            self._runner = (wrap or _call)(lambda: Runner(self.spec))
            return True

    def run(self, ids: np.ndarray, mask: np.ndarray, types: np.ndarray) -> np.ndarray:
        """The output of one padded batch."""
        if self._runner is None:
            self.open()
        assert self._runner is not None
        return self._runner.run(ids, mask, types)

    def close(self) -> None:
        """Drop the session."""
        self._runner = None


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
        self._open_lock = threading.Lock()
        self._deadline: Deadline | None = None

    @property
    def is_open(self) -> bool:
        """Whether the worker runs (its session is open)."""
        return self.pid is not None

    def open(self, wrap: Opener | None = None, deadline: Deadline | None = None) -> bool:
        """Start the worker (which opens the session) if it is not running, through ``wrap``; whether it did.

        ``deadline`` replaces the load's for this start (a first NPU compile takes longer:
        :func:`compile_deadline`).
        """
        with self._open_lock:
            if self.is_open:
                return False
            self._deadline = deadline
            try:
                (wrap or _call)(self.start_worker)
            finally:
                self._deadline = None
            return True

    def first_frame_deadline(self) -> Deadline:
        """The start opens the session: the load's deadline, or the one :meth:`open` was given."""
        return self._deadline or Deadline.load()

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
