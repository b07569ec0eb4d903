"""One call, as the core receives it, and the decisions the core makes about it.

A face (LangChain, LlamaIndex, the command line) maps its framework's vocabulary onto a
:class:`Request`: the messages, and :class:`~ryzenai_core.options.GenerationOptions` whose
typed fields say what the caller wants (tools and ``tool_choice``, a ``response_format``, a
chat template, thinking, sampling, limits). What that means for onnxruntime-genai is decided
here, once, with the package's template, tokenizer and budget (:func:`resolve`):

- ``tool_choice="none"``: the tools are not sent;
- a forced call (``required`` or a tool's name): a grammar in the template family's own
  tool-call format, bounded so the call closes within the output budget;
- a response format: a JSON-schema or JSON-object grammar, bounded the same way; and the
  prompt says so (:func:`instructed`): the last user message ends with "Answer in JSON
  matching this schema: ..." (the schema compact), or "Answer with one JSON object.", so the
  model knows what it is to write before the grammar makes it; with tools
  (``tool_choice="auto"``) a grammar that allows a tool call in the family's format or the
  answer in the schema, as an agent with tools and a response format needs (the prompt then
  says a tool may be called first, at the end of the last user message on every turn);
- constrained output is closed within the budget while decoding, and a value cut to fit is
  reported (``Chunk.cut``, ``finish_reason="length"``);
- a grammar decides every token, so a template's thinking block is closed (``enable_thinking``
  False unless the caller chose);
- constrained output needs a finite budget: ``max_new_tokens`` defaults to the package's
  bounded output budget;
- ``parallel_tool_calls``: None becomes what the template renders back (one call per answer
  where it renders one call per assistant turn, as Llama 3.2's); True is refused there;
- ``reasoning_effort``: a level goes to a template that reads ``reasoning_effort`` (gpt-oss's:
  ``low``, ``medium``, ``high``); on a template with reasoning on or off only (Qwen3's
  ``enable_thinking``), ``none`` is off and a level is refused with what the template takes
  (it has no levels; an effort is not guessed into on or off); a template with no reasoning
  takes ``none`` and refuses a level.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .errors import InvalidRequestError
from .messages import ChatMessage, RawPrompt
from .options import GenerationOptions

if TYPE_CHECKING:  # a face builds requests without the template machinery; resolving runs where the model is
    from .package.budget import ContextBudget
    from .prompt.templates import ChatTemplate

__all__ = ["TEMPLATE_LEVELS", "Request", "format_instruction", "instructed", "resolve"]

#: The reasoning levels a chat template that reads ``reasoning_effort`` takes (gpt-oss's).
TEMPLATE_LEVELS = ("low", "medium", "high")


@dataclass(frozen=True)
class Request:
    """One call: what to answer, how, and how long the caller waits.

    Attributes:
        messages: the conversation, or a raw prompt sent verbatim.
        options: everything the call decides on (see :class:`GenerationOptions`).
        timeout: seconds the call may take (queueing, preparing, prefill and generation; not
            the one-time model load); None waits as long as it takes.
        max_retries: new attempts after the model's worker process died before any output
            (a call still waiting for the model is always sent to the new worker).
    """

    messages: Sequence[ChatMessage] | RawPrompt
    options: GenerationOptions = field(default_factory=GenerationOptions)
    timeout: float | None = None
    max_retries: int = 1


def resolve(
    options: GenerationOptions,
    template: ChatTemplate,
    budget: ContextBudget,
    count_text: Callable[[str], int],
) -> GenerationOptions:
    """The options onnxruntime-genai runs for ``options`` (see the module docstring).

    Idempotent: the result has its intent (``tool_choice``, ``response_format``) turned into
    ``tools`` and ``guidance``.

    Args:
        options: what the caller asked for.
        template: the chat template the call renders with (its family's tool-call format).
        budget: the package's budget (the default output budget of constrained output).
        count_text: tokens of a text with the package's tokenizer (a forced call's framing).

    Raises:
        InvalidRequestError: a budget too small for the constrained output, a family without a
            tool-call format, a schema that is not a JSON object schema, parallel tool calls
            asked of a template that renders one call per assistant turn.
    """
    from .prompt.formats import has_tool_calls
    from .prompt.structured import (
        JSON_OBJECT,
        json_object_guidance,
        json_schema_guidance,
        tool_call_guidance,
        tool_or_answer_guidance,
    )

    options = _reasoning(options, template)
    parallel = _parallel_tool_calls(options, template)
    forced = options.forced_tool
    shaped = options.response_format is not None
    if not forced and not shaped and options.tool_choice == "auto" and options.guidance is None:
        if parallel == options.parallel_tool_calls:
            return options
        return options.replace(parallel_tool_calls=parallel)
    tools = () if options.tool_choice == "none" else options.tools
    max_new = options.max_new_tokens
    if max_new is None and (forced or shaped):
        max_new = budget.bounded_output_tokens
    guidance = options.guidance
    if forced:
        assert max_new is not None
        name = None if options.tool_choice == "required" else options.tool_choice
        guidance = tool_call_guidance(
            template.family, tools, max_new, name, count_tokens=count_text, budget_name=options.called("max_new_tokens")
        )
    elif options.response_format is not None:
        assert max_new is not None
        schema = options.response_format.json_schema
        budget_name = options.called("max_new_tokens")
        if tools and has_tool_calls(template.family):  # a tool call or the answer (an agent's turn)
            guidance = tool_or_answer_guidance(
                template.family, tools, schema or JSON_OBJECT, max_new, count_tokens=count_text, budget_name=budget_name
            )
        elif schema is None:
            guidance = json_object_guidance(max_new, budget_name=budget_name)
        else:
            guidance = json_schema_guidance(schema, max_new, budget_name=budget_name)
    thinking = options.enable_thinking
    if guidance is not None and thinking is None and template.supports_thinking:
        thinking = False
    return options.replace(
        tools=tools,
        tool_choice="auto",
        response_format=None,
        guidance=guidance,
        max_new_tokens=max_new,
        enable_thinking=thinking,
        parallel_tool_calls=parallel,
    )


def _reasoning(options: GenerationOptions, template: ChatTemplate) -> GenerationOptions:
    """``reasoning_effort`` as the template takes it (see the module docstring).

    Raises:
        InvalidRequestError: a level the template has not, naming what it takes.
    """
    effort = options.reasoning_effort
    if effort is None:
        return options
    name, switch = options.called("reasoning_effort"), options.called("enable_thinking")
    where = f"the {template.family} chat template" + (f" of {template.package_name}" if template.package_name else "")
    levels = ", ".join(repr(level) for level in TEMPLATE_LEVELS)
    if "reasoning_effort" in template.variables:
        if effort in TEMPLATE_LEVELS:
            return options
        raise InvalidRequestError(f"{name}={effort!r}: {where} takes the reasoning levels {levels}; use one of them")
    if template.supports_thinking:
        if effort != "none":
            raise InvalidRequestError(
                f"{name}={effort!r}: {where} turns reasoning on or off and has no levels; pass {switch}=True (on, "
                f"also reasoning=True) or False (off, also {name}='none'). Levels ({levels}) go to templates that "
                "read reasoning_effort, such as gpt-oss's"
            )
        if options.enable_thinking:
            raise InvalidRequestError(
                f"{name}='none' turns reasoning off and {switch}=True turns it on; give one of them"
            )
        return options.replace(reasoning_effort=None, enable_thinking=False)
    if effort == "none" and template.reasoning_markers is None:
        return options.replace(reasoning_effort=None)  # a template without reasoning: nothing to turn off
    raise InvalidRequestError(
        f"{name}={effort!r}: {where} has no reasoning setting (it reads neither enable_thinking nor "
        f"reasoning_effort); leave {name} out"
    )


def _parallel_tool_calls(options: GenerationOptions, template: ChatTemplate) -> bool | None:
    """Whether an answer may hold several tool calls (None without tools).

    Raises:
        InvalidRequestError: True, and the template renders one call per assistant turn.
    """
    if not options.tools or options.tool_choice == "none":
        return options.parallel_tool_calls
    one = template.one_call_per_turn
    if options.parallel_tool_calls and one:
        name = options.called("parallel_tool_calls")
        raise InvalidRequestError(
            f"{name}=True asks for several tool calls in one answer, and the {template.family} chat template "
            "renders one tool call per assistant message, so such an answer could not be sent back in the "
            f"history; leave {name} out (or set it False): the model then calls one tool per turn and sees "
            "each result before the next call"
        )
    return not one if options.parallel_tool_calls is None else options.parallel_tool_calls


def format_instruction(options: GenerationOptions) -> str | None:
    """What the prompt tells the model about the form of its answer (None: nothing; plain text, tools).

    A grammar holds the output to a response format token by token; a small model told the
    schema beforehand writes the values it means instead of being steered into ones it did
    not. The schema is written compact: no spaces, and without the titles pydantic makes of
    the property names (``"title": "City"`` for ``city``), which tell the model nothing new.
    With tools the model may call (``tool_choice="auto"``: an agent's turn), the schema is the
    form of its final answer, and the text says a tool may be called first.
    """
    shape = options.response_format
    if shape is None:
        return None
    if shape.json_schema is None:
        answer = "one JSON object"
    else:
        schema = json.dumps(_without_name_titles(shape.json_schema), separators=(",", ":"), ensure_ascii=False)
        answer = f"JSON matching this schema: {schema}"
    if _may_call_tools(options):
        return f"You may call a tool first; your final answer must be {answer}"
    return "Answer with one JSON object." if shape.json_schema is None else f"Answer in {answer}"


def instructed(messages: Sequence[ChatMessage], options: GenerationOptions) -> Sequence[ChatMessage]:
    """``messages`` with the :func:`format_instruction` at the end of the last user message.

    After the last message's text when it is the user's (a text part for a message of parts),
    else as a new user message. On an agent's turn (tools the model may call) it ends the last
    user message wherever that is, after it the calls and their results: every turn then shows
    the model the conversation the last one did, and no user turn comes between a tool's result
    and what the model makes of it. (A raw prompt is sent verbatim: nothing is added to it.)
    """
    text = format_instruction(options)
    if text is None or not messages:
        return messages
    at = len(messages) - 1
    if _may_call_tools(options):
        at = next((i for i in range(at, -1, -1) if messages[i].role == "user"), at)
    target = messages[at]
    if target.role != "user":
        return [*messages, ChatMessage("user", text)]
    if isinstance(target.content, str):
        content: str | list[dict[str, Any]] = f"{target.content}\n\n{text}" if target.content else text
    else:
        content = [*target.content, {"type": "text", "text": f"\n\n{text}"}]
    return [*messages[:at], dataclasses.replace(target, content=content), *messages[at + 1 :]]


def _may_call_tools(options: GenerationOptions) -> bool:
    """Whether the model may answer with a tool call instead (tools sent, none forced)."""
    return bool(options.tools) and options.tool_choice == "auto"


def _without_name_titles(schema: Any, properties: bool = False) -> Any:
    """``schema`` without the ``title`` of each property that only restates its name (pydantic's default)."""
    if isinstance(schema, list):
        return [_without_name_titles(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    if properties:  # name -> schema
        return {
            name: _without_name_titles(
                {k: v for k, v in sub.items() if not (k == "title" and v == name.replace("_", " ").title())}
                if isinstance(sub, dict)
                else sub
            )
            for name, sub in schema.items()
        }
    return {k: _without_name_titles(v, k == "properties") for k, v in schema.items()}
