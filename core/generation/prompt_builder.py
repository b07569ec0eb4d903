"""From a call's messages to the prompt the model is fed: a :class:`Prepared`, made once per call.

:class:`PromptBuilder` renders the messages with the package's (or the call's) chat template,
tokenizes the text (images through the runtime's multimodal processor, expanded to their
tokens), plans the token budget, and applies the overflow policy: with ``drop_oldest`` the
fewest oldest turns go that make the prompt fit. The call's tools are normalised once.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import ChatTemplateError, ContextWindowExceededError, InvalidRequestError
from ..images import IMAGE_TYPES, InputSize, prepare_images, read_input_size
from ..messages import ChatMessage, RawPrompt, check_text, normalize_tools
from ..options import GenerationOptions
from ..package.budget import BudgetPlan
from ..package.folder import ModelPackage
from ..package.runtime import import_oga
from ..prompt.templates import ChatTemplate, PackageTemplates
from ..request import instructed, resolve
from .tokens import Tokens

__all__ = ["Prepared", "PromptBuilder", "after_drops", "drop_steps"]

_Ids = tuple[list[int], Any, str, int]
"""A rendered prompt's ids, the processor's inputs (None for text), the images' key, the last image token."""


@dataclass
class Prepared:
    """A rendered, tokenized, planned request."""

    prompt: str
    prompt_ids: list[int]
    plan: BudgetPlan
    dropped_messages: int = 0
    start_in_reasoning: bool = False
    tools: list[dict[str, Any]] = field(default_factory=list)
    images: str = ""
    """Digests of the prompt's images, in order ("" for text): part of the KV cache key."""
    mm_inputs: Any = None
    """The multimodal processor's inputs (expanded ids, pixel values); never pickled."""
    last_image_token: int = -1
    """Index of the prompt's last image token (-1 without images)."""

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "mm_inputs": None}


class PromptBuilder:
    """Renders, tokenizes and plans prompts for one package (see the module docstring).

    ``processor`` returns the runtime's multimodal processor (it loads the model).
    """

    def __init__(self, package: ModelPackage, tokens: Tokens, processor: Callable[[], Any]) -> None:
        self.package = package
        self.tokens = tokens
        self.templates = PackageTemplates(package)
        self._processor = processor
        self._image_tokens: frozenset[int] | None = None

    # ------------------------------------------------------------------ rendering
    def template_for(self, options: GenerationOptions) -> ChatTemplate:
        """The package's template, or the call's ``chat_template``."""
        return self.templates.get(options.chat_template)

    def resolve(self, options: GenerationOptions) -> GenerationOptions:
        """What the call's options mean for this package (see :func:`ryzenai_core.request.resolve`)."""
        return resolve(options, self.template_for(options), self.package.budget, self.tokens.count_text)

    def render(self, messages: Sequence[ChatMessage], options: GenerationOptions) -> str:
        """The prompt text for ``messages`` (``options`` as the caller gave them)."""
        resolved = self.resolve(options)
        return self._render(instructed(messages, options), resolved, _tools(resolved))

    def _render(self, messages: Sequence[ChatMessage], options: GenerationOptions, tools: list[dict[str, Any]]) -> str:
        """:meth:`render` with options resolved and tools normalised."""
        if not messages:
            raise InvalidRequestError("the message list is empty; send at least one user message")
        template = self.template_for(options)
        for i, m in enumerate(messages):
            if m.has_images and not self.package.has_vision:
                raise InvalidRequestError(
                    f"message #{i} ({m.role}) has an image, and {self.package.name} has no vision model; "
                    "send text only or use a multimodal package (e.g. Gemma 3)"
                )
            if m.has_images and m.role != "tool" and not template.renders_images(m.role):
                fix = (
                    "put the image in the first user message (the system message can keep its text)"
                    if m.role == "system"
                    else "use the package's own template, or one that renders {'type': 'image'} parts"
                )
                raise InvalidRequestError(
                    f"message #{i} ({m.role}) has an image, and the chat template of {self.package.name} "
                    f"({template.family}) renders no images in a {m.role} message; {fix}"
                )
        check_text(messages)
        extra = options.template_vars
        if options.reasoning_effort is not None:  # resolved: a template that reads it
            extra = {**extra, "reasoning_effort": options.reasoning_effort}
        tool_turns = [i for i, m in enumerate(messages) if m.role == "tool" or m.tool_calls]
        if (tools or tool_turns) and not template.supports_tools:
            what = f"{len(tools)} tool(s)" if tools else f"a tool call or result (message #{tool_turns[0]})"
            raise InvalidRequestError(
                f"the chat template of {self.package.name} ({template.family}) does not render tools, so "
                f"{what} would be silently left out of the prompt; send the call without tools, or use a "
                "package whose template has tools (Llama 3.2, Qwen3)"
            )
        view = [_template_view(m) for m in messages]
        given = tools or None
        try:
            return template.render(view, tools=given, enable_thinking=options.enable_thinking, **extra)
        except ChatTemplateError as exc:
            # Templates such as Gemma 3's require user and assistant turns to alternate; two
            # system, user (or assistant) messages in a row are one turn to them: merge and render again.
            merged = _merge_consecutive(view)
            if "alternate" not in getattr(exc, "template_message", "") or len(merged) == len(view):
                raise
            return template.render(merged, tools=given, enable_thinking=options.enable_thinking, **extra)

    # ------------------------------------------------------------------ ids and images
    def prompt_ids(self, prompt: str, messages: Sequence[ChatMessage]) -> _Ids:
        """Ids of a rendered prompt, with, for images, the processor's inputs, their key and last token.

        Without images: ``(ids, None, "", -1)``; with images, the ids the processor expanded.
        """
        if not any(m.has_images for m in messages):
            return self.tokens.encode(prompt), None, "", -1
        og = import_oga()
        images = prepare_images([(i, m.content) for i, m in enumerate(messages) if m.has_images], self._image_size)
        inputs = self._processor()(prompt, images=og.Images.open_bytes(*[img.png for img in images]))
        ids = [int(i) for i in _as_numpy(inputs["input_ids"]).reshape(-1)]
        soft = self._image_token_ids()
        last = max((n for n, t in enumerate(ids) if t in soft), default=-1)
        return ids, inputs, ",".join(img.digest for img in images), last

    @functools.cached_property
    def _image_size(self) -> InputSize | None:
        """The size the package's image pipeline resizes to: larger images are scaled down before encoding."""
        parts = self.package.vision_parts
        processor = parts.get("processor") if parts else None
        return read_input_size(self.package.path / processor) if processor else None

    def _image_token_ids(self) -> frozenset[int]:
        if self._image_tokens is None:
            found = set()
            for marker in ("<image_soft_token>", "<end_of_image>"):
                ids = self.tokens.encode(marker)
                if len(ids) == 1:
                    found.add(ids[0])
            self._image_tokens = frozenset(found)
        return self._image_tokens

    def count_tokens(self, messages: Sequence[ChatMessage], options: GenerationOptions) -> int:
        """Prompt tokens ``messages`` render to (images expanded to their tokens)."""
        return len(self.prompt_ids(self.render(messages, options), messages)[0])

    # ------------------------------------------------------------------ preparing
    def prepare(
        self,
        messages: Sequence[ChatMessage] | RawPrompt,
        options: GenerationOptions,
        check: Callable[[], None] | None = None,
    ) -> Prepared:
        """Render, tokenize and plan; apply the overflow policy (``check`` runs before each render).

        ``options`` are already resolved (:meth:`resolve`).

        Raises:
            ContextWindowExceededError: the prompt does not fit (policy ``error``, or nothing
                left to drop; a raw prompt is never cut).
        """
        budget = self.package.budget
        tools = _tools(options)
        if isinstance(messages, RawPrompt):
            given_ids = messages.token_ids
            ids = list(given_ids) if given_ids is not None else self.tokens.encode(messages.text or "")
            vocab = self.package.config["model"].get("vocab_size")
            bad = [i for i in ids if i < 0 or (isinstance(vocab, int) and i >= vocab)]
            if bad:
                raise InvalidRequestError(
                    f"token id {bad[0]} is outside the vocabulary (0..{vocab - 1 if isinstance(vocab, int) else '?'}); "
                    "send ids produced by this package's tokenizer"
                )
            text = messages.text if messages.text is not None else self.tokens.decode(ids)
            return Prepared(text, ids, budget.plan(len(ids), options.max_new_tokens), 0, False, tools)
        check = check or (lambda: None)

        def attempt(msgs: list[ChatMessage]) -> tuple[str, _Ids, BudgetPlan]:
            check()
            prompt = self._render(msgs, options, tools)
            ids = self.prompt_ids(prompt, msgs)
            return prompt, ids, budget.plan(len(ids[0]), options.max_new_tokens, images=ids[1] is not None)

        msgs = list(messages)
        dropped = 0
        try:
            prompt, tokens, plan = attempt(msgs)
        except ContextWindowExceededError as exc:
            if options.overflow != "drop_oldest":
                raise
            # Find the fewest oldest turns to drop by bisection: a few renders, not one per turn.
            steps = drop_steps(msgs)
            if not steps:
                raise _nothing_to_drop(exc) from None
            fitting = {}  # drops -> the prepared prompt, for each count that fits
            try:
                fitting[len(steps)] = attempt(after_drops(msgs, len(steps)))
            except ContextWindowExceededError as last:
                raise _nothing_to_drop(last) from None
            lo, hi = 1, len(steps)  # hi always fits
            while lo < hi:
                mid = (lo + hi) // 2
                try:
                    fitting[mid] = attempt(after_drops(msgs, mid))
                    hi = mid
                except ContextWindowExceededError:
                    lo = mid + 1
            dropped = sum(steps[:hi])
            prompt, tokens, plan = fitting[hi]
        markers = self.template_for(options).reasoning_markers
        start_in_reasoning = bool(markers) and prompt.rstrip("\n").endswith(markers[0]) if markers else False
        ids, inputs, images, last_image = tokens
        return Prepared(prompt, ids, plan, dropped, start_in_reasoning, tools, images, inputs, last_image)


def _tools(options: GenerationOptions) -> list[dict[str, Any]]:
    return normalize_tools(list(options.tools)) if options.tools else []


def _nothing_to_drop(exc: ContextWindowExceededError) -> ContextWindowExceededError:
    return ContextWindowExceededError(
        f"{exc} Dropping old turns did not help: the system prompt and the newest message "
        f"alone take {exc.prompt_tokens} tokens.",
        prompt_tokens=exc.prompt_tokens,
        limit=exc.limit,
        window=exc.window,
    )


def _template_view(message: ChatMessage) -> ChatMessage:
    """The message as the chat template sees it: each image part is ``{"type": "image"}``."""
    if not message.has_images or not isinstance(message.content, list):
        return message
    parts = [{"type": "image"} if p.get("type") in IMAGE_TYPES else p for p in message.content]
    return dataclasses.replace(message, content=parts)


def _merge_consecutive(messages: Sequence[ChatMessage]) -> list[ChatMessage]:
    """Consecutive plain system, user or assistant messages joined into one (texts by a blank line)."""
    out: list[ChatMessage] = []
    for m in messages:
        prev = out[-1] if out else None
        plain = m.role in ("system", "user", "assistant") and not m.tool_calls and m.reasoning is None
        if prev is not None and plain and prev.role == m.role and not prev.tool_calls and prev.reasoning is None:
            if isinstance(prev.content, str) and isinstance(m.content, str):
                content: str | list[dict[str, Any]] = f"{prev.content}\n\n{m.content}"
            else:
                content = _parts(prev.content) + [{"type": "text", "text": "\n\n"}] + _parts(m.content)
            out[-1] = dataclasses.replace(prev, content=content)
        else:
            out.append(m)
    return out


def _parts(content: str | list[dict[str, Any]]) -> list[dict[str, Any]]:
    return list(content) if isinstance(content, list) else [{"type": "text", "text": content}]


def _as_numpy(tensor: Any) -> Any:
    return tensor.as_numpy() if hasattr(tensor, "as_numpy") else tensor


# ---------------------------------------------------------------------- overflow: dropping old turns
def _turn_end(msgs: list[ChatMessage], i: int) -> int:
    """End (exclusive) of the turn at ``i``.

    A user message goes with the replies to it (up to the next user message), so what is left
    still starts with a user turn, as templates that need turns to alternate (Gemma 3's)
    require; when those replies hold the newest message, which stays, it goes alone. An
    assistant's tool calls go with their results.
    """
    end = i + 1
    if msgs[i].role == "user":
        while end < len(msgs) and msgs[end].role in ("assistant", "tool"):
            end += 1
        return end if end < len(msgs) else i + 1
    if msgs[i].tool_calls:
        while end < len(msgs) and msgs[end].role == "tool":
            end += 1
    return end


def _oldest_droppable(msgs: list[ChatMessage]) -> int | None:
    """Index of the oldest turn that may go: not a system prompt, not holding the newest message.

    A turn with tool calls goes with all its tool results, so one whose results reach the
    newest message stays (a tool result is never left without its call).
    """
    for i, m in enumerate(msgs[:-1]):
        if m.role != "system":
            return i if _turn_end(msgs, i) < len(msgs) else None
    return None


def drop_steps(msgs: list[ChatMessage]) -> list[int]:
    """How many messages each successive oldest-turn drop removes, until nothing may go."""
    work = list(msgs)
    steps = []
    while (victim := _oldest_droppable(work)) is not None:
        steps.append(_drop_turn(work, victim))
    return steps


def after_drops(msgs: list[ChatMessage], k: int) -> list[ChatMessage]:
    """``msgs`` after its ``k`` oldest droppable turns went."""
    work = list(msgs)
    for _ in range(k):
        victim = _oldest_droppable(work)
        if victim is None:
            break
        _drop_turn(work, victim)
    return work


def _drop_turn(msgs: list[ChatMessage], i: int) -> int:
    """Drop the turn at ``i`` (a call with its tool results); how many messages went."""
    end = _turn_end(msgs, i)
    del msgs[i:end]
    return end - i
