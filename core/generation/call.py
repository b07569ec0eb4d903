"""What one call shares with the code that runs it: its timeout, cancellation and phase.

:class:`CallControl` is created by the engine for each call and read by the token loop;
:func:`timeout_error` and :func:`abandoned_error` word the errors of a call that ran out of
time or whose stream was left unread.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

from ..errors import GenerationTimeoutError, StreamAbandonedError

#: Seconds a stream may go unread while another call waits for the model before it is stopped.
ABANDON_AFTER = float(os.environ.get("RYZENAI_LLM_ABANDON_AFTER", "2.0"))
#: Seconds between looks at an unread stream holding the model while a call waits for it.
QUEUED_POLL = 0.25

_PHASES = {
    "queued": "while it waited behind other calls on this model",
    "preparing": "while the chat template and tokenizer prepared the prompt",
    "prefill": "during the prefill of the {prompt_tokens}-token prompt",
    "generating": "while generating, after {tokens} new tokens",
}


def timeout_error(
    timeout: float | None,
    phase: str,
    *,
    tokens: int = 0,
    prompt_tokens: int = 0,
    budget_name: str = "max_new_tokens",
) -> GenerationTimeoutError:
    """The error of a call that ran out of ``timeout`` in ``phase``."""
    where = _PHASES.get(phase, "while " + phase).format(tokens=tokens, prompt_tokens=prompt_tokens)
    return GenerationTimeoutError(
        f"the call ran out of its timeout={timeout} s {where} and was cancelled. The timeout counts "
        "waiting for the model, preparing the prompt, prefill and generation (not the one-time model load); "
        f"raise timeout, shorten the prompt or lower {budget_name}",
        phase=phase,
    )


class CallControl:
    """What one generation shares with its caller.

    ``cancel`` stops it within one token; ``timeout`` (seconds from the control's creation)
    bounds it; ``phase`` says where it is (``queued``, ``preparing``, ``prefill``,
    ``generating``) and ``on_phase`` is told of each change; a caller that stops reading a
    pushed stream sets ``idle_since`` so that a call waiting for the model can stop it
    (``preempted``) after :data:`ABANDON_AFTER` seconds.
    """

    __slots__ = (
        "budget_name",
        "cancel",
        "deadline",
        "idle_since",
        "lock",
        "on_phase",
        "phase",
        "preempted",
        "prompt_tokens",
        "timeout",
        "tokens",
    )

    def __init__(
        self,
        cancel: threading.Event | None = None,
        timeout: float | None = None,
        on_phase: Callable[[str], None] | None = None,
    ) -> None:
        self.cancel = cancel or threading.Event()
        self.timeout = timeout
        self.deadline: float | None = None
        self.start_clock()
        self.on_phase = on_phase
        self.phase = "queued"
        self.idle_since: float | None = None
        self.preempted = False
        self.lock = threading.Lock()
        self.tokens = 0
        self.prompt_tokens = 0
        self.budget_name = "max_new_tokens"  # what the caller calls the output budget (error messages)

    def start_clock(self) -> None:
        """Start (or restart) the timeout from now."""
        self.deadline = None if self.timeout is None else time.monotonic() + self.timeout

    def enter(self, phase: str) -> None:
        """Move to ``phase``."""
        self.phase = phase
        if self.on_phase is not None:
            self.on_phase(phase)

    def check_deadline(self) -> None:
        """Raise :class:`GenerationTimeoutError` if the timeout ran out."""
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise self.timeout_error()

    def timeout_error(self) -> GenerationTimeoutError:
        """The timeout error for the current phase."""
        return timeout_error(
            self.timeout, self.phase, tokens=self.tokens, prompt_tokens=self.prompt_tokens, budget_name=self.budget_name
        )


def abandoned_error(tokens: int) -> StreamAbandonedError:
    """The error that ends a stream stopped because nobody read it while another call waited."""
    return StreamAbandonedError(
        f"this stream was stopped after {tokens} tokens: it was not read for {ABANDON_AFTER:g} s while another "
        "call waited for the model (one generation runs at a time). The chunks before it were delivered. Read "
        "streams to the end, or close them (`with contextlib.closing(llm.stream(...)) as chunks:`)"
    )
