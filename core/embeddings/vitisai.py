"""How an encoder session is compiled on the NPU: the VitisAI provider options, built in one place.

onnxruntime's VitisAI execution provider compiles a graph for the NPU when a session is created
(BF16: minutes per static shape) and keeps the result under ``<cache_dir>/<cache_key>/``; a
later session with the same key loads it in seconds. :func:`vitisai_options` builds the options
an encoder session gets:

- ``config_file``: the compile configuration. The default is the one AMD's transformer examples
  pass (RyzenAI-SW ``LLM-examples/RAG-OGA/custom_embedding/vaiml_config.json`` and
  ``Transformer-examples/DistilBERT_text_classification_bf16/vitisai_config.json``: the ``init``
  and ``vaiml_partition`` passes, target ``VAIML``, ``preferred_data_storage: unvectorized``,
  which AMD's docs name the layout for transformers), shipped with this package
  (:func:`shipped_config_file`); a user may pass their own file.
- ``cache_dir``: a writable per-user folder (:func:`default_cache_root`: platformdirs'
  ``user_cache_path("ryzenai-llm")``, ``~/.cache/ryzenai-llm`` on Linux, honouring
  ``XDG_CACHE_HOME``; ``%LOCALAPPDATA%/ryzenai-llm/Cache`` on Windows), then ``vitisai``.
  AMD's default for BF16 is the folder the program runs in.
- ``cache_key``: one per model file, static shape and runtime release (:func:`cache_key`).
  AMD's docs: a cache must not be reused across VitisAI EP or NPU driver versions; a new
  release gets a new key, and so a new compile.

The AMD option names in older examples (``cacheDir``, ``cacheKey``, ``encryptionKey``) are
taken and renamed. Nothing here imports onnxruntime: the engine passes its version in.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import logging
import os
import re
from collections.abc import Mapping
from importlib import resources
from pathlib import Path

from ..errors import ConfigError, InvalidRequestError

__all__ = [
    "EP_DISTRIBUTIONS",
    "LEGACY_OPTION_NAMES",
    "SHIPPED_CONFIG",
    "cache_key",
    "compile_config",
    "default_cache_root",
    "release_tag",
    "shipped_config_file",
    "vitisai_options",
]

log = logging.getLogger("ryzenai_core")

#: The compile configuration shipped with the package (a resource of ``ryzenai_core.embeddings``).
SHIPPED_CONFIG = "vaiml_config.json"

#: Option names in AMD's older examples and docs, and the names the 1.8 docs use.
LEGACY_OPTION_NAMES: dict[str, str] = {
    "cacheDir": "cache_dir",
    "cacheKey": "cache_key",
    "encryptionKey": "encryption_key",
}

#: Distributions whose versions say which VitisAI EP compiled a cache (those installed count).
EP_DISTRIBUTIONS: tuple[str, ...] = ("onnxruntime-vitisai", "onnxruntime-providers-ryzenai", "voe", "ryzen-ai-lt")

_KEY_SLUG = re.compile(r"[^a-z0-9._-]+")
_SLUG_LENGTH = 32


def shipped_config_file() -> Path:
    """The path of the compile configuration shipped with the package (AMD's transformer configuration).

    Raises:
        ConfigError: the package was installed without it (a broken install: reinstall ryzenai-llm).
    """
    resource = resources.files("ryzenai_core.embeddings") / SHIPPED_CONFIG
    path = Path(str(resource))
    if not path.is_file():
        raise ConfigError(
            f"the compile configuration {SHIPPED_CONFIG} is missing from the installed package ({path}); "
            "reinstall ryzenai-llm, or pass your own with provider_options={'config_file': PATH}",
            path=path,
        )
    return path


def default_cache_root() -> Path:
    """The per-user cache folder of ryzenai-llm (platformdirs' ``user_cache_path``, created on use, not here)."""
    from platformdirs import user_cache_path

    return Path(user_cache_path("ryzenai-llm", appauthor=False))


def release_tag(ort_version: str, *, driver_version: str | None = None) -> str:
    """What identifies the compiler of a cache: onnxruntime's version, the EP distributions', the NPU driver's.

    Args:
        ort_version: ``onnxruntime.__version__`` of the process that compiles.
        driver_version: the NPU driver's version, where it is known.

    Returns:
        e.g. ``ort1.27.0 onnxruntime-vitisai=1.27.0 drv32.0.203.280``: the installed
        :data:`EP_DISTRIBUTIONS` in their order, absent ones left out.
    """
    parts = [f"ort{ort_version}"]
    for dist in EP_DISTRIBUTIONS:
        try:
            parts.append(f"{dist}={importlib.metadata.version(dist)}")
        except importlib.metadata.PackageNotFoundError:
            continue
    if driver_version:
        parts.append(f"drv{driver_version}")
    return " ".join(parts)


def _slug(name: str) -> str:
    slug = _KEY_SLUG.sub("-", name.lower()).strip("-._")
    return slug[:_SLUG_LENGTH].rstrip("-._") or "model"


def cache_key(model_name: str, model_digest: str, shape: tuple[int, int], release: str, config_digest: str) -> str:
    """The VitisAI cache key of one static shape of one model file under one release and configuration.

    Readable where it can be (the model's name, the shape) and short, since the cache's own files
    nest under it and Windows paths stay under 260 characters: ``<name>-<rows>x<seq>-<hash>``,
    the hash over the model file's digest, the shape, the release and the configuration's
    digest, so that any of them changing gives a new key.

    Raises:
        InvalidRequestError: a shape that is not two positive sizes.
    """
    rows, seq = shape
    if rows < 1 or seq < 1:
        raise InvalidRequestError(f"a static shape has positive sizes; got {list(shape)}")
    h = hashlib.sha256("\n".join((model_digest, f"{rows}x{seq}", release, config_digest)).encode("utf-8"))
    return f"{_slug(model_name)}-{rows}x{seq}-{h.hexdigest()[:12]}"


def _config_digest(path: Path) -> str:
    """The SHA-256 of a compile configuration, after checking that it is a JSON object."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(
            f"the VitisAI compile configuration {path} cannot be read ({exc}); pass an existing JSON file as "
            "provider_options={'config_file': PATH}, or leave config_file out for the shipped one",
            path=path,
        ) from exc
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise ConfigError(f"the VitisAI compile configuration {path} is not JSON: {exc}", path=path) from exc
    if not isinstance(data, dict):
        raise ConfigError(
            f"the VitisAI compile configuration {path} holds a {type(data).__name__}, not a JSON object "
            '({"passes": [...], "target": "VAIML", ...} as AMD documents it)',
            path=path,
        )
    return hashlib.sha256(raw).hexdigest()


def compile_config(overrides: Mapping[str, object] | None = None) -> Path:
    """The compile configuration a session gets: the user's ``config_file``, else the shipped one; checked.

    Raises:
        ConfigError: the file cannot be read or is not a JSON object (or the shipped one is missing).
    """
    given = (overrides or {}).get("config_file")
    path = Path(str(given)).expanduser() if given is not None else shipped_config_file()
    _config_digest(path)
    return path


def vitisai_options(
    *,
    model_name: str,
    model_digest: str,
    shape: tuple[int, int],
    ort_version: str,
    driver_version: str | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    overrides: Mapping[str, object] | None = None,
) -> dict[str, str]:
    """The VitisAI provider options of one static shape of an encoder.

    Args:
        model_name: the model's name (the folder's, or the repository's for a cache snapshot).
        model_digest: the SHA-256 of the ONNX file the engine compiles (before its shape is fixed).
        shape: the static ``(rows, sequence)`` shape.
        ort_version: ``onnxruntime.__version__`` (see :func:`release_tag`).
        driver_version: the NPU driver's version, where known.
        cache_dir: the folder that holds the VitisAI caches (default: ``vitisai`` in
            :func:`default_cache_root`).
        overrides: the user's options, over these; ``config_file`` names the user's own
            configuration (its content keys the cache as the shipped one's does); a given
            ``cache_key`` is used as it is, for every shape. Older names (``cacheKey``...) are
            renamed (:data:`LEGACY_OPTION_NAMES`).

    Returns:
        ``config_file``, ``cache_dir`` and ``cache_key``, and the user's other options, as strings.

    Raises:
        ConfigError: the configuration file cannot be read or is not a JSON object.
        InvalidRequestError: an option given under both its old and its new name, or a bad shape.
    """
    given: dict[str, str] = {}
    for name, value in (overrides or {}).items():
        new = LEGACY_OPTION_NAMES.get(name, name)
        if new != name:
            if new in (overrides or {}):
                raise InvalidRequestError(
                    f"provider_options gives both {name!r} and {new!r}; {name!r} is the older name of {new!r}: keep one"
                )
            log.info("VitisAI option %r is the older name of %r; passing it as %r", name, new, new)
        given[new] = value if isinstance(value, str) else str(value)

    config = Path(given["config_file"]).expanduser() if "config_file" in given else shipped_config_file()
    root = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_root() / "vitisai"
    options = {
        "config_file": str(config),
        "cache_dir": str(root),
        "cache_key": cache_key(
            model_name,
            model_digest,
            shape,
            release_tag(ort_version, driver_version=driver_version),
            _config_digest(config),
        ),
    }
    options.update(given)
    options["config_file"] = str(config)
    return options
