"""From generated token ids to :class:`Chunk` s.

    token id -> IncrementalDecoder -> raw text delta
             -> OutputParser: <think> reasoning split out, tool-call segments held and parsed,
                stop strings held back and cut
             -> Chunk(text, reasoning, tool_calls, finish_reason, usage, timings, plan)

Everything here is pure Python over a ``decode(ids) -> str`` function (or the tokens' bytes,
:mod:`ryzenai_core.generation.token_bytes`), so it is tested directly (property tests) and runs the same
in the caller's process and in the worker.
"""

from __future__ import annotations

import codecs
import logging
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..compat import StrEnum
from ..messages import ToolCall
from ..package.budget import BudgetPlan

__all__ = [
    "Chunk",
    "Completion",
    "FinishReason",
    "IncrementalDecoder",
    "OutputParser",
    "StopFilter",
    "Timings",
    "Usage",
    "aaggregate",
    "aggregate",
    "warn_if_cut",
]

logger = logging.getLogger(__name__)


class FinishReason(StrEnum):
    """Why an answer ended; str-valued (``"stop"``, ...), the word OpenAI-style APIs use, which the faces pass on."""

    STOP = "stop"
    """The model ended its turn, or a stop string came."""
    LENGTH = "length"
    """The output limit (``max_new_tokens``, or the window) was reached."""
    TOOL_CALLS = "tool_calls"
    """The answer ended with tool calls."""
    CANCELLED = "cancelled"
    """The call was cancelled (its stream closed, its task cancelled)."""


@dataclass
class Usage:
    """Token counts of one generation."""

    prompt_tokens: int
    completion_tokens: int

    @property
    def total_tokens(self) -> int:
        """Prompt + completion."""
        return self.prompt_tokens + self.completion_tokens

    def to_dict(self) -> dict[str, int]:
        """JSON-ready counts."""
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
        }


@dataclass
class Timings:
    """Where the time of one generation went (seconds).

    Attributes:
        time_to_first_token: from the start of the call to the first generated token
            (includes waiting for the model, prefill and the first decode step).
        prefill: time spent appending the prompt.
        decode_tokens_per_second: generated tokens after the first, per second.
        total: the whole call.
        queued: time waiting for an earlier call on the same model.
        reused_prompt_tokens: prompt tokens served from the previous call's KV cache.
    """

    time_to_first_token: float | None = None
    prefill: float = 0.0
    decode_tokens_per_second: float | None = None
    total: float = 0.0
    queued: float = 0.0
    reused_prompt_tokens: int = 0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready timings."""
        return dict(self.__dict__)


@dataclass
class Chunk:
    """One piece of a streamed answer. The last chunk has ``finish_reason`` and ``usage``."""

    text: str = ""
    reasoning: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: FinishReason | None = None
    usage: Usage | None = None
    timings: Timings | None = None
    plan: BudgetPlan | None = None
    token_ids: list[int] = field(default_factory=list)
    dropped_messages: int = 0
    """Old turns left out to fit the prompt limit (overflow policy ``drop_oldest``)."""
    stop_sequence: str | None = None
    """The stop string that ended the answer (last chunk; None when none did)."""
    provider: str | None = None
    """The execution provider that ran the call, as onnxruntime-genai names its device
    (``RyzenAI``, ``CPU``, ``DML``, ...; last chunk)."""
    cut: list[str] = field(default_factory=list)
    """Values of structured output cut short to close within the budget, filled with minimal values
    to complete it, or stopped at a bound the library set (``punchline``, ``items[2].name``,
    ``search(query)`` for a tool call's argument; last chunk). The answer is ``finish_reason="length"``."""
    adapter: str | None = None
    """The LoRA adapter that ran, by the caller's name for it (last chunk; None: the base model)."""


@dataclass
class Completion(Chunk):
    """A whole answer: the aggregate of a stream (the fields of a :class:`Chunk`)."""

    def add(self, chunk: Chunk) -> None:
        """Fold one chunk in."""
        self.text += chunk.text
        self.reasoning += chunk.reasoning
        self.tool_calls.extend(chunk.tool_calls)
        self.token_ids.extend(chunk.token_ids)
        if chunk.finish_reason is not None:
            self.finish_reason = chunk.finish_reason
            self.usage, self.timings, self.plan = chunk.usage, chunk.timings, chunk.plan
            self.dropped_messages, self.stop_sequence = chunk.dropped_messages, chunk.stop_sequence
            self.provider, self.cut, self.adapter = chunk.provider, chunk.cut, chunk.adapter


def warn_if_cut(chunk: Chunk, model_name: str, budget_name: str) -> None:
    """Log a warning naming the values of a structured answer that were cut (see :attr:`Chunk.cut`).

    The faces call it in the caller's process, for the last chunk of each call.
    """
    if chunk.cut:
        logger.warning(
            "%s cut structured output to close it within the output budget or a length bound: %s; the answer is "
            "complete JSON with those values shortened or filled with minimal values (finish_reason='length'). "
            "Raise %s, or give those fields a max_length, for whole values.",
            model_name,
            ", ".join(chunk.cut),
            budget_name,
        )


def aggregate(chunks: Iterator[Chunk]) -> Completion:
    """Fold a stream into a :class:`Completion`."""
    out = Completion()
    for chunk in chunks:
        out.add(chunk)
    return out


async def aaggregate(chunks: AsyncIterator[Chunk]) -> Completion:
    """Async twin of :func:`aggregate`."""
    out = Completion()
    async for chunk in chunks:
        out.add(chunk)
    return out


class IncrementalDecoder:
    """Turns token ids, one at a time, into text deltas whose concatenation is the full decode.

    With ``token_bytes`` (the bytes of each id, :class:`~ryzenai_core.generation.token_bytes.TokenBytes`)
    the tokens' bytes go through an incremental UTF-8 decoder: a multi-byte character split
    across tokens is held until it is complete, invalid bytes become U+FFFD at once, and bytes
    still incomplete at :meth:`flush` become U+FFFD; the deltas add up to the bytes decoded with
    ``errors="replace"``, nothing after an invalid byte is lost.

    Without it (a tokenizer whose bytes are not known), a short window is decoded with a prefix
    of already-emitted tokens and the part beyond the prefix's text is emitted. A multi-byte
    character split across tokens is held until it is complete. A window that stops growing for
    ``max_stuck`` tokens (bytes that never form valid UTF-8) is emitted as U+FFFD.
    """

    def __init__(
        self,
        decode: Callable[[Sequence[int]], str],
        *,
        max_stuck: int = 8,
        token_bytes: Sequence[bytes] | None = None,
    ) -> None:
        self._decode_fn = decode
        self._ids: list[int] = []
        self._prefix = 0  # start of the decode window
        self._read = 0  # tokens before this are already emitted
        self._max_stuck = max_stuck
        self._table = token_bytes
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def _decode(self, ids: Sequence[int]) -> str:
        # onnxruntime-genai 0.14 crashes the process (SIGFPE) decoding an empty list.
        return self._decode_fn(ids) if len(ids) else ""

    def feed(self, token_id: int) -> str:
        """Add one token; return the new text (may be empty while a character is incomplete)."""
        table = self._table
        if table is not None:
            return self._utf8.decode(table[token_id] if 0 <= token_id < len(table) else b"")
        self._ids.append(token_id)
        prefix_text = self._decode(self._ids[self._prefix : self._read])
        new_text = self._decode(self._ids[self._prefix :])
        if len(new_text) > len(prefix_text) and not new_text.endswith("\ufffd") and new_text.startswith(prefix_text):
            delta = new_text[len(prefix_text) :]
            self._prefix, self._read = self._read, len(self._ids)
            return delta
        if len(self._ids) - self._read >= self._max_stuck:
            # Bytes that never became text: say so instead of dropping what follows.
            self._prefix = self._read = len(self._ids)
            return "\ufffd"
        return ""

    def decode_all(self, ids: Sequence[int]) -> str:
        """Full decode of ``ids`` with this decoder's tokenizer."""
        return self._decode(ids)

    def flush(self) -> str:
        """Text of tokens still held at the end (incomplete characters)."""
        if self._table is not None:
            tail = self._utf8.decode(b"", final=True)
            self._utf8.reset()
            return tail
        if self._read >= len(self._ids):
            return ""
        prefix_text = self._decode(self._ids[self._prefix : self._read])
        new_text = self._decode(self._ids[self._prefix :])
        self._prefix = self._read = len(self._ids)
        return new_text[len(prefix_text) :] if new_text.startswith(prefix_text) else ""


def _held_suffix(text: str, markers: Sequence[str]) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of a marker."""
    if not text:
        return 0
    last = text[-1]
    if not any(last in m[:-1] for m in markers):
        return 0  # the usual case: the text ends with no character a marker's start could end with
    best = 0
    for m in markers:
        for k in range(min(len(m) - 1, len(text)), best, -1):
            if text.endswith(m[:k]):
                best = k
                break
    return best


class StopFilter:
    """Cuts the text at the first stop string; never lets any part of one out.

    Text that could be the start of a stop string is held back until it is decided.
    """

    def __init__(self, stops: Sequence[str]) -> None:
        self.stops = tuple(s for s in stops if s)
        self._ends = "".join(sorted({s[-1] for s in self.stops}))
        self._buf = ""
        self.stopped = False
        self.matched: str | None = None

    def feed(self, text: str) -> str:
        """Add text; return what is safe to emit."""
        if self.stopped:
            return ""
        if not self.stops:
            return text
        self._buf += text
        # The held text never holds a whole stop string, so one can only complete in ``text``,
        # and only where ``text`` has a stop string's last character: search only then.
        hits = (
            [(i + len(s), i, s) for s in self.stops if (i := self._buf.find(s)) >= 0]
            if any(c in text for c in self._ends)
            else None
        )
        # The stop that completes first (earliest end) wins; at the same end, the longest.
        if hits:
            _, idx, s = min(hits)
            out, self._buf = self._buf[:idx], ""
            self.stopped, self.matched = True, s
            return out
        keep = _held_suffix(self._buf, self.stops)
        out = self._buf[: len(self._buf) - keep]
        self._buf = self._buf[len(self._buf) - keep :]
        return out

    def flush(self) -> str:
        """Held text once generation ended without a stop string."""
        out, self._buf = ("" if self.stopped else self._buf), ""
        return out


class _BlockEnd:
    """Where a tool-call block written piece by piece ends: after its JSON object, at the end marker.

    An end marker inside the object (in an argument's string) is part of the argument. A
    block that does not start with ``{`` ends at its first end marker.
    """

    __slots__ = ("_depth", "_escape", "_json", "_pos", "_string", "_value_end")

    def __init__(self) -> None:
        self._pos = 0  # text before this was scanned
        self._json: bool | None = None  # whether the block is a JSON object (None: not known yet)
        self._depth = 0
        self._string = self._escape = False
        self._value_end = -1  # where the object ended, once it has

    def end(self, text: str, marker: str) -> int:
        """The index of the marker that ends the block in ``text`` (the block so far), or -1."""
        if self._value_end < 0 and self._json is not False:
            self._scan(text)
        if self._json is False:
            return text.find(marker)
        return text.find(marker, self._value_end) if self._value_end >= 0 else -1

    def _scan(self, text: str) -> None:
        i = self._pos
        while i < len(text):
            ch = text[i]
            i += 1
            if self._json is None:
                if not ch.isspace():
                    self._json = ch == "{"
                    if not self._json:
                        break
                    self._depth = 1
                continue
            if self._string:
                if self._escape:
                    self._escape = False
                elif ch == "\\":
                    self._escape = True
                elif ch == '"':
                    self._string = False
            elif ch == '"':
                self._string = True
            elif ch in "{[":
                self._depth += 1
            elif ch in "}]":
                self._depth -= 1
                if self._depth == 0:
                    self._value_end = i
                    break
        self._pos = i


class OutputParser:
    """Splits raw model text into answer text, reasoning and tool-call segments.

    Args:
        stop: stop strings (applied to the answer text).
        reasoning_markers: e.g. ``("<think>", "</think>")`` for Qwen3.
        tool_markers: e.g. ``("<tool_call>", "</tool_call>")`` for Qwen3 / ChatML.
        json_tool_calls: the family writes a tool call as a bare JSON object (Llama 3.2):
            an answer that starts with ``{`` is held to the end and parsed.
        parse_tool_calls: ``text -> (content, calls)`` for the family's format.
        start_in_reasoning: the prompt already opened a reasoning block.
        max_tool_calls: calls kept at most (the first ones; a warning names what was left
            out); None: every call.
    """

    def __init__(
        self,
        *,
        stop: Sequence[str] = (),
        reasoning_markers: tuple[str, str] | None = None,
        tool_markers: tuple[str, str] | None = None,
        json_tool_calls: bool = False,
        parse_tool_calls: Callable[[str], tuple[str, list[ToolCall]]] | None = None,
        start_in_reasoning: bool = False,
        max_tool_calls: int | None = None,
    ) -> None:
        self._stop = StopFilter(stop)
        self._max_calls = max_tool_calls
        self._reasoning = reasoning_markers
        self._tools = tool_markers if parse_tool_calls else None
        self._json_tools = json_tool_calls and parse_tool_calls is not None
        self._parse = parse_tool_calls
        self._state = "reasoning" if start_in_reasoning and reasoning_markers else "content"
        self._buf = ""
        self._reasoning_started = False
        self._reasoning_newlines = ""
        self._after_reasoning = False
        self._block = _BlockEnd()
        self._json_hold: str | None = None
        self._content_seen = False
        self.tool_calls: list[ToolCall] = []
        self._active = self._markers()  # the markers that can switch the current state

    @property
    def stopped(self) -> bool:
        """A stop string was found: generation should end."""
        return self._stop.stopped

    @property
    def stop_sequence(self) -> str | None:
        """The stop string that was found, if one was."""
        return self._stop.matched

    def _markers(self) -> list[str]:
        if self._state == "reasoning" and self._reasoning:
            return [self._reasoning[1]]
        out = []
        if self._reasoning and not self._after_reasoning:
            out.append(self._reasoning[0])
        if self._tools:
            out.append(self._tools[0])
        return out

    def feed(self, text: str) -> tuple[str, str]:
        """Add raw text; return ``(answer delta, reasoning delta)``."""
        content: list[str] = []
        reasoning: list[str] = []
        if not self._active and not self._buf:
            # No marker can start here (plain answer text): no marker search, nothing held.
            if text and not self._stop.stopped:
                self._emit(text, content, reasoning)
                return "".join(content), "".join(reasoning)
            self._buf = text
            return "", ""
        self._buf += text
        while self._buf and not self.stopped:
            if self._state == "tool":
                if not self._end_block(content):
                    break  # the block is held until it ends
                continue
            markers = self._active
            hits = [(self._buf.find(m), m) for m in markers if m in self._buf]
            if hits:
                idx, marker = min(hits)
                before, self._buf = self._buf[:idx], self._buf[idx + len(marker) :]
                self._emit(before, content, reasoning)
                self._switch(marker)
                continue
            keep = _held_suffix(self._buf, markers)
            ready, self._buf = self._buf[: len(self._buf) - keep], self._buf[len(self._buf) - keep :]
            self._emit(ready, content, reasoning)
            break
        return "".join(content), "".join(reasoning)

    def _end_block(self, content: list[str]) -> bool:
        """Parse the tool-call block held in the buffer once it has ended (its JSON closed, then the end marker).

        The block's calls are kept; a block that holds none goes to the content, where it was.
        """
        assert self._tools is not None
        end = self._block.end(self._buf, self._tools[1])
        if end < 0:
            return False
        block, self._buf = self._buf[:end], self._buf[end + len(self._tools[1]) :]
        self._close_block(self._tools[0] + block + self._tools[1], content)
        self._state = "content"
        self._active = self._markers()
        return True

    def _close_block(self, raw: str, content: list[str]) -> None:
        assert self._parse is not None
        text, calls = self._parse(raw)
        self.tool_calls.extend(calls)
        if not calls:
            content.append(raw)
        elif text:
            content.append(text)

    def _switch(self, marker: str) -> None:
        self._set_state(marker)
        self._active = self._markers()

    def _set_state(self, marker: str) -> None:
        if self._reasoning and marker == self._reasoning[0]:
            self._state = "reasoning"
        elif self._reasoning and marker == self._reasoning[1]:
            self._state = "content"
            self._after_reasoning = True
            self._reasoning_newlines = ""
        elif self._tools and marker == self._tools[0]:
            self._state = "tool"
            self._block = _BlockEnd()

    def _emit(self, text: str, content: list[str], reasoning: list[str]) -> None:
        if not text:
            return
        if self._state == "reasoning":
            if not self._reasoning_started:
                text = text.lstrip("\n")
                if not text:
                    return
                self._reasoning_started = True
            # Newlines just before </think> are not part of the reasoning: hold them.
            text = self._reasoning_newlines + text
            stripped = text.rstrip("\n")
            self._reasoning_newlines = text[len(stripped) :]
            if stripped:
                reasoning.append(stripped)
            return
        if self._after_reasoning and not self._content_seen:
            text = text.lstrip("\n")
            if not text:
                return
        self._content_seen = True
        out = self._stop.feed(text)
        if self._json_tools:
            if self._json_hold is None and out.strip():
                if out.lstrip().startswith("{"):
                    self._json_hold = ""
            if self._json_hold is not None:
                self._json_hold += out
                return
        if out:
            content.append(out)

    def finish(self) -> tuple[str, str]:
        """End of generation: flush held text, parse tool calls. Returns the last deltas."""
        content: list[str] = []
        reasoning: list[str] = []
        rest, self._buf = self._buf, ""
        if self._state == "tool" and self._tools is not None:
            self._close_block(self._tools[0] + rest, content)  # a block the end of generation cut off
            self._state = "content"
        elif rest and not self.stopped:
            self._emit(rest, content, reasoning)
        tail = self._stop.flush()
        if tail:
            if self._json_hold is not None:
                self._json_hold += tail
            else:
                content.append(tail)
        if self._json_hold is not None and self._parse:
            text, calls = self._parse(self._json_hold)
            if calls:
                self.tool_calls.extend(calls)
                if text:
                    content.append(text)
            else:
                content.append(self._json_hold)
            self._json_hold = None
        if self._max_calls is not None and len(self.tool_calls) > self._max_calls:
            left = self.tool_calls[self._max_calls :]
            logger.warning(
                "the model called %d tools in one answer; keeping the first %d (parallel tool calls are off), "
                "leaving out %s",
                len(self.tool_calls),
                self._max_calls,
                ", ".join(c.name for c in left),
            )
            del self.tool_calls[self._max_calls :]
        return "".join(content), "".join(reasoning)
