"""Compile an encoder's shapes ahead, once: what ``ryzenai-llm warmup`` does for each model.

On the NPU a shape's first session compiles it (minutes, once; the VitisAI compile cache keeps
it). :func:`warm_up` opens every shape of an engine that is not compiled yet, one at a time
(one VitisAI session in one worker at a time: several break each other), records each as warm
(:meth:`~.cache.EncoderCache.mark_warm`) and says where it runs; a second warmup finds them all
compiled (or, on the CPU, opened before) and does nothing. On the CPU nothing compiles: a warmup
opens each session once (a static shape writes its static copy of the graph).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from ..errors import RyzenAIError
from .cache import NPU_PROVIDER, Placement, ShapeState, shape_label
from .engine import EncoderEngine
from .pool import Shape

__all__ = ["WarmStep", "warm_shapes", "warm_up"]

Action = Literal["compiled", "opened", "skipped", "failed"]


@dataclass(frozen=True)
class WarmStep:
    """What a warmup did for one shape.

    Attributes:
        shape: the shape (None: a dynamic session); ``label`` as text (``"1x128"``).
        before: what was on disk before (:data:`~.cache.ShapeState`).
        action: ``compiled`` (on the NPU), ``opened`` (elsewhere), ``skipped`` (done before) or ``failed``.
        seconds: how long opening it took (0 when skipped).
        placement: where its session runs (None when it failed).
        error: why it failed.
    """

    shape: Shape
    label: str
    before: ShapeState
    action: Action
    seconds: float
    placement: Placement | None
    error: str = ""

    def describe(self) -> dict[str, Any]:
        """A JSON-ready view (``warmup --json``)."""
        return {
            "shape": self.label,
            "before": self.before,
            "action": self.action,
            "seconds": round(self.seconds, 3),
            **(self.placement.describe() if self.placement else {}),
            **({"error": self.error} if self.error else {}),
        }


def warm_shapes(engine: EncoderEngine[Any]) -> list[Shape]:
    """The shapes a warmup opens: every static shape on the NPU, every session shape elsewhere.

    On the NPU the CPU's session for small inputs is left out: nothing compiles there, and it
    opens in the process that uses it.
    """
    shapes = engine.session_shapes()
    return [s for s in shapes if s is not None] if engine.provider == NPU_PROVIDER else shapes


def warm_up(
    engine: EncoderEngine[Any],
    *,
    starting: Callable[[Shape, ShapeState], None] | None = None,
    done: Callable[[WarmStep], None] | None = None,
) -> list[WarmStep]:
    """Open each shape of :func:`warm_shapes` that is not compiled (or opened) yet, one at a time.

    Each opened shape's session is closed before the next opens (on the NPU only one compiles
    at a time). ``starting(shape, state)`` is called before a shape is opened, ``done(step)``
    after each shape, skipped ones too. A shape that fails is reported (``action="failed"``)
    and the others go on.
    """
    steps = []
    for shape in warm_shapes(engine):
        before = engine.shape_state(shape)
        if before in ("compiled", "opened"):
            step = WarmStep(shape, shape_label(shape), before, "skipped", 0.0, engine.placement(shape))
        else:
            if starting is not None:
                starting(shape, before)
            provider = engine.session_provider(shape)
            start = time.monotonic()
            try:
                engine.open_shape(shape, announce=False)
            except RyzenAIError as exc:
                step = WarmStep(shape, shape_label(shape), before, "failed", time.monotonic() - start, None, str(exc))
            else:
                seconds = time.monotonic() - start
                engine.cache.mark_warm(shape, provider, seconds)
                action: Action = "compiled" if provider == NPU_PROVIDER and shape is not None else "opened"
                step = WarmStep(shape, shape_label(shape), before, action, seconds, engine.placement(shape))
            finally:
                engine.close()
        steps.append(step)
        if done is not None:
            done(step)
    return steps
