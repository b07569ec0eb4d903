"""The ``ryzenai-llm`` command.

    ryzenai-llm demo  [--model PATH] [--question TEXT]
    ryzenai-llm info  [PATH] [--json] [--prompt-tokens N] [--max-new-tokens M]
    ryzenai-llm chat  [PATH]
    ryzenai-llm bench [PATH] [--png FILE] [--json]
    ryzenai-llm pull  REPO_ID [--revision REV]
    ryzenai-llm list  [FOLDER ...]
    ryzenai-llm --version
    ryzenai-llm doctor [PATH] [--json]
    ryzenai-llm warmup MODEL [MODEL ...] [--buckets N,N] [--config-file PATH] [--json]

PATH is a model folder, an embedded model's name or a Hugging Face repository id; without
it, the embedded default model is used.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from ryzenai_core import __version__
from ryzenai_core.errors import RyzenAIError

from . import bench, chat, demo, doctor, info, listing, pull, warmup

__all__ = ["main"]


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for tests and docs)."""
    parser = argparse.ArgumentParser(prog="ryzenai-llm", description="Run LLM packages on AMD Ryzen AI NPUs.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    info.add_parser(sub)
    demo.add_parser(sub)
    chat.add_parser(sub)
    bench.add_parser(sub)
    pull.add_parser(sub)
    listing.add_parser(sub)
    doctor.add_parser(sub)
    warmup.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``ryzenai-llm`` command."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        return int(args.func(args))
    except RyzenAIError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
