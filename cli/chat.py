"""``ryzenai-llm chat``: an interactive streaming chat in the terminal.

Commands: ``/reset`` clears the history, ``/system TEXT`` sets the system prompt,
``/image PATH`` attaches an image to the next message (vision packages), ``/exit`` (or
Ctrl-D) leaves. Ctrl-C while an answer streams stops that answer and keeps
the conversation. After each answer a status line shows the budget: prompt tokens and
their prefill bucket, tokens used of the window, decode speed.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, TextIO

from ryzenai_core.engine import Completion, Engine
from ryzenai_core.errors import RyzenAIError
from ryzenai_core.messages import ChatMessage
from ryzenai_core.options import validated_options

__all__ = ["ChatSession", "add_parser"]


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
        self.history += [self.user_message(user), ChatMessage("assistant", answer.text)]
        self.images = []
        if final is not None and final.dropped_messages:
            self.history = self.history[final.dropped_messages :]
        return self.status(final, interrupted, images)

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
        """Handle a /command; returns what to print, or None if the line is not a command."""
        if line in ("/reset", "/clear"):
            self.history = []
            return "[history cleared]"
        if line.startswith("/system"):
            self.system = line[len("/system") :].strip() or None
            return f"[system prompt {'set' if self.system else 'cleared'}]"
        if line.startswith("/image"):
            return self.attach(line[len("/image") :].strip())
        if line == "/help":
            return (
                "/reset  clear the history · /system TEXT  set the system prompt · /image PATH  attach an "
                "image to the next message · /exit  leave · Ctrl-C  stop an answer"
            )
        return None

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

    from ryzenai_core.hub import resolve_model
    from ryzenai_core.models import default_model_path

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
