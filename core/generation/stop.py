"""Why a generation stops: the one place that decides, between the token loop's steps.

:class:`StopChecker` is asked before each step (the token limit, a cancel, the timeout, the
runtime's own end) and after each token (an end-of-sequence or end-of-turn id, a stop string or
a finished tool call seen by the output parser); :meth:`StopChecker.finish_reason` words the end
(``stop``, ``length``, ``tool_calls``, ``cancelled``) once the output is parsed.
"""

from __future__ import annotations

import json
import time
from typing import Any

from ..errors import GenerationError
from ..package.budget import BudgetPlan
from .call import CallControl
from .streaming import FinishReason, IncrementalDecoder, OutputParser

__all__ = ["StopChecker"]


class StopChecker:
    """Decides when and why the token loop of one call ends (see the module docstring)."""

    __slots__ = (
        "_control",
        "_deadline",
        "_end_ids",
        "_guidance",
        "_is_cancelled",
        "_is_done",
        "_max_new",
        "_parser",
        "_plan",
    )

    def __init__(
        self,
        control: CallControl,
        generator: Any,
        end_ids: frozenset[int],
        plan: BudgetPlan,
        parser: OutputParser,
        guidance: Any = None,
    ) -> None:
        self._control = control
        self._plan = plan
        self._guidance = guidance
        self._deadline = control.deadline
        self._is_cancelled = control.cancel.is_set
        self._is_done = generator.is_done
        self._end_ids = end_ids
        self._max_new = plan.max_new_tokens
        self._parser = parser

    def before_step(self, n: int) -> FinishReason | None:
        """Why the loop ends before generating token ``n + 1``, or None to go on.

        Raises:
            GenerationTimeoutError: the call's timeout ran out.
        """
        if n >= self._max_new:
            return FinishReason.LENGTH
        if self._is_cancelled():
            return FinishReason.CANCELLED
        if self._deadline is not None and time.monotonic() > self._deadline:
            raise self._control.timeout_error(n)
        if self._is_done():
            return FinishReason.STOP
        return None

    def after_token(self, token: int) -> FinishReason | None:
        """Why the loop ends at ``token`` before its text is reported (an end id), or None."""
        return FinishReason.STOP if token in self._end_ids else None

    def after_text(self) -> FinishReason | None:
        """Why the loop ends once the token's text was parsed (a stop string, the last tool call), or None."""
        return FinishReason.STOP if self._parser.stopped else None

    def finish_reason(self, finish: FinishReason) -> FinishReason:
        """The reason the caller sees, once the parser has finished: a stop after tool calls is ``tool_calls``."""
        return FinishReason.TOOL_CALLS if finish == FinishReason.STOP and self._parser.tool_calls else finish

    def check_complete(
        self, finish: FinishReason, decoder: IncrementalDecoder, generated: list[int], complete: bool = False
    ) -> None:
        """Refuse constrained output cut off by the token limit (unless it was complete just then).

        ``complete``: the output is known to be a whole value (the closer followed it).

        Raises:
            GenerationError: the output is not complete.
        """
        guidance, plan = self._guidance, self._plan
        if finish != FinishReason.LENGTH or guidance is None or complete:
            return
        if _complete_json(guidance, decoder, generated):
            return
        fix = "raise max_new_tokens or bound the schema's strings and arrays"
        if guidance.type == "json_schema":  # a caller's own schema grammar: response_format bounds and closes one
            fix += ", or pass the schema as response_format (bounded, and closed within the budget)"
        raise GenerationError(
            f"the constrained output ({guidance.type}) was not complete after {plan.max_new_tokens} "
            f"tokens (max_new_tokens {plan.requested_new_tokens}, window {plan.window}); {fix}"
        )


def _complete_json(guidance: Any, decoder: IncrementalDecoder, generated: list[int]) -> bool:
    """A JSON-schema output that hit the token limit exactly when it was complete."""
    if guidance.type != "json_schema":
        return False
    try:
        json.loads(decoder.decode_all(generated))
        return True
    except ValueError:
        return False
