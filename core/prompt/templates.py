"""Chat templates: from :class:`ChatMessage` lists to prompt text.

Hugging Face chat templates are Jinja programs shipped with a model. This module renders them
the way ``transformers`` does (``transformers.utils.chat_template_utils``), so that a prompt built
here is byte-for-byte the prompt the model was trained and evaluated with. What the model writes
back (turn ends, reasoning, tool calls) is read by :mod:`ryzenai_core.prompt.formats`.

Data flow::

    ModelPackage ──► ChatTemplate.for_package(pkg, override)
                       source: override > chat_template.jinja / .json / tokenizer_config.json
                               > built-in fallback chosen by model type (core/templates/*.jinja)
                       special tokens: tokenizer_config.json (bos_token, eos_token, ...)

    ChatMessage[] ─► ChatMessage.to_hf() ─┐
    tools ─► normalize_tools() ───────────┼─► plain JSON data ─► sandboxed Jinja ─► prompt str
    special tokens, enable_thinking, **kw ┘   (compiled once per template source)

Rendering mirrors ``transformers`` (checked against it by ``tests/fixtures/template_goldens.json``,
made by ``scripts/make_template_goldens.py``) in the sandbox of :mod:`ryzenai_core.prompt.sandbox`.
Template variables are ``messages``, ``tools`` (``None`` without tools), ``documents``,
``add_generation_prompt``, the special tokens, ``enable_thinking`` (only when given) and any
extra keyword. One deliberate difference: reading an unsafe attribute (``''.__class__``,
``self._TemplateReference__context``) raises instead of rendering as empty text, so a hostile
template fails loudly with :class:`ChatTemplateError`; so does a template that runs past the
sandbox's bounds. The fallbacks, special tokens and overrides come from
:mod:`ryzenai_core.prompt.sources`.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any, Protocol, TypeVar, cast

import jinja2
import jinja2.exceptions

from ..errors import ChatTemplateError, InvalidRequestError
from ..messages import ChatMessage, ToolCall, normalize_tools
from .formats import (
    Family,
    check_family,
    end_of_turn_markers,
    family_for_model_type,
    has_tool_calls,
    infer_family,
    reasoning_markers,
    tool_call_markers,
)
from .sandbox import (
    TemplateLimit,
    TemplateRaised,
    check_syntax,
    compile_template,
    plain_data,
    render_bounded,
    template_variables,
)
from .sources import FALLBACK_TEMPLATES, builtin_template, read_override, special_tokens_from_config, token_text

__all__ = ["ChatTemplate", "PackageTemplates"]

_T = TypeVar("_T")

logger = logging.getLogger(__name__)


class _TemplatePackage(Protocol):
    """What a chat template reads of a model package (:class:`~ryzenai_core.package.folder.ModelPackage`)."""

    @property
    def name(self) -> str: ...
    @property
    def path(self) -> Path: ...
    @property
    def model_type(self) -> str: ...
    @property
    def tokenizer_config(self) -> Mapping[str, Any]: ...
    @property
    def chat_template_source(self) -> str | None: ...
    @property
    def chat_template_file(self) -> Path | None: ...


_SYSTEM_PROBE = "ryzenai-system-probe-7d1f"
_IMAGE_PROBE = "ryzenai-image-probe-3c9a"

# Packages (path, template source name, source hash) already told that their format is plain.
_SAID_PLAIN: set[tuple[str, str, int]] = set()
_SAID_LOCK = threading.Lock()


def _alias_reasoning(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    # transformers fills `thinking` (gpt-oss templates) and `reasoning_content` from each other.
    out = []
    for message in messages:
        reasoning = next(
            (message[k] for k in ("reasoning_content", "thinking", "reasoning") if message.get(k) is not None), None
        )
        if reasoning is not None:
            message = {"thinking": reasoning, **message, "reasoning_content": reasoning}
        out.append(message)
    return out


def _hint(template_message: str) -> str:
    low = template_message.lower()
    if "system" in low:
        return (
            "the template does not support the 'system' role: put the system prompt into the first user "
            "message, or pass a template that supports it (chat_template=...)"
        )
    if "alternate" in low:
        return (
            "the template needs user and assistant turns to alternate, starting with a user turn: merge "
            "consecutive messages of the same role"
        )
    if "first user message" in low:
        return "the template puts the tool definitions into the first user message: start with a user message"
    if "tool" in low:
        return (
            "the template limits tool use (for example one tool call per assistant message): split the calls "
            "into separate assistant messages, each followed by its tool result"
        )
    return "the template rejected this conversation: change the messages, or override the template (chat_template=...)"


# ---------------------------------------------------------------------- the template
class ChatTemplate:
    """A Hugging Face chat template, rendered with ``transformers``' semantics.

    Create from a package with :meth:`for_package`, or from a source string::

        t = ChatTemplate(source, special_tokens={"bos_token": "<|begin_of_text|>"})
        prompt = t.render([ChatMessage("user", "Hi")])

    Attributes:
        source: the Jinja source.
        source_name: where it came from: ``chat_template.jinja``, ``chat_template.json``,
            ``tokenizer_config.json``, ``override``, ``fallback:<file>`` or ``template string``.
        special_tokens: the special-token variables (``bos_token``, ``eos_token``, ...).
        fallback_message: why a built-in template is used, when it is (else ``None``).
        package_name: the model package's name, when made by :meth:`for_package`.
    """

    #: What a package gets whose output format is not known (family ``plain``), when made by
    #: :meth:`for_package` (else ``None``).
    format_message: str | None = None

    def __init__(
        self,
        source: str,
        *,
        special_tokens: Mapping[str, Any] | None = None,
        family: str | None = None,
        source_name: str = "template string",
        fallback_message: str | None = None,
        package_name: str | None = None,
    ) -> None:
        """Compile a template.

        Args:
            source: the Jinja source.
            special_tokens: template variables such as ``bos_token``; values are strings or
                ``{"content": ...}`` dicts, ``None`` values are left out.
            family: the prompt/output format (see :data:`FAMILIES`); guessed from the source
                when not given (``plain`` if it cannot be guessed).
            source_name: where the source came from, for messages.
            fallback_message: set when the source is a built-in fallback.
            package_name: the package the template belongs to, for messages.

        Raises:
            ChatTemplateError: the source is empty or is not valid Jinja.
            InvalidRequestError: an unknown family.
        """
        self.source_name = source_name
        self.package_name = package_name
        self.fallback_message = fallback_message
        if not isinstance(source, str) or not source.strip():
            raise ChatTemplateError(f"{self._label} is empty; pass the model's Jinja chat template")
        self.source = source
        self._renders_images: dict[str, bool] = {}
        self.special_tokens: dict[str, str] = {}
        for key, value in (special_tokens or {}).items():
            text = token_text(value)
            if text is not None:
                self.special_tokens[key] = text
            elif value is not None:
                raise InvalidRequestError(
                    f"special token {key!r} is {value!r}; give a string or a {{'content': ...}} dict"
                )
        self._family: Family = check_family(family) if family is not None else (infer_family(source) or "plain")
        # Parsed now (a syntax error is the package's, named when it is opened); compiled when it
        # first renders: a caller that only asks what the template can do (tools, reasoning) never
        # pays for the compilation.
        self._jinja(check_syntax)

    @cached_property
    def _template(self) -> jinja2.Template:
        return self._jinja(compile_template)

    def _jinja(self, step: Callable[[str], _T]) -> _T:
        """``step(source)`` (parsing or compiling it), with Jinja's errors as :class:`ChatTemplateError`."""
        try:
            return step(self.source)
        except jinja2.exceptions.TemplateSyntaxError as exc:
            raise ChatTemplateError(
                f"{self._label} is not valid Jinja (line {exc.lineno}: {exc.message}); fix the template, "
                "or pass another one (chat_template=...)"
            ) from exc
        except (jinja2.exceptions.TemplateError, SyntaxError, RecursionError) as exc:
            # SyntaxError, RecursionError: Python's own compiler refused the code Jinja generated
            # (a template nested deeper than it allows)
            raise ChatTemplateError(
                f"{self._label} cannot be compiled ({type(exc).__name__}: {exc}); fix the template, "
                "or pass another one (chat_template=...)"
            ) from exc

    # ------------------------------------------------------------------ construction
    @classmethod
    def for_package(
        cls, pkg: _TemplatePackage, override: str | os.PathLike[str] | None = None, *, family: str | None = None
    ) -> ChatTemplate:
        """The chat template of a model package.

        Uses ``override`` if given (a Jinja source, or the path of a template file), else the
        package's own template (``chat_template.jinja``, ``chat_template.json`` or the
        ``chat_template`` of ``tokenizer_config.json``), else a built-in template chosen by
        ``pkg.model_type`` (see :data:`FALLBACK_TEMPLATES`; ChatML for types without one).
        Special tokens come from ``pkg.tokenizer_config``.

        Args:
            pkg: the opened package.
            override: a template to use instead of the package's.
            family: force the output format (default: guessed from the template, else from
                the model type).

        Raises:
            ChatTemplateError: the template is not valid Jinja, or ``override`` names an
                unreadable file.
        """
        special = special_tokens_from_config(pkg.tokenizer_config)
        type_family = family_for_model_type(pkg.model_type)
        if override is not None:
            source = read_override(override)
            return cls(
                source,
                special_tokens=special,
                family=family or infer_family(source) or type_family,
                source_name="override",
                package_name=pkg.name,
            )._said_plain(pkg)
        if pkg.chat_template_source:
            name = pkg.chat_template_file.name if pkg.chat_template_file is not None else "tokenizer_config.json"
            return cls(
                pkg.chat_template_source,
                special_tokens=special,
                family=family or infer_family(pkg.chat_template_source) or type_family,
                source_name=name,
                package_name=pkg.name,
            )._said_plain(pkg)
        # Without a template of its own the package gets a built-in one, and that one's format.
        fam = check_family(family) if family is not None else (type_family or "chatml")
        file = FALLBACK_TEMPLATES.get(fam, FALLBACK_TEMPLATES["chatml"])
        message = (
            f"model package {pkg.name} has no chat template (no chat_template.jinja, chat_template.json or "
            f"'chat_template' in tokenizer_config.json); using the built-in {file} for model type "
            f"{pkg.model_type!r}. If the model was trained with another format, put its template in "
            "chat_template.jinja or pass chat_template=..."
        )
        logger.warning(message)
        return cls(
            builtin_template(file),
            special_tokens=special,
            family=fam,
            source_name=f"fallback:{file}",
            fallback_message=message,
            package_name=pkg.name,
        )

    def _said_plain(self, pkg: _TemplatePackage) -> ChatTemplate:
        """Set (and log once per package and template) what a ``plain`` format means for ``pkg``."""
        if self._family != "plain":
            return self
        self.format_message = (
            f"ryzenai-llm does not know the output format of {pkg.name} (model type {pkg.model_type!r}, chat "
            f"template {self.source_name!r}): answers are plain text, ending at the tokenizer's end-of-sequence "
            "tokens, with no reasoning split out and no tool calls parsed; its template still renders the prompt. "
            "If the model was trained on a known format, pass a template in it (chat_template=...: Llama 3, Qwen3, "
            "Gemma 3 or ChatML control tokens)."
        )
        key = (str(pkg.path), self.source_name, hash(self.source))
        with _SAID_LOCK:
            if key not in _SAID_PLAIN:
                _SAID_PLAIN.add(key)
                logger.warning(self.format_message)
        return self

    # ------------------------------------------------------------------ facts
    @property
    def _label(self) -> str:
        where = f" of model package {self.package_name}" if self.package_name else ""
        return f"chat template {self.source_name!r}{where}"

    @property
    def family(self) -> Family:
        """The prompt/output format: ``llama3``, ``qwen3``, ``gemma3``, ``chatml`` or ``plain`` (not known)."""
        return self._family

    @property
    def is_fallback(self) -> bool:
        """True when a built-in template stands in for a package without one."""
        return self.source_name.startswith("fallback:")

    @property
    def variables(self) -> frozenset[str]:
        """The variables the template reads from its context (``messages``, ``tools``, ...)."""
        return template_variables(self.source)

    @property
    def supports_tools(self) -> bool:
        """True when the template reads ``tools``."""
        return "tools" in self.variables

    @property
    def supports_thinking(self) -> bool:
        """True when the template reads ``enable_thinking``."""
        return "enable_thinking" in self.variables

    @cached_property
    def supports_system_role(self) -> bool:
        """True unless the template rejects or drops a system message.

        Found by rendering a system + user pair: False when that raises while a lone user
        message renders, or when the system text does not appear in the prompt.
        """
        try:
            prompt = self.render([ChatMessage("system", _SYSTEM_PROBE), ChatMessage("user", "Hi")])
        except ChatTemplateError:
            try:
                self.render([ChatMessage("user", "Hi")])
            except ChatTemplateError:
                return True  # the template fails on any conversation; nothing to blame the role for
            return False
        return _SYSTEM_PROBE in prompt

    @cached_property
    def one_call_per_turn(self) -> bool:
        """True when the template renders at most one tool call per assistant message.

        Found by rendering an assistant message with two calls and their results: True when
        that raises while one call renders (Llama 3.2: "only supports single tool-calls at
        once"), or when the second call is left out of the prompt.
        """
        if not self.supports_tools:
            return False
        tool = {"name": "probe", "description": "", "parameters": {"type": "object", "properties": {}}}

        def conversation(n: int) -> list[ChatMessage]:
            calls = [ToolCall("probe", {"probe": f"{_SYSTEM_PROBE}-{i}"}, id=f"call_{i}") for i in range(n)]
            results = [ChatMessage("tool", "ok", tool_call_id=c.id, name="probe") for c in calls]
            return [ChatMessage("user", "Hi"), ChatMessage("assistant", "", tool_calls=calls), *results]

        try:
            return f"{_SYSTEM_PROBE}-1" not in self.render(conversation(2), tools=[tool])
        except ChatTemplateError:
            try:
                self.render(conversation(1), tools=[tool])
            except ChatTemplateError:
                return False  # the template fails on any tool call; nothing to blame the count for
            return True

    def renders_images(self, role: str = "user") -> bool:
        """True when an image in a message of ``role`` (system, user or assistant) reaches the prompt.

        Found once per role by rendering a message of an image and a text (in both orders) in a
        short conversation: False when that raises, renders as the text alone (Gemma 3's
        template keeps only the first text of a system message; a text-only template drops
        image parts), or writes the parts out as data (a template that expects string content).
        """
        found = self._renders_images.get(role)
        if found is None:
            found = self._renders_images[role] = self._probe_images(role)
        return found

    def _probe_images(self, role: str) -> bool:
        text = {"type": "text", "text": _SYSTEM_PROBE}
        image = {"type": "image", "image": _IMAGE_PROBE}

        def conversation(parts: list[dict[str, Any]]) -> list[ChatMessage]:
            message = ChatMessage(role, parts)  # type: ignore[arg-type]  # a role checked by ChatMessage
            if role == "system":
                return [message, ChatMessage("user", "Hi")]
            if role == "assistant":
                return [ChatMessage("user", "Hi"), message, ChatMessage("user", "And?")]
            return [message]

        try:
            alone = self.render(conversation([text]))
            for parts in ([image, text], [text, image]):
                prompt = self.render(conversation(parts))
                if prompt == alone or _IMAGE_PROBE in prompt:
                    return False
        except ChatTemplateError:
            return False
        return True

    @property
    def bos_token(self) -> str | None:
        """The ``bos_token`` variable (``None`` when the tokenizer has none)."""
        return self.special_tokens.get("bos_token")

    @property
    def eos_token(self) -> str | None:
        """The ``eos_token`` variable (``None`` when the tokenizer has none)."""
        return self.special_tokens.get("eos_token")

    @property
    def end_of_turn(self) -> list[str]:
        """The strings that end an assistant turn in this family's format."""
        return end_of_turn_markers(self._family)

    @property
    def calls_tools(self) -> bool:
        """Whether calls with tools work: the template renders tools and the family has a call format."""
        return self.supports_tools and has_tool_calls(self._family)

    @property
    def tool_call_markers(self) -> tuple[str, str] | None:
        """See :func:`tool_call_markers`."""
        return tool_call_markers(self._family)

    @property
    def reasoning_markers(self) -> tuple[str, str] | None:
        """See :func:`reasoning_markers`."""
        return reasoning_markers(self._family)

    def __repr__(self) -> str:
        return f"ChatTemplate(family={self._family!r}, source_name={self.source_name!r})"

    # ------------------------------------------------------------------ rendering
    def render(
        self,
        messages: Sequence[ChatMessage],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool = True,
        enable_thinking: bool | None = None,
        **extra: Any,
    ) -> str:
        """Render a conversation into a prompt.

        Args:
            messages: the conversation, oldest first.
            tools: tool definitions (OpenAI form or bare functions; see
                :func:`~ryzenai_core.messages.normalize_tools`). None or empty: the template sees
                ``tools`` as ``None``.
            add_generation_prompt: end with the header of a new assistant turn.
            enable_thinking: passed to the template only when not ``None`` (Qwen3 turns thinking
                off with ``False``).
            **extra: more template variables (e.g. ``date_string`` for Llama 3, ``documents``);
                they override special tokens of the same name.

        Returns:
            The prompt text. Special tokens appear as text; tokenize it without adding them again.

        Raises:
            InvalidRequestError: no messages, a message that is not a :class:`ChatMessage`, or
                malformed tools.
            ChatTemplateError: the template raised or failed while rendering.
        """
        if isinstance(messages, (str, bytes, ChatMessage)) or not isinstance(messages, Sequence):
            raise InvalidRequestError(
                f"messages must be a list of ChatMessage, got {type(messages).__name__}; "
                "wrap a single message in a list"
            )
        if not messages:
            raise InvalidRequestError(
                "there are no messages to render; pass at least one, e.g. [ChatMessage('user', 'Hello')]"
            )
        hf: list[dict[str, Any]] = []
        for i, message in enumerate(messages):
            if not isinstance(message, ChatMessage):
                raise InvalidRequestError(
                    f"message #{i} is a {type(message).__name__}, not a ChatMessage; build it with "
                    "ChatMessage(role=..., content=...)"
                )
            hf.append({k: v for k, v in message.to_hf().items() if v is not None})
        if tools is not None and (isinstance(tools, (str, bytes, Mapping)) or not isinstance(tools, Sequence)):
            raise InvalidRequestError(
                f"tools must be a list of tool definitions, got {type(tools).__name__}; wrap a single tool in a list"
            )
        schemas = normalize_tools(cast("list[dict[str, Any]]", list(tools)) if tools is not None else None)
        documents = extra.pop("documents", None)
        if documents is not None and (
            not isinstance(documents, Sequence) or not all(isinstance(d, Mapping) for d in documents)
        ):
            raise InvalidRequestError("documents must be a list of dicts with 'title' and 'text' keys")
        context: dict[str, Any] = {**self.special_tokens, **extra}
        if enable_thinking is not None:
            context["enable_thinking"] = bool(enable_thinking)
        given = sum(len(json.dumps(x, default=str)) for x in (hf, schemas, documents, extra))
        return self._render(
            4 * given + (1 << 20),
            messages=_alias_reasoning(plain_data(hf)),
            tools=plain_data(schemas) or None,
            documents=plain_data(documents),
            add_generation_prompt=bool(add_generation_prompt),
            **plain_data(context),
        )

    def _render(self, max_chars: int, **context: Any) -> str:
        """Render, bounded: at most ``max_chars`` characters and :data:`RENDER_SECONDS` seconds."""
        try:
            return render_bounded(self._template, max_chars, **context)
        except TemplateLimit as exc:
            raise ChatTemplateError(
                f"{self._label} was stopped: {exc}. A chat template renders the conversation; one that "
                "generates text on its own is refused: replace it with the model's official template "
                "(chat_template=...)"
            ) from None
        except TemplateRaised as exc:
            err = ChatTemplateError(
                f"{self._label} raised an error: {exc.template_message!r}; {_hint(exc.template_message)}"
            )
            err.template_message = exc.template_message  # type: ignore[attr-defined]
            raise err from exc
        except jinja2.exceptions.SecurityError as exc:
            raise ChatTemplateError(
                f"{self._label} was stopped by the sandbox ({exc}); it tries to reach Python internals, "
                "which a chat template never needs: replace it with the model's official template "
                "(chat_template=...)"
            ) from exc
        except Exception as exc:  # TemplateError, TypeError, ... from template code
            raise ChatTemplateError(
                f"{self._label} failed to render ({type(exc).__name__}: {exc}); the template expects data "
                "this conversation does not give it (message content of another type, a missing field, "
                "or a variable to pass as a keyword: render(..., name=value)); adjust the messages, "
                "or override the template (chat_template=...)"
            ) from exc


class PackageTemplates:
    """A package's chat template and the templates calls pass instead, each compiled once.

    Attributes:
        default: the package's own template (see :meth:`ChatTemplate.for_package`).
    """

    def __init__(self, package: _TemplatePackage) -> None:
        self.package = package
        self.default = ChatTemplate.for_package(package)
        self._overrides: dict[str, ChatTemplate] = {}
        self._lock = threading.Lock()

    def get(self, override: str | None = None) -> ChatTemplate:
        """The template a call with ``override`` (a Jinja source or file) renders with; None: the package's."""
        if not override:
            return self.default
        with self._lock:
            found = self._overrides.get(override)
            if found is None:
                found = self._overrides[override] = ChatTemplate.for_package(self.package, override=override)
            return found
