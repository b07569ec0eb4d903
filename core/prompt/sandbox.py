"""The Jinja sandbox chat templates render in, as ``transformers`` builds it, with bounds.

An :class:`~jinja2.sandbox.ImmutableSandboxedEnvironment` with ``trim_blocks``/``lstrip_blocks``
and loop controls, the ``{% generation %}`` tag (a no-op here), ``raise_exception``,
``strftime_now``, a ``tojson`` filter that does not escape HTML or non-ASCII, and the restricted
``dict``/``namespace`` globals. Two deliberate differences: reading an unsafe attribute raises
instead of rendering as empty text, and one rendering is bounded (:data:`RENDER_SECONDS`,
:data:`MAX_REPEAT`, :data:`MAX_POWER_BITS`, an output size): past a bound it raises
:class:`TemplateLimit`. :func:`plain_data` rebuilds what a template is given from plain JSON
types. :class:`~ryzenai_core.prompt.templates.ChatTemplate` turns these errors into
:class:`~ryzenai_core.errors.ChatTemplateError` messages that name the template.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections.abc import Iterator, Mapping
from functools import lru_cache
from typing import Any, NoReturn

import jinja2
import jinja2.exceptions
import jinja2.ext
import jinja2.meta
import jinja2.nodes
import jinja2.sandbox
import jinja2.utils
from jinja2.sandbox import ImmutableSandboxedEnvironment

from ..errors import ChatTemplateError

__all__ = [
    "MAX_POWER_BITS",
    "MAX_REPEAT",
    "RENDER_SECONDS",
    "TemplateLimit",
    "TemplateRaised",
    "check_time",
    "compile_template",
    "plain_data",
    "render_bounded",
    "template_variables",
]


class TemplateRaised(ChatTemplateError):
    """What ``raise_exception(...)`` raises inside a template (re-raised with context by render)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.template_message = message


class _GenerationTag(jinja2.ext.Extension):
    """``{% generation %}...{% endgeneration %}``: marks assistant text for training masks.

    ``transformers`` records the character span of the block (AssistantTracker); prompts only
    need its text, so this renders the body unchanged.
    """

    tags = {"generation"}

    def parse(self, parser: Any) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller: Any) -> str:
        return str(caller())


#: Bounds on one rendering: seconds, items made by one repetition, digits of one power.
RENDER_SECONDS = 5.0
MAX_REPEAT = 1_000_000
MAX_POWER_BITS = 4096
_WIDTH_METHODS = frozenset({"ljust", "rjust", "center", "zfill"})
_render_state = threading.local()


class TemplateLimit(ChatTemplateError):
    """A rendering went past one of the bounds above."""


def check_time() -> None:
    """Raise :class:`TemplateLimit` when the rendering under way has run past :data:`RENDER_SECONDS`."""
    deadline = getattr(_render_state, "deadline", None)
    if deadline is not None and time.monotonic() > deadline:
        raise TemplateLimit(f"it ran for more than {RENDER_SECONDS:g} s")


class _Range:
    """A range that checks the render time while iterated."""

    def __init__(self, values: range) -> None:
        self._range = values

    def __len__(self) -> int:
        return len(self._range)

    def __getitem__(self, index: Any) -> Any:
        return self._range[index]

    def __iter__(self) -> Iterator[int]:
        for i, value in enumerate(self._range):
            if not i & 1023:
                check_time()
            yield value

    def __reversed__(self) -> Iterator[int]:
        return iter(_Range(self._range[::-1]))


def _template_range(*args: int) -> _Range:
    """The sandbox's ``range`` (at most 100,000 items), checking the render time while iterated."""
    return _Range(jinja2.sandbox.safe_range(*args))


class _Sandbox(ImmutableSandboxedEnvironment):
    """``transformers``' sandbox, except that an unsafe attribute raises instead of being undefined.

    It also bounds what one rendering may cost: repetitions (``'a' * n``, ``ljust(n)``) of at
    most :data:`MAX_REPEAT` items, powers of at most :data:`MAX_POWER_BITS` bits, and
    :data:`RENDER_SECONDS` of time, checked at every call and loop step over ``range``.
    """

    intercepted_binops = frozenset({"*", "**"})

    def unsafe_undefined(self, obj: Any, attribute: str) -> NoReturn:
        raise jinja2.exceptions.SecurityError(
            f"access to attribute {attribute!r} of {type(obj).__name__!r} object is unsafe"
        )

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        if operator == "*":
            for seq, times in ((left, right), (right, left)):
                if isinstance(seq, (str, list, tuple)) and isinstance(times, int) and len(seq) * times > MAX_REPEAT:
                    raise TemplateLimit(
                        f"it repeats a {type(seq).__name__} of {len(seq)} items {times} times "
                        f"(more than {MAX_REPEAT:,} items)"
                    )
        elif operator == "**" and isinstance(left, int) and isinstance(right, int) and abs(left) > 1:
            if right * abs(left).bit_length() > MAX_POWER_BITS:
                raise TemplateLimit(f"it computes {left} ** {right} (more than {MAX_POWER_BITS} bits)")
        return super().call_binop(context, operator, left, right)

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805 - Jinja's signature
        check_time()
        if getattr(__obj, "__name__", None) in _WIDTH_METHODS and isinstance(getattr(__obj, "__self__", None), str):
            width = args[0] if args else kwargs.get("width")
            if isinstance(width, int) and width > MAX_REPEAT:
                raise TemplateLimit(f"it pads a string to {width:,} characters (more than {MAX_REPEAT:,})")
        return super().call(__context, __obj, *args, **kwargs)


def _raise_exception(message: Any) -> NoReturn:
    raise TemplateRaised(str(message))


def _tojson(
    x: Any, ensure_ascii: bool = False, indent: int | str | None = None, separators: Any = None, sort_keys: bool = False
) -> str:
    # transformers' filter: no HTML escaping (unlike Jinja's), and json.dumps' options exposed.
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(format: str) -> str:
    from datetime import datetime  # here: most templates never call it

    return datetime.now().strftime(format)


class _TemplateDict:
    """``dict`` for templates without access to the type itself (as in transformers)."""

    def __call__(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        return dict(*args, **kwargs)

    def fromkeys(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        return dict.fromkeys(*args, **kwargs)


class _TemplateNamespace(jinja2.utils.Namespace):
    """``namespace`` that refuses underscore-prefixed attributes (as in transformers)."""

    def __init__(*args: Any, **kwargs: Any) -> None:  # Jinja's signature trick: `self` may be a key
        self, rest = args[0], args[1:]
        attrs = dict(*rest, **kwargs)
        for name in attrs:
            _TemplateNamespace._check_name(name)
        jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name: str, value: Any) -> None:
        _TemplateNamespace._check_name(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check_name(name: Any) -> None:
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(
                f"chat templates cannot store underscore-prefixed attributes on a namespace, got {name!r}"
            )


def _make_environment() -> _Sandbox:
    env = _Sandbox(trim_blocks=True, lstrip_blocks=True, extensions=[_GenerationTag, jinja2.ext.loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    env.globals["dict"] = _TemplateDict()
    env.globals["namespace"] = _TemplateNamespace
    env.globals["range"] = _template_range
    return env


_ENV = _make_environment()


@lru_cache(maxsize=64)
def _parsed(source: str) -> tuple[jinja2.nodes.Template, frozenset[str]]:
    """A template source's syntax tree and the variables it reads (once per source)."""
    tree = _ENV.parse(source)
    return tree, frozenset(jinja2.meta.find_undeclared_variables(tree))


def check_syntax(source: str) -> None:
    """Parse a template source (the part of compiling that a syntax error stops).

    Raises:
        jinja2.exceptions.TemplateSyntaxError: the source is not valid Jinja.
    """
    _parsed(source)


@lru_cache(maxsize=64)
def compile_template(source: str) -> jinja2.Template:
    """A template source compiled in the sandbox (once per source, from its parsed tree)."""
    return _ENV.from_string(_parsed(source)[0])


def template_variables(source: str) -> frozenset[str]:
    """The variables a template source reads without defining them."""
    return _parsed(source)[1]


def plain_data(value: Any) -> Any:
    """Rebuild template data from plain JSON types (transformers' ``_plain_template_data``).

    Objects with methods the sandbox does not know are replaced by an inert ``<TypeName>``.
    """
    if value is None or type(value) in (str, int, float, bool):
        return value
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, Mapping):
        return {plain_data(k): plain_data(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain_data(v) for v in value]
    if isinstance(value, tuple):
        return tuple(plain_data(v) for v in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain_data(getattr(value, f.name)) for f in dataclasses.fields(value)}
    return f"<{type(value).__name__}>"


def render_bounded(template: jinja2.Template, max_chars: int, **context: Any) -> str:
    """Render ``template`` with ``context``: at most ``max_chars`` characters and :data:`RENDER_SECONDS` seconds.

    Raises:
        TemplateLimit: the rendering went past a bound.
        TemplateRaised: the template called ``raise_exception``.
        jinja2.exceptions.SecurityError: the template reached for Python internals.
    """
    _render_state.deadline = time.monotonic() + RENDER_SECONDS
    try:
        parts: list[str] = []
        size = 0
        for part in template.generate(**context):
            size += len(part)
            if size > max_chars:
                raise TemplateLimit(
                    f"its output passed {max_chars:,} characters (four times what the messages, tools and "
                    "variables hold, plus 1 MiB)"
                )
            parts.append(part)
            check_time()
        return "".join(parts)
    finally:
        _render_state.deadline = None
