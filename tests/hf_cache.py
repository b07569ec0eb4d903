"""A Hugging Face cache filled the way huggingface_hub's downloads fill it (for tests, no network).

Each file is stored once under ``models--<owner>--<name>/blobs/<etag>`` (the SHA-256 of an LFS
file, the git blob hash of a small one), ``snapshots/<revision>/`` holds relative links into
``../../blobs/`` made by huggingface_hub's own link function, and ``refs/main`` names the
revision. ``snapshot_download(..., local_files_only=True)`` then finds it as it finds a real one.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from huggingface_hub.file_download import (
    _cache_commit_hash_for_specific_revision,
    _create_symlink,
    _get_pointer_path,
    repo_folder_name,
)
from huggingface_hub.utils.sha import git_hash

COMMIT = "0123456789abcdef0123456789abcdef01234567"

# What AMD's and sentence-transformers' repositories keep in Git LFS (their .gitattributes).
_LFS_SUFFIXES = {".onnx", ".data", ".bin", ".fconst", ".state", ".meta", ".ctrlpkt", ".super", ".zip", ".safetensors"}


def cache_repository(cache: Path, repo_id: str, source: Path, *, revision: str = COMMIT, ref: str = "main") -> Path:
    """Put the files of ``source`` into ``cache`` as repository ``repo_id``; returns the snapshot folder.

    ``refs/<ref>`` (a branch or tag) names the snapshot's commit ``revision``.
    """
    storage = cache / repo_folder_name(repo_id=repo_id, repo_type="model")
    for file in sorted(p for p in source.rglob("*") if p.is_file()):
        relative = file.relative_to(source).as_posix()
        data = file.read_bytes()
        lfs = file.suffix in _LFS_SUFFIXES or len(data) > 10 * 1024 * 1024
        etag = hashlib.sha256(data).hexdigest() if lfs else git_hash(data)
        blob = storage / "blobs" / etag
        if not blob.exists():
            blob.parent.mkdir(parents=True, exist_ok=True)
            blob.write_bytes(data)
        pointer = Path(_get_pointer_path(str(storage), revision, relative))
        pointer.parent.mkdir(parents=True, exist_ok=True)
        _create_symlink(str(blob), str(pointer), new_blob=False)
    _cache_commit_hash_for_specific_revision(str(storage), ref, revision)
    return storage / "snapshots" / revision
