"""``ryzenai-llm pull``: fetch a model package from the Hugging Face Hub ahead of its first use.

    ryzenai-llm pull REPO_ID [--revision REV] [--cache-dir DIR] [--json]

Downloads the repository into the Hugging Face cache with huggingface_hub's progress bar
(LFS content, never pointers), or brings a cached copy up to date, then shows what ``info``
shows for it, including whether it loads here. Offline (``HF_HUB_OFFLINE=1``) a cached copy
is shown as it is; a repository that is not cached is an error that says what to do.
"""

from __future__ import annotations

import argparse
from typing import Any

from ryzenai_core.package.hub import pull_model

from .info import show_info

__all__ = ["add_parser"]


def _pull(args: argparse.Namespace) -> int:
    path = pull_model(args.repo_id, revision=args.revision, cache_dir=args.cache_dir)
    if not args.json:
        print(f"{args.repo_id} is in {path}\n")
    return show_info(path, as_json=args.json)


def add_parser(sub: Any) -> None:
    """Register ``pull`` on the CLI's subparsers."""
    p = sub.add_parser("pull", help="download a model package from the Hugging Face Hub and say whether it loads here")
    p.add_argument("repo_id", metavar="REPO_ID", help="a Hugging Face repository id (amd/Qwen3-4B_rai_1.8.0_npu_4K)")
    p.add_argument("--revision", help="branch, tag or commit (default: main)")
    p.add_argument("--cache-dir", metavar="DIR", help="the Hugging Face cache (default: HF_HUB_CACHE)")
    p.add_argument("--json", action="store_true", help="print what info --json prints")
    p.set_defaults(func=_pull)
