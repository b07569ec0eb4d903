"""One call's state, each part with one owner.

* :class:`CallSpec` — what the request asked for (timeout, the output budget's name for
  messages, retries): frozen, made once by whoever receives the request;
* :class:`Cancellation` — how the call is stopped: its event (anyone may set it) and its
  deadline (started by the caller once the model is loaded, paused while a new worker loads);
* :class:`Phase` — where the call is; the code running it moves it on (:meth:`CallControl.enter`);
* :class:`CallControl` — the three together, with the call's progress for messages.

Whether a stream's caller reads it is the scheduler's (:class:`~ryzenai_core.generation.scheduler.ReadWatch`).
:func:`timeout_error` words the error of a call that ran out of time.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..compat import StrEnum
from ..errors import GenerationTimeoutError

if TYPE_CHECKING:
    from ..options import GenerationOptions

__all__ = ["CallControl", "CallSpec", "Cancellation", "Phase", "timeout_error"]


class Phase(StrEnum):
    """Where a call is; str-valued, so messages and errors (``GenerationTimeoutError.phase``) read ``"queued"``, ..."""

    QUEUED = "queued"
    PREPARING = "preparing"
    PREFILL = "prefill"
    GENERATING = "generating"


_WHERE = {
    Phase.QUEUED: "while it waited behind other calls on this model",
    Phase.PREPARING: "while the chat template and tokenizer prepared the prompt",
    Phase.PREFILL: "during the prefill of the {prompt_tokens}-token prompt",
    Phase.GENERATING: "while generating, after {tokens} new tokens",
}


def timeout_error(
    timeout: float | None,
    phase: Phase,
    *,
    tokens: int = 0,
    prompt_tokens: int = 0,
    budget_name: str = "max_new_tokens",
) -> GenerationTimeoutError:
    """The error of a call that ran out of ``timeout`` in ``phase``."""
    where = _WHERE[phase].format(tokens=tokens, prompt_tokens=prompt_tokens)
    return GenerationTimeoutError(
        f"the call ran out of its timeout={timeout} s {where} and was cancelled. The timeout counts "
        "waiting for the model, preparing the prompt, prefill and generation (not the one-time model load); "
        f"raise timeout, shorten the prompt or lower {budget_name}",
        phase=phase.value,
    )


@dataclass(frozen=True)
class CallSpec:
    """What a request asked of its call; never changes."""

    timeout: float | None = None
    """Seconds the call may take, from when its clock starts (:meth:`Cancellation.start`)."""
    budget_name: str = "max_new_tokens"
    """What the caller calls the output budget (``max_tokens``, ...), for error messages."""
    max_retries: int = 0
    """New attempts for a call whose worker died before any output."""

    @classmethod
    def of(cls, options: GenerationOptions, timeout: float | None = None, max_retries: int = 0) -> CallSpec:
        """The spec of a call with ``options``."""
        return cls(timeout, options.called("max_new_tokens"), max_retries)


class Cancellation:
    """How a call is stopped: an event and a deadline.

    ``set``/``is_set`` are an event's (so a :class:`threading.Event` and this are used alike);
    the deadline is on ``time.monotonic()``'s clock, None for no timeout or before it starts.
    """

    __slots__ = ("_event", "deadline")

    def __init__(self, event: threading.Event | None = None) -> None:
        self._event = event or threading.Event()
        self.deadline: float | None = None

    def set(self) -> None:
        """Cancel: the call stops within one token (or before it starts)."""
        self._event.set()

    def is_set(self) -> bool:
        """Whether the call was cancelled."""
        return self._event.is_set()

    def start(self, timeout: float | None) -> None:
        """Start the clock: the deadline is ``timeout`` seconds from now."""
        self.deadline = None if timeout is None else time.monotonic() + timeout

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """The clock stands still in the block (a new worker loading the model for a resent call)."""
        held, self.deadline = self.deadline, None
        started = time.monotonic()
        try:
            yield
        finally:
            if held is not None:
                self.deadline = held + (time.monotonic() - started)

    def expired(self) -> bool:
        """Whether the deadline passed."""
        deadline = self.deadline
        return deadline is not None and time.monotonic() > deadline


class CallControl:
    """What one generation shares with its caller (see the module docstring).

    ``spec`` is the request's; ``cancel`` stops the call and holds its deadline; ``phase`` is
    moved on by the code running the call, and ``on_phase`` is told of each change. ``tokens``
    (those delivered to the caller, counted by the caller) and ``prompt_tokens`` (set by the
    session once the prompt is prepared) word the timeout's message.
    """

    __slots__ = ("cancel", "on_phase", "phase", "prompt_tokens", "spec", "tokens")

    def __init__(
        self,
        spec: CallSpec | None = None,
        cancel: Cancellation | None = None,
        on_phase: Callable[[Phase], None] | None = None,
    ) -> None:
        self.spec = spec or CallSpec()
        self.cancel = cancel or Cancellation()
        self.on_phase = on_phase
        self.phase = Phase.QUEUED
        self.tokens = 0
        self.prompt_tokens = 0

    @property
    def timeout(self) -> float | None:
        """The request's timeout."""
        return self.spec.timeout

    @property
    def deadline(self) -> float | None:
        """When the call runs out of time (None: no timeout, or its clock has not started)."""
        return self.cancel.deadline

    def start_clock(self) -> None:
        """Start the timeout from now."""
        self.cancel.start(self.spec.timeout)

    def enter(self, phase: Phase) -> None:
        """Move to ``phase``."""
        self.phase = phase
        if self.on_phase is not None:
            self.on_phase(phase)

    def check_deadline(self, tokens: int | None = None) -> None:
        """Raise :meth:`timeout_error` if the timeout ran out (``tokens``: generated so far)."""
        if self.cancel.expired():
            raise self.timeout_error(tokens)

    def timeout_error(self, tokens: int | None = None) -> GenerationTimeoutError:
        """The timeout error for the current phase, after ``tokens`` (default: those delivered)."""
        return timeout_error(
            self.spec.timeout,
            self.phase,
            tokens=self.tokens if tokens is None else tokens,
            prompt_tokens=self.prompt_tokens,
            budget_name=self.spec.budget_name,
        )
