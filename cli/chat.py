"""``ryzenai-llm chat``: an interactive streaming chat in the terminal.

Commands: ``/reset`` clears the history, ``/system TEXT`` sets the system prompt,
``/image PATH`` attaches an image to the next message (vision packages; a path quoted as a
shell or a file manager's drag-and-drop quotes it is unquoted), ``/exit`` (or Ctrl-D) leaves.
A line that starts with an unknown ``/word`` is refused with the list of commands (``//`` sends
a message that starts with ``/``). Ctrl-C while an answer streams stops that answer and keeps
the conversation. After each answer, a stopped one too, a status line shows the budget: prompt
tokens and their prefill bucket, tokens used of the window, decode speed.
"""

from __future__ import annotations

import argparse
import re
import shlex
import sys
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import unquote, urlparse

from ryzenai_core.engine.engine import Engine
from ryzenai_core.errors import RyzenAIError
from ryzenai_core.generation.streaming import Completion
from ryzenai_core.messages import ChatMessage
from ryzenai_core.options import validated_options
from ryzenai_core.vocabulary import did_you_mean

__all__ = ["COMMANDS", "ChatSession", "add_parser", "unquote_path"]

#: Every command with its argument, as /help and the unknown-command message list them.
COMMANDS = {
    "/reset": "clear the history",
    "/clear": "clear the history",
    "/system": "TEXT  set the system prompt",
    "/image": "PATH  attach an image to the next message",
    "/help": "show the commands",
    "/exit": "leave",
    "/quit": "leave",
}
_COMMAND = re.compile(r"/[A-Za-z][\w-]*")


def unquote_path(text: str) -> str:
    r"""A path as typed or pasted: shell quotes and backslash escapes removed, a file:// URI made a path.

    ``'/tmp/my picture.png'``, ``"/tmp/my picture.png"``, ``/tmp/my\ picture.png`` (what file
    managers paste when a file is dropped on a terminal) and ``file:///tmp/my%20picture.png`` are
    all ``/tmp/my picture.png``; an unquoted path with spaces is taken as it is.
    """
    raw = text.strip()
    if raw.startswith("file://"):
        return unquote(urlparse(raw).path)
    if not raw or Path(raw).exists() or raw.startswith(("http://", "https://", "data:")):
        return raw
    try:
        parts = shlex.split(raw)
    except ValueError:  # an unbalanced quote: the text as it is
        return raw
    return parts[0] if len(parts) == 1 else raw


class ChatSession:
    """The conversation state behind the ``chat`` command (kept separate for tests)."""

    def __init__(self, engine: Engine, *, system: str | None = None, max_new_tokens: int = 512, **options: Any) -> None:
        self.engine = engine
        self.system = system
        self.history: list[ChatMessage] = []
        self.max_new_tokens = max_new_tokens
        self.options = options
        self.images: list[str] = []  # attached to the next user message

    def user_message(self, user: str) -> ChatMessage:
        """The new user turn, with the attached images first (as Gemma 3's examples put them)."""
        if not self.images:
            return ChatMessage("user", user)
        parts: list[dict[str, Any]] = [{"type": "image", "image": path} for path in self.images]
        return ChatMessage("user", [*parts, {"type": "text", "text": user}])

    def messages(self, user: str) -> list[ChatMessage]:
        """The messages sent for a new user turn."""
        head = [ChatMessage("system", self.system)] if self.system else []
        return [*head, *self.history, self.user_message(user)]

    def ask(self, user: str, out: TextIO) -> str:
        """Stream one answer to ``out``; returns the status line. Ctrl-C stops the answer."""
        opts = validated_options(max_new_tokens=self.max_new_tokens, overflow="drop_oldest", **self.options)
        stream = self.engine.stream(self.messages(user), opts)
        answer = Completion()
        interrupted = False
        try:
            for chunk in stream:
                if chunk.reasoning:
                    out.write(f"\x1b[2m{chunk.reasoning}\x1b[0m")
                out.write(chunk.text)
                out.flush()
                answer.add(chunk)
        except KeyboardInterrupt:
            interrupted = True
        finally:
            stream.close()
        out.write("\n")
        final = answer if answer.finish_reason is not None else None
        images = len(self.images)
        sent = self.messages(user)
        self.history += [self.user_message(user), ChatMessage("assistant", answer.text)]
        self.images = []
        if final is not None and final.dropped_messages:
            self.history = self.history[final.dropped_messages :]
        if final is None and interrupted:
            return self.stopped_status(sent, len(answer.token_ids), images)
        return self.status(final, interrupted, images)

    def stopped_status(self, sent: list[ChatMessage], new_tokens: int, images: int = 0) -> str:
        """The budget line after Ctrl-C stopped an answer: the prompt as planned, the tokens shown."""
        window = self.engine.budget.window
        try:
            prompt = self.engine.count_tokens(sent)
        except RyzenAIError:
            return f"[stopped after {new_tokens} new tokens]"
        plan = self.engine.budget.plan(min(prompt, self.engine.budget.max_prompt_tokens), 1, images=bool(images))
        bucket = f"prefill bucket {plan.prefill_bucket} (+{plan.padding} pad)" if plan.prefill_bucket else "no buckets"
        cost = self.engine.package.image_tokens
        image = f" ({images} image{'s' if images > 1 else ''}: {images * cost} image tokens)" if images and cost else ""
        return (
            f"[{prompt} prompt{image} + {new_tokens} new = {prompt + new_tokens}/{window} tokens, {bucket}, "
            "stopped (Ctrl-C); the answer so far is kept in the history]"
        )

    def status(self, final: Any, interrupted: bool, images: int = 0) -> str:
        """The budget line shown after an answer."""
        window = self.engine.budget.window
        if final is None or final.usage is None or final.plan is None:
            return "[stopped]" if interrupted else "[no answer]"
        u, plan, t = final.usage, final.plan, final.timings
        bucket = f"prefill bucket {plan.prefill_bucket} (+{plan.padding} pad)" if plan.prefill_bucket else "no buckets"
        speed = f", {t.decode_tokens_per_second:.1f} tok/s" if t and t.decode_tokens_per_second else ""
        ttft = f", first token {t.time_to_first_token * 1000:.0f} ms" if t and t.time_to_first_token else ""
        dropped = f", {final.dropped_messages} old turns dropped" if final.dropped_messages else ""
        cost = self.engine.package.image_tokens
        image = f" ({images} image{'s' if images > 1 else ''}: {images * cost} image tokens)" if images and cost else ""
        return (
            f"[{u.prompt_tokens} prompt{image} + {u.completion_tokens} new = {u.total_tokens}/{window} tokens, "
            f"{bucket}{ttft}{speed}, {final.finish_reason}{dropped}]"
        )

    def command(self, line: str) -> str | None:
        """Handle a /command; returns what to print, or None if the line is a message.

        A line whose first word is ``/word`` is a command: an unknown one is refused with the
        list of commands (and the closest one), never sent to the model. ``//text`` and a
        path (``/usr/lib is ...``) are messages.
        """
        word, _, rest = line.partition(" ")
        if not _COMMAND.fullmatch(word):
            return None
        if word in ("/reset", "/clear"):
            self.history = []
            return "[history cleared]"
        if word == "/system":
            self.system = rest.strip() or None
            return f"[system prompt {'set' if self.system else 'cleared'}]"
        if word == "/image":
            return self.attach(unquote_path(rest))
        if word == "/help":
            return (
                "/reset  clear the history · /system TEXT  set the system prompt · /image PATH  attach an "
                "image to the next message · /exit  leave · Ctrl-C  stop an answer · //text  send a message "
                "that starts with /"
            )
        close = did_you_mean(word, COMMANDS)
        hint = f"; did you mean {close}?" if close else "."
        return (
            f"[unknown command {word}{hint} Commands: {', '.join(COMMANDS)}. Not sent to the model: to send a "
            "message that starts with /, begin it with //]"
        )

    def attach(self, path: str) -> str:
        """Attach the image at ``path`` to the next message (checked now, so a typo shows at once)."""
        from ryzenai_core.images import prepare_image

        if not path:
            return "[usage: /image PATH]"
        if not self.engine.package.has_vision:
            return f"[{self.engine.package.name} has no vision model: images cannot be sent to it]"
        try:
            image = prepare_image({"type": "image", "image": path}, f"the image {path!r}")
        except RyzenAIError as exc:
            return f"[{exc}]"
        self.images.append(path)
        cost = self.engine.package.image_tokens
        tokens = f", {cost} prompt tokens" if cost else ""
        size = f"{image.size[0]}x{image.size[1]}"
        return f"[image {len(self.images)} attached: {size}{tokens}; it goes with your next message]"


def _chat(args: argparse.Namespace) -> int:
    from rich.console import Console

    from ryzenai_core.models import default_model_path
    from ryzenai_core.package.hub import resolve_model

    console = Console(highlight=False)
    path = resolve_model(args.path) if args.path else default_model_path()
    options: dict[str, Any] = {}
    if args.temperature is not None:
        options["temperature"] = args.temperature
    if args.think is not None:
        options["enable_thinking"] = args.think
    validated_options(max_new_tokens=args.max_new_tokens, **options)  # a bad option fails now, not at each message
    engine = Engine.get(path, provider=args.provider)
    session = ChatSession(engine, system=args.system, max_new_tokens=args.max_new_tokens, **options)
    pkg = engine.package
    with console.status(f"loading {pkg.name} (the first load on an NPU compiles for a while)"):
        engine.load()
    console.print(
        f"[bold]{pkg.name}[/bold]: {pkg.mode.value}, window {engine.budget.window}, prompt limit "
        f"{engine.budget.prompt_limit}. /help for commands, Ctrl-C stops an answer, Ctrl-D leaves."
    )
    while True:
        try:
            line = input("you> ").strip()
        except EOFError:
            console.print()
            return 0
        except KeyboardInterrupt:
            console.print()
            continue
        if not line:
            continue
        if line in ("/exit", "/quit"):
            return 0
        if line.startswith("//"):
            line = line[1:]  # a message that starts with /
        else:
            reply = session.command(line)
            if reply is not None:
                console.print(reply, style="dim", markup=False)
                continue
        sys.stdout.write("ai> ")
        try:
            status = session.ask(line, sys.stdout)
        except RyzenAIError as exc:
            console.print(f"error: {exc}", style="red", markup=False)
            continue
        console.print(status, style="dim", markup=False)


def add_parser(sub: Any) -> None:
    """Register ``chat`` on the CLI's subparsers."""
    p = sub.add_parser("chat", help="interactive streaming chat in the terminal")
    p.add_argument("path", nargs="?", help="model folder or Hugging Face repo id (default: the embedded model)")
    p.add_argument("--provider", choices=["cpu", "cuda", "dml"], help="run a plain ONNX package on this provider")
    p.add_argument("--system", help="system prompt")
    p.add_argument("--temperature", type=float)
    p.add_argument("--max-new-tokens", type=int, default=512)
    p.add_argument("--think", action=argparse.BooleanOptionalAction, default=None, help="reasoning on/off (Qwen3)")
    p.set_defaults(func=_chat)
