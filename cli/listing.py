"""``ryzenai-llm list``: the model packages on this machine, and whether each one loads here.

    ryzenai-llm list [FOLDER ...] [--cache-dir DIR] [--json]

Packages come from the Hugging Face cache (read with huggingface_hub's ``scan_cache_dir``:
one row per cached revision) and from each FOLDER given (a package folder, or a folder of
package folders). Each row says what the package is (LLM, embedding model or reranker), its
mode, Ryzen AI release and prompt limit, its size on disk, and whether it loads here: from
the files and the installed runtime's metadata, without loading anything (see
:func:`ryzenai_core.package.capabilities.load_problem`). Cached repositories that are not ONNX model
packages (PyTorch checkpoints, datasets) are counted, not listed.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from ryzenai_core.embeddings.package import EmbeddingPackage, is_embedding_folder
from ryzenai_core.errors import ModelNotFoundError, RyzenAIError
from ryzenai_core.package.capabilities import load_problem
from ryzenai_core.package.folder import ModelPackage
from ryzenai_core.rerank.package import RerankPackage

__all__ = ["Entry", "add_parser", "cached_entries", "describe_folder", "folder_entries", "package_kind"]

Kind = Literal["LLM", "embedding", "reranker"]


@dataclass(frozen=True)
class Entry:
    """One package as ``list`` shows it.

    Attributes:
        name: the repository id (cache) or the folder's name.
        kind: ``LLM``, ``embedding`` or ``reranker``.
        path: the folder.
        size: bytes on disk (a cached revision: the blobs its files point to).
        source: ``cache`` or ``folder``.
        mode: the LLM's mode (full-fusion, token-fusion, npu, hybrid, plain) or the embedding
            model's shapes (static, dynamic); None when unknown.
        release: the Ryzen AI release the package is planned for, when known.
        prompt_limit: the longest prompt (an embedding model: the longest text), when known.
        problem: why it does not load here; None when nothing stands in the way.
    """

    name: str
    kind: Kind
    path: str
    size: int
    source: Literal["cache", "folder"]
    mode: str | None = None
    release: str | None = None
    prompt_limit: int | None = None
    problem: str | None = None


def package_kind(folder: Path) -> Kind | None:
    """What kind of model package ``folder`` holds, or None when it is none of them.

    An LLM has ``genai_config.json``; a reranker is a ``*ForSequenceClassification``
    cross-encoder with an ONNX graph; an embedding model is an ONNX encoder with its tokenizer.
    """
    if (folder / "genai_config.json").is_file():
        return "LLM"
    if not is_embedding_folder(folder):
        return None
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "embedding"
    architectures = config.get("architectures") if isinstance(config, dict) else None
    if isinstance(architectures, list) and any(str(a).endswith("ForSequenceClassification") for a in architectures):
        return "reranker"
    return "embedding"


def describe_folder(
    folder: Path, *, name: str | None = None, size: int | None = None, source: Literal["cache", "folder"] = "folder"
) -> Entry | None:
    """The :class:`Entry` of a package folder, or None when it is not a model package.

    A package that cannot be read is listed with the reason as its ``problem``.
    """
    kind = package_kind(folder)
    if kind is None:
        return None
    entry = Entry(
        name=name or folder.name,
        kind=kind,
        path=str(folder),
        size=_folder_size(folder) if size is None else size,
        source=source,
    )
    try:
        if kind == "LLM":
            pkg = ModelPackage.open(folder)
            problem = load_problem(pkg)
            return _with(
                entry,
                mode=pkg.mode.value,
                release=pkg.release,
                prompt_limit=pkg.budget.max_prompt_tokens,
                problem=None if problem is None else str(problem),
            )
        if kind == "embedding":
            emb = EmbeddingPackage.open(folder)
            return _with(
                entry,
                mode="static" if emb.static_shape else "dynamic",
                prompt_limit=emb.max_length,
                problem=_missing("onnxruntime", "tokenizers"),
            )
        rerank = RerankPackage.open(folder)  # a damaged ONNX file is a ModelPackageError, listed as why
        return _with(
            entry,
            mode="static" if rerank.static_shape else "dynamic",
            prompt_limit=rerank.max_length,
            problem=_missing("onnxruntime", "tokenizers"),
        )
    except RyzenAIError as exc:
        return _with(entry, problem=str(exc))


def cached_entries(cache_dir: str | os.PathLike[str] | None = None) -> tuple[list[Entry], int, list[str]]:
    """The packages in the Hugging Face cache: ``(entries, other repositories, cache warnings)``.

    One entry per cached revision of a model repository; a repository with several
    revisions is named ``repo@ref`` (or ``repo@<commit>``) per revision. A repository the scan
    leaves out (a blob missing) is listed from its snapshots, with why it does not load.
    """
    from huggingface_hub import scan_cache_dir
    from huggingface_hub.errors import CacheNotFound

    try:
        info = scan_cache_dir(Path(cache_dir) if cache_dir is not None else None)
    except CacheNotFound:
        return [], 0, []
    entries: list[Entry] = []
    others = 0
    for repo in sorted(info.repos, key=lambda r: r.repo_id.lower()):
        found = []
        revisions = sorted(repo.revisions, key=lambda r: (not r.refs, sorted(r.refs), r.commit_hash))
        for rev in revisions:
            name = repo.repo_id
            if len(revisions) > 1:
                name += "@" + (",".join(sorted(rev.refs)) if rev.refs else rev.commit_hash[:12])
            if repo.repo_type == "model":
                entry = describe_folder(Path(rev.snapshot_path), name=name, size=rev.size_on_disk, source="cache")
                if entry is not None:
                    found.append(entry)
        entries.extend(found)
        others += not found
    root = Path(cache_dir) if cache_dir is not None else None
    entries.extend(_broken_entries(root, {r.repo_path for r in info.repos}))
    return entries, others, [str(w) for w in info.warnings]


def _broken_entries(cache_dir: Path | None, scanned: set[Path]) -> list[Entry]:
    """The model repositories the cache scan left out (a missing blob makes it drop the whole repository).

    Each snapshot that is a model package is listed, with why it does not load (the broken link
    and the ``pull`` that fetches it): a broken download does not disappear from ``list``.
    """
    from huggingface_hub.constants import HF_HUB_CACHE, REPO_ID_SEPARATOR

    root = cache_dir if cache_dir is not None else Path(HF_HUB_CACHE)
    out = []
    for repo in sorted(root.glob(f"models{REPO_ID_SEPARATOR}*")):
        if repo in scanned or not repo.is_dir():
            continue
        repo_id = "/".join(repo.name.split(REPO_ID_SEPARATOR)[1:])
        snapshots = sorted(p for p in (repo / "snapshots").glob("*") if p.is_dir())
        for snapshot in snapshots:
            name = repo_id if len(snapshots) == 1 else f"{repo_id}@{snapshot.name[:12]}"
            entry = describe_folder(snapshot, name=name, source="cache")
            if entry is not None:
                out.append(entry)
    return out


def folder_entries(folders: Iterable[str | os.PathLike[str]]) -> list[Entry]:
    """The packages in each folder: the folder itself when it is one, else the folders inside it.

    Raises:
        ModelNotFoundError: a folder does not exist.
    """
    entries: list[Entry] = []
    for given in folders:
        folder = Path(given).expanduser()
        if not folder.is_dir():
            raise ModelNotFoundError(f"{str(given)!r} is not a folder; pass folders that hold model packages")
        entry = describe_folder(folder)
        if entry is not None:
            entries.append(entry)
            continue
        for child in sorted(p for p in folder.iterdir() if p.is_dir()):
            entry = describe_folder(child)
            if entry is not None:
                entries.append(entry)
    return entries


# ---------------------------------------------------------------------- helpers
def _with(entry: Entry, **changes: Any) -> Entry:
    return Entry(**{**asdict(entry), **changes})


def _missing(*modules: str) -> str | None:
    """Why an ONNX Runtime model cannot run here: the modules it needs that are not installed."""
    absent = [m for m in modules if importlib.util.find_spec(m) is None]
    if not absent:
        return None
    return (
        f"needs {' and '.join(absent)}, which {'is' if len(absent) == 1 else 'are'} not installed: "
        "pip install 'ryzenai-llm[cpu]' (on a Ryzen AI PC, run in the Ryzen AI environment)"
    )


def _folder_size(folder: Path) -> int:
    """Bytes of the files under ``folder`` (symlinks followed, each file once)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for root, _dirs, files in os.walk(folder):
        for name in files:
            try:
                st = os.stat(os.path.join(root, name))
            except OSError:
                continue
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_size
    return total


def _size(n: int) -> str:
    """A size as people read it: ``3.3 MB``."""
    if n < 1000:
        return f"{n} B"
    value = float(n)
    for unit in ("kB", "MB", "GB"):
        value /= 1000
        if value < 1000:
            return f"{value:.1f} {unit}"
    return f"{value / 1000:.1f} TB"


def _table(entries: Sequence[Entry]) -> list[str]:
    """The rows of ``list``'s table, then the reasons a package does not load, as numbered notes."""
    notes: list[str] = []
    rows = [("NAME", "KIND", "MODE", "RELEASE", "PROMPT LIMIT", "SIZE", "LOADS HERE")]
    for e in entries:
        loads = "yes"
        if e.problem is not None:
            notes.append(e.problem)
            loads = f"no [{len(notes)}]"
        rows.append(
            (
                e.name,
                e.kind,
                e.mode or "-",
                e.release or "-",
                str(e.prompt_limit) if e.prompt_limit is not None else "-",
                _size(e.size),
                loads,
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(f"{cell:<{w}}" for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    if notes:
        lines.append("")
        lines.extend(f"[{i}] {note}" for i, note in enumerate(notes, 1))
    return lines


def _list(args: argparse.Namespace) -> int:
    entries, others, warnings = cached_entries(args.cache_dir)
    entries.extend(folder_entries(args.folders))
    if args.json:
        out = {"packages": [asdict(e) for e in entries], "other_cached_repos": others, "warnings": warnings}
        print(json.dumps(out, indent=2))
        return 0
    if entries:
        print("\n".join(_table(entries)))
    else:
        print("no model packages found (fetch one with `ryzenai-llm pull REPO_ID`, or pass the folders that hold them)")
    if others:
        what = "repository is not an ONNX model package" if others == 1 else "repositories are not ONNX model packages"
        print(f"\n{others} other cached {what}")
    for warning in warnings:
        print(f"warning: {warning}")
    return 0


def add_parser(sub: Any) -> None:
    """Register ``list`` on the CLI's subparsers."""
    p = sub.add_parser(
        "list", help="model packages in the Hugging Face cache and in given folders, and whether each loads here"
    )
    p.add_argument("folders", nargs="*", metavar="FOLDER", help="a package folder, or a folder of package folders")
    p.add_argument("--cache-dir", metavar="DIR", help="the Hugging Face cache (default: HF_HUB_CACHE)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_list)
