"""Models by name: a folder, an embedded model, or a Hugging Face repository id.

``resolve_model("amd/Llama-3.2-1B_rai_1.8.0_npu_4K")`` returns the local folder of that
repository: from the Hugging Face cache when it is there (works offline), else downloaded
with a progress bar, LFS content included (huggingface_hub fetches file contents, never
pointers). Offline without a cached copy is a clear error. A bare AMD package name
(``Llama-3.2-1B_rai_1.8.0_npu_4K``, as people write it) is ``amd/<name>`` in the cache.

A cached repository is a folder of symlinks: huggingface_hub stores each file once under
``models--<owner>--<name>/blobs/`` and makes ``snapshots/<revision>/`` a tree of relative
links into it (:func:`cache_repository` tells such a folder; a package opened there takes its
name from the repository, not from the revision hash).
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import ModelNotFoundError
from ..models import embedded_models

__all__ = ["CacheRepository", "cache_repository", "package_name", "pull_model", "resolve_model"]

log = logging.getLogger("ryzenai_core")

_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
#: A package name as AMD publishes it, without its owner (``Qwen3-4B_rai_1.8.0_npu_4K``).
_AMD_NAME = re.compile(r"^[A-Za-z0-9][\w.-]*(?:_rai_|ryzenai[-_])\d+\.\d+[\w.-]*$", re.IGNORECASE)
#: Where AMD publishes its Ryzen AI packages on the Hugging Face Hub.
AMD_OWNER = "amd"


@dataclass(frozen=True)
class CacheRepository:
    """Where a folder sits in a Hugging Face cache.

    Attributes:
        repo_id: the repository (``amd/Llama-3.2-1B_rai_1.8.0_npu_4K``).
        root: the repository's cache folder (``models--amd--Llama-3.2-1B_rai_1.8.0_npu_4K``).
        snapshot: the snapshot folder (``root/snapshots/<revision>``).
        subfolder: the folder's path inside the snapshot (``""`` for the snapshot itself).
    """

    repo_id: str
    root: Path
    snapshot: Path
    subfolder: str

    @property
    def blobs(self) -> Path:
        """The folder the snapshot's links point into."""
        return self.root / "blobs"


def cache_repository(folder: Path) -> CacheRepository | None:
    """The cache repository ``folder`` belongs to, when it is (inside) a Hugging Face snapshot.

    Read from the path alone (``.../models--<owner>--<name>/snapshots/<revision>[/sub]``), as
    huggingface_hub lays the cache out; nothing is resolved or read.
    """
    from huggingface_hub.constants import REPO_ID_SEPARATOR

    parts = folder.parts
    for i in range(len(parts) - 2, 0, -1):
        if parts[i] == "snapshots" and parts[i - 1].startswith(f"models{REPO_ID_SEPARATOR}"):
            names = parts[i - 1].split(REPO_ID_SEPARATOR)[1:]
            if not names or not all(names):
                return None
            root = Path(*parts[:i])
            return CacheRepository("/".join(names), root, Path(*parts[: i + 2]), "/".join(parts[i + 2 :]))
    return None


def package_name(folder: Path) -> str:
    """A model folder's name in messages: the repository's for a cache snapshot, else the folder's.

    A snapshot folder is named by its revision hash; the repository name carries what a
    package's name says (``_rai_1.8.0_``). A subfolder of a snapshot is ``<repository>/<subfolder>``.
    """
    repo = cache_repository(folder)
    if repo is None:
        return folder.name
    name = repo.repo_id.rsplit("/", 1)[-1]
    return f"{name}/{repo.subfolder}" if repo.subfolder else name


def _hub_commands() -> tuple[str, str]:
    """(download command, login command) of the installed huggingface_hub's CLI.

    huggingface_hub 0.34 renamed ``huggingface-cli`` to ``hf`` (``hf download``, ``hf auth
    login``); 1.0 removed the old name.
    """
    from importlib.metadata import (  # (its import takes longer than the rest of this module)
        PackageNotFoundError,
        version,
    )

    try:
        major, minor = (int(p) for p in re.findall(r"\d+", version("huggingface_hub"))[:2])
    except (PackageNotFoundError, ValueError):
        major, minor = 1, 0
    if (major, minor) >= (0, 34):
        return "hf download", "hf auth login"
    return "huggingface-cli download", "huggingface-cli login"


def _sentence(text: str) -> str:
    """``text`` without its closing full stop, to end a sentence of our own."""
    return text.strip().rstrip(".")


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def resolve_model(
    model: str | os.PathLike[str],
    *,
    revision: str | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    offline: bool | None = None,
    missing_hint: str | None = None,
) -> Path:
    """The local folder for ``model``.

    Args:
        model: a folder, the name of an embedded model (``tiny-qa-llama``), a Hugging Face
            repository id (``amd/Qwen3-4B_rai_1.8.0_npu_4K``), or an AMD package's bare name
            (``Qwen3-4B_rai_1.8.0_npu_4K``: ``amd/<name>`` when it is in the cache).
        revision: branch, tag or commit of a repository.
        cache_dir: the Hugging Face cache (default: ``HF_HUB_CACHE`` / ``~/.cache/huggingface``).
        offline: never download (default: the ``HF_HUB_OFFLINE`` environment variable).
        missing_hint: what a missing local folder's message says after "does not exist"
            (default: an LLM package's, the folder that holds genai_config.json).

    Raises:
        ModelNotFoundError: not a folder, not embedded, and not in the cache while offline
            (or the download failed), or a bare AMD name not in the cache; the message says what to do.
    """
    path = Path(model).expanduser()
    if path.exists():
        return path
    text = str(model)
    embedded = embedded_models()
    if text in embedded:
        return embedded[text]
    local = (
        path.is_absolute()
        or text.startswith((".", "~"))
        or "\\" in text
        or (str(path.parent) not in ("", ".") and path.parent.is_dir())
    )
    if local:
        hint = missing_hint or (
            "model folder {model!r} does not exist; pass the folder that holds genai_config.json (for AMD's "
            "packages: `git clone` the model repository, then `git lfs pull` in it)"
        )
        raise ModelNotFoundError(hint.format(model=text), path=path)
    if _AMD_NAME.match(text):
        return _amd_package(text, revision, cache_dir)
    if not _REPO_ID.match(text):
        raise ModelNotFoundError(
            f"model {text!r} is neither a folder nor a Hugging Face repository id like "
            f"'amd/Llama-3.2-1B_rai_1.8.0_npu_4K'; embedded models: {', '.join(sorted(embedded))}",
            path=path,
        )
    try:
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import LocalEntryNotFoundError
    except ImportError as exc:  # pragma: no cover - a dependency
        raise ModelNotFoundError(
            f"{text!r} looks like a Hugging Face repository id; install huggingface_hub to resolve it "
            "(`pip install huggingface_hub`) or pass a local folder"
        ) from exc
    cache = str(cache_dir) if cache_dir is not None else None
    try:
        return Path(snapshot_download(text, revision=revision, cache_dir=cache, local_files_only=True))
    except LocalEntryNotFoundError:
        pass
    download = _hub_commands()[0]
    if offline if offline is not None else _offline():
        raise ModelNotFoundError(
            f"{text} is not in the Hugging Face cache ({cache or 'default cache'}) and downloads are off "
            f"(HF_HUB_OFFLINE=1 or offline=True). On a connected machine run `{download} {text}`, or unset "
            "HF_HUB_OFFLINE, or pass the model folder."
        )
    log.info("downloading %s from the Hugging Face Hub (first use only)", text)
    return _download(text, revision, cache)


def _amd_package(name: str, revision: str | None, cache_dir: str | os.PathLike[str] | None) -> Path:
    """A bare AMD package name (``Qwen3-4B_rai_1.8.0_npu_4K``): ``amd/<name>`` from the cache, never downloaded.

    Raises:
        ModelNotFoundError: it is not there; the message gives the repository id and the command that fetches it.
    """
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    repo = f"{AMD_OWNER}/{name}"
    cache = str(cache_dir) if cache_dir is not None else None
    try:
        return Path(snapshot_download(repo, revision=revision, cache_dir=cache, local_files_only=True))
    except LocalEntryNotFoundError:
        pass
    raise ModelNotFoundError(
        f"model {name!r} is not a folder here, and AMD's repository {repo} is not in the Hugging Face cache "
        f"({cache or 'default cache'}). Fetch it with `ryzenai-llm pull {repo}`, or pass model={repo!r} "
        "(downloaded on first use), or the folder that holds genai_config.json."
    )


def pull_model(
    repo_id: str,
    *,
    revision: str | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    offline: bool | None = None,
) -> Path:
    """Download a repository into the Hugging Face cache, or bring a cached copy up to date.

    Where :func:`resolve_model` takes a cached copy as it is, this asks the Hub for the
    revision's files and fetches what the cache lacks, with huggingface_hub's progress bar
    (LFS content, never pointers). Offline, a cached copy is the answer as it is.

    Args:
        repo_id: a Hugging Face repository id (``amd/Qwen3-4B_rai_1.8.0_npu_4K``).
        revision: branch, tag or commit (default: ``main``).
        cache_dir: the Hugging Face cache (default: ``HF_HUB_CACHE`` / ``~/.cache/huggingface``).
        offline: never download (default: the ``HF_HUB_OFFLINE`` environment variable).

    Raises:
        ModelNotFoundError: not a repository id, not in the cache while offline, or the
            download failed; the message says what to do.
    """
    if not _REPO_ID.match(repo_id):
        raise ModelNotFoundError(
            f"{repo_id!r} is not a Hugging Face repository id like 'amd/Llama-3.2-1B_rai_1.8.0_npu_4K'; "
            "pull fetches repositories (a local folder needs no pull)"
        )
    if offline if offline is not None else _offline():
        return resolve_model(repo_id, revision=revision, cache_dir=cache_dir, offline=True)
    return _download(repo_id, revision, str(cache_dir) if cache_dir is not None else None)


def _download(repo_id: str, revision: str | None, cache: str | None) -> Path:
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(repo_id, revision=revision, cache_dir=cache))
    except Exception as exc:  # noqa: BLE001 - network, auth, missing repository
        raise ModelNotFoundError(
            f"could not download {repo_id} from the Hugging Face Hub: {type(exc).__name__}: {_sentence(str(exc))}. "
            f"Check the repository id and your network (gated models need `{_hub_commands()[1]}`), or pass a "
            "local folder."
        ) from exc
