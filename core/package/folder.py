"""A model folder, read once: what it is, what it needs, and what it can hold.

:meth:`ModelPackage.open` reads ``genai_config.json`` (every layout AMD has shipped: plain
builder output, 1.3-1.6 ``config_entries``/``custom_ops_library``, 1.4 ``VitisAI``, 1.7/1.8
``provider_options[0].RyzenAI``), ``rai_config.json``, the tokenizer files and chat
template source, and the ``dd_metastate_*`` bucket file names. It never loads weights and
never imports onnxruntime-genai.

Any ``model.type`` is accepted: the installed runtime decides what it runs (its refusal
becomes :class:`~ryzenai_core.errors.UnsupportedModelError` at load time). A folder inside a
Hugging Face cache snapshot may be a tree of links into the repository's ``blobs/``; its name
comes from the repository (:func:`~ryzenai_core.package.hub.package_name`).
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from functools import cached_property
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any

from ..errors import (
    ConfigError,
    LfsPointerError,
    MissingTokenizerError,
    ModelNotFoundError,
    ModelPackageError,
    UnsafePathError,
)
from ..generation.kv_cache import kv_reuse_policy
from .budget import DEFAULT_DECODE_BUCKETS, DEFAULT_PREFILL_BUCKETS, ContextBudget
from .hub import cache_repository, package_name
from .runtime import ENV_RELEASE, env_release, parse_release, runtime_info

__all__ = ["Mode", "ModelPackage", "path_hazards"]

#: Prompt tokens one image costs, per ``model.type``: onnxruntime-genai's Gemma 3 processor
#: expands each ``<start_of_image>`` into 256 ``<image_soft_token>`` tokens (plus the
#: ``<end_of_image>`` marker and the newlines around them).
IMAGE_TOKENS = {"gemma3": 256}

_LFS_HEADER = b"version https://git-lfs.github.com/spec/v1"
_LFS_MAX_BYTES = 1024
_PREFILL_RE = re.compile(
    r"^dd_metastate_Llm_Prefill_(?P<node>.+?)_sequence_length_padded_(?P<n>\d+)_?\.(meta|ctrlpkt|super)$"
)
_DECODE_RE = re.compile(
    r"^dd_metastate_Llm_Token_Token_(?P<node>.+?)_attention_mask_padded_(?P<n>\d+)_?\.(meta|ctrlpkt|super)$"
)
_VISION_RE = re.compile(r"^dd_metastate_Llm_Vision_")
_RELEASE_IN_NAME = re.compile(r"(?:_rai_|ryzenai[-_])(\d+\.\d+(?:\.\d+)?)(?=[_\-.]|$)", re.IGNORECASE)
_RYZENAI_ENTRY_KEYS = ("hybrid_opt_token_backend", "hybrid_opt_max_seq_length", "max_length_for_kv_cache")
#: The fused phases of an NPU package, as its ``dd_metastate_Llm_<phase>_...`` file names say.
_PHASES = ("Prefill", "Token_Token")

#: The longest path (without the closing NUL) that Windows file APIs take from code that does
#: not opt in to long paths (MAX_PATH is 260 with the NUL).
MAX_NARROW_PATH = 259
#: Whether model paths reach native code as narrow (ANSI code page) strings with MAX_PATH:
#: AMD's native loader on Windows. Linux passes bytes and has no such limit.
NARROW_PATHS = sys.platform == "win32"


class Mode(str, Enum):
    """How a package runs on Ryzen AI hardware."""

    FULL_FUSION = "full-fusion"
    """Prefill and decode bucket files both present: the whole model on the NPU."""
    TOKEN_FUSION = "token-fusion"
    """Decode bucket files only: long context, prompt prefilled in windows."""
    NPU = "npu"
    """Decode on the NPU but no bucket files (older NPU-only layouts)."""
    HYBRID = "hybrid"
    """Ryzen AI options with decode on the GPU (token backend ``gpu`` or not set)."""
    PLAIN = "plain"
    """No Ryzen AI options: a plain ONNX model (CPU, CUDA, DirectML)."""

    def __str__(self) -> str:
        return self.value


def read_json(path: Path, what: str) -> Any:
    """A JSON file of a model folder (``what`` names it in messages); a Git LFS pointer or bad JSON is an error."""
    if is_lfs_pointer(path):
        raise LfsPointerError(
            f"{path.name} is a Git LFS pointer ({path.stat().st_size} bytes), not the {what}: "
            f"run `git lfs pull` in {path.parent}",
            path=path,
        )
    try:
        return json.loads(path.read_text(encoding="utf-8-sig"))
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path} is not UTF-8 text ({exc}); restore the {what} from the package", path=path) from exc
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"{path} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}); "
            f"restore the {what} from the original package",
            path=path,
        ) from exc


def is_lfs_pointer(path: Path) -> bool:
    """True for a small file that holds a Git LFS pointer instead of its content."""
    try:
        if path.stat().st_size > _LFS_MAX_BYTES:
            return False
        with path.open("rb") as f:
            return f.read(len(_LFS_HEADER)) == _LFS_HEADER
    except OSError:
        return False


def _as_int(value: Any, where: str, path: Path) -> int:
    try:
        n = int(str(value).strip())
    except (TypeError, ValueError):
        raise ConfigError(
            f"{where} in {path.name} is {value!r}, not a whole number; fix the value", path=path
        ) from None
    if n <= 0:
        raise ConfigError(f"{where} in {path.name} is {n}; it must be a positive number of tokens", path=path)
    return n


@dataclass(frozen=True)
class ModelPackage:
    """What a model folder holds, read once without loading weights.

    Create with :meth:`open`. All paths are inside :attr:`path`.
    """

    path: Path
    name: str
    model_type: str
    config: Mapping[str, Any]
    decoder_file: Path
    external_files: tuple[Path, ...]
    provider: str
    provider_options: Mapping[str, str]
    layout: str
    token_backend: str | None
    prefill_buckets_found: tuple[int, ...]
    decode_buckets_found: tuple[int, ...]
    bucket_node: str | None
    rai_config: Mapping[str, Any] | None
    release: str | None
    release_source: str
    tokenizer_files: tuple[Path, ...]
    chat_template_source: str | None
    chat_template_file: Path | None
    tokenizer_config: Mapping[str, Any]
    vision_files: tuple[Path, ...]
    lfs_pointers: tuple[str, ...]
    eos_token_ids: tuple[int, ...]
    search: Mapping[str, Any] = field(default_factory=dict)
    missing_files: tuple[str, ...] = ()
    """NPU files the package's own file names imply but that are not there (a partial download):
    ``cache/`` with its fused-operator blueprints, the unbucketed ``dd_metastate_*.state``."""
    longest_file: str | None = None
    """The package's longest file path, relative to :attr:`path` (for :attr:`path_warnings`)."""

    # ------------------------------------------------------------------ opening
    @classmethod
    def open(cls, path: str | os.PathLike[str], *, release: str | None = None) -> ModelPackage:
        """Read a model folder.

        Args:
            path: the package folder (the one holding ``genai_config.json``).
            release: the Ryzen AI release to plan for, overriding the folder name and the
                installed runtime (the ``RYZENAI_VERSION`` environment variable overrides
                all three).

        Raises:
            ModelNotFoundError: no such folder.
            ConfigError: genai_config.json is missing or malformed.
            UnsafePathError: a config names a file outside the folder.
            MissingTokenizerError: no tokenizer file.
        """
        folder = Path(path).expanduser()
        if not folder.exists():
            raise ModelNotFoundError(
                f"model folder {str(folder)!r} does not exist; pass the folder that holds "
                "genai_config.json (for AMD's packages: `git clone` the model repository, then "
                "`git lfs pull` in it)",
                path=folder,
            )
        if not folder.is_dir():
            raise ModelNotFoundError(
                f"{str(folder)!r} is a file, not a model folder; pass the folder that holds genai_config.json",
                path=folder,
            )
        folder = folder.resolve()
        repo = cache_repository(folder)
        linked = repo.blobs if repo is not None else None  # where a snapshot's links point
        cfg_path = folder / "genai_config.json"
        if not cfg_path.is_file():
            hint = ""
            nested = sorted(p.parent.name for p in folder.glob("*/genai_config.json"))
            if nested:
                hint = f" It is in the subfolder(s) {', '.join(nested)}: pass that folder instead."
            raise ConfigError(
                f"{folder} has no genai_config.json, so it is not an onnxruntime-genai model package.{hint}",
                path=cfg_path,
            )
        config = read_json(cfg_path, "model configuration")
        if not isinstance(config, dict) or not isinstance(config.get("model"), dict):
            raise ConfigError(
                f'{cfg_path} has no "model" object; restore genai_config.json from the package', path=cfg_path
            )
        model = config["model"]
        model_type = model.get("type")
        if not isinstance(model_type, str) or not model_type:
            raise ConfigError(
                f"{cfg_path} has no model.type; restore genai_config.json from the package", path=cfg_path
            )
        decoder = model.get("decoder")
        if not isinstance(decoder, dict):
            raise ConfigError(f"{cfg_path} has no model.decoder object; restore genai_config.json", path=cfg_path)
        filename = decoder.get("filename")
        if not isinstance(filename, str) or not filename:
            raise ConfigError(f"model.decoder.filename is missing in {cfg_path}", path=cfg_path)
        decoder_file = _inside(folder, filename, "model.decoder.filename", cfg_path, linked)

        session = decoder.get("session_options") or {}
        if not isinstance(session, dict):
            raise ConfigError(f"model.decoder.session_options in {cfg_path} is not an object", path=cfg_path)
        provider, options, layout = _provider(session, cfg_path)
        external: list[Path] = []
        for key in ("external_data_file",):
            for source in (session, options):
                value = source.get(key)
                if isinstance(value, str) and value:
                    external.append(_inside(folder, value, key, cfg_path, linked))
        if isinstance(options.get("config_file"), str):
            external.append(_inside(folder, options["config_file"], "config_file", cfg_path, linked))
        lib = session.get("custom_ops_library")
        if isinstance(lib, str) and lib:
            _check_relative(lib, "custom_ops_library", cfg_path)

        vision: list[Path] = []
        for part in ("embedding", "vision", "speech"):
            sub = model.get(part)
            if isinstance(sub, dict):
                for key in ("filename", "config_filename"):
                    if isinstance(sub.get(key), str):
                        vision.append(_inside(folder, sub[key], f"model.{part}.{key}", cfg_path, linked))

        prefill, decode, nodes, vision_states = _scan_buckets(folder)
        vision.extend(vision_states)
        files = _walk(folder, depth=3)
        lfs = _scan_lfs(folder, files)

        token_backend = options.get("hybrid_opt_token_backend")
        rai_path = folder / "rai_config.json"
        rai = read_json(rai_path, "Ryzen AI prompt limits") if rai_path.is_file() else None
        if rai is not None and not isinstance(rai, dict):
            raise ConfigError(f"{rai_path} is not a JSON object; restore rai_config.json", path=rai_path)

        name = package_name(folder)
        rel, rel_source = _release(name, "repository name" if repo is not None else "folder name", release)
        tok_files, tok_cfg, template, template_file = _tokenizer(folder, lfs)

        eos = model.get("eos_token_id")
        eos_ids = tuple(eos) if isinstance(eos, list) else ((eos,) if isinstance(eos, int) else ())
        search: dict[str, Any] = config["search"] if isinstance(config.get("search"), dict) else {}
        return cls(
            path=folder,
            name=name,
            model_type=model_type,
            config=config,
            decoder_file=decoder_file,
            external_files=tuple(dict.fromkeys(external)),
            provider=provider,
            provider_options=options,
            layout=layout,
            token_backend=token_backend,
            prefill_buckets_found=prefill,
            decode_buckets_found=decode,
            bucket_node=next(iter(nodes.values()), None),
            rai_config=rai,
            release=rel,
            release_source=rel_source,
            tokenizer_files=tok_files,
            chat_template_source=template,
            chat_template_file=template_file,
            tokenizer_config=tok_cfg,
            vision_files=tuple(vision),
            lfs_pointers=tuple(lfs),
            eos_token_ids=tuple(int(i) for i in eos_ids),
            search=search,
            missing_files=_missing_npu_files(folder, nodes, files),
            longest_file=max((p.relative_to(folder).as_posix() for p in files), key=len, default=None),
        )

    # ------------------------------------------------------------------ facts
    @property
    def is_ryzenai(self) -> bool:
        """True when the package needs the Ryzen AI runtime (not plain ONNX)."""
        return self.layout != "plain"

    @property
    def mode(self) -> Mode:
        """Full fusion, token fusion, NPU, hybrid or plain (see :class:`Mode`)."""
        if not self.is_ryzenai:
            return Mode.PLAIN
        if self.prefill_buckets_found and self.decode_buckets_found:
            return Mode.FULL_FUSION
        if self.decode_buckets_found:
            return Mode.TOKEN_FUSION
        if self.token_backend == "npu" or self.layout == "vitisai":
            return Mode.NPU
        return Mode.HYBRID

    @property
    def built_for(self) -> str | None:
        """The Ryzen AI release the package was built for, as its name says (``_rai_1.8.0_``)."""
        m = _RELEASE_IN_NAME.search(self.name)
        return m.group(1) if m else None

    @property
    def has_vision(self) -> bool:
        """True for multimodal packages (Gemma 3 style embedding + vision parts)."""
        return bool(self.vision_files)

    @property
    def sliding_window(self) -> int | None:
        """The decoder's sliding attention window (``decoder.sliding_window.window_size``), if any."""
        section = self.config["model"].get("decoder", {}).get("sliding_window")
        size = section.get("window_size") if isinstance(section, dict) else None
        return int(size) if isinstance(size, int) else None

    @property
    def vision_parts(self) -> dict[str, Any] | None:
        """The multimodal files by role, or None for a text-only package.

        ``vision`` and ``embedding`` are the ONNX models named in genai_config.json,
        ``processor`` the image pipeline (``model.vision.config_filename``) and
        ``npu_states`` the ``dd_metastate_Llm_Vision_*`` files of the NPU-compiled vision model.
        """
        if not self.has_vision:
            return None
        model = self.config["model"]

        def named(part: str, key: str) -> str | None:
            sub = model.get(part)
            value = sub.get(key) if isinstance(sub, dict) else None
            return value if isinstance(value, str) else None

        return {
            "vision": named("vision", "filename"),
            "embedding": named("embedding", "filename"),
            "processor": named("vision", "config_filename"),
            "npu_states": [
                p.relative_to(self.path).as_posix() for p in self.vision_files if _VISION_RE.match(p.name)
            ],
        }

    @property
    def image_tokens(self) -> int | None:
        """Prompt tokens one image costs (256 on Gemma 3), or None when unknown or text-only."""
        if not self.has_vision:
            return None
        return IMAGE_TOKENS.get(self.model_type)

    @property
    def context_length(self) -> int | None:
        """``model.context_length`` as written in genai_config.json."""
        value = self.config["model"].get("context_length")
        return int(value) if isinstance(value, int) else None

    @property
    def rai_prompt_limits(self) -> dict[str, int]:
        """``max_prompt_length`` per Ryzen AI release from rai_config.json."""
        if not self.rai_config:
            return {}
        table = self.rai_config.get("max_prompt_length", {})
        if not isinstance(table, dict):
            return {}
        return {str(k): int(v) for k, v in table.items() if isinstance(v, (int, str)) and str(v).strip().isdigit()}

    def required_files(self) -> list[Path]:
        """Files that must hold real content to load the model."""
        files = [self.decoder_file, *self.external_files, *self.tokenizer_files]
        data = self.decoder_file.with_name(self.decoder_file.name + ".data")
        if data.exists():
            files.append(data)
        return files

    def check_loadable(self) -> None:
        """Raise a :class:`ModelPackageError` if a file needed to load is missing or a pointer.

        Raises:
            LfsPointerError: a needed file is a Git LFS pointer.
            ModelPackageError: a needed file is missing.
        """
        files = self.required_files()
        for f in files:
            if not f.exists():
                raise ConfigError(
                    f"{f.name} is named in genai_config.json but missing from {self.path}; "
                    "download the complete package",
                    path=f,
                )
        pointers = [f for f in files if is_lfs_pointer(f)]
        if len(pointers) == 1:
            f = pointers[0]
            raise LfsPointerError(
                f"{f.name} is a Git LFS pointer ({f.stat().st_size} bytes), not the real file: "
                f"run `git lfs pull` in {self.path}",
                path=f,
            )
        if pointers:
            names = ", ".join(f"{f.name} ({f.stat().st_size} bytes)" for f in pointers)
            raise LfsPointerError(
                f"{names} are Git LFS pointers, not the real files: run `git lfs pull` in {self.path}",
                path=pointers[0],
            )

    def check_npu_files(self) -> list[str]:
        """Check the files AMD's native loader reads before it runs the package on the NPU.

        ``cache/`` (the fused-operator blueprints) missing makes the loader fail deep in
        native code: that raises. A missing unbucketed ``dd_metastate_*.state`` is compiled by
        the loader at load time and written into the package folder: slow, and it needs a
        writable folder. That is returned as a warning, or raises when the folder is read-only.

        Returns:
            Warnings for the caller to log (empty when the package is complete).

        Raises:
            ModelPackageError: ``cache/`` or a blueprint is missing, or a state file is missing
                and the folder is not writable.
        """
        cache = [m for m in self.missing_files if m.startswith(("cache/", ".cache/"))]
        if cache:
            raise ModelPackageError(
                f"{self.name} is incomplete: {', '.join(cache)} is missing from {self.path}, and AMD's loader "
                "needs it to run the fused NPU graph (the download stopped early, or the folder was copied "
                "without it). Download the package again (`git lfs pull` in a clone; for a Hugging Face cache, "
                "download the repository again).",
                path=self.path / cache[0],
            )
        states = [m for m in self.missing_files if m.endswith(".state")]
        if not states:
            return []
        if not os.access(self.path, os.W_OK):
            raise ModelPackageError(
                f"{self.name} is incomplete: {', '.join(states)} is missing from {self.path}, which is read-only, "
                "so AMD's loader cannot compile it there at load time. Download the package again, or copy it "
                "to a writable folder.",
                path=self.path / states[0],
            )
        return [
            f"{self.name} is incomplete: {', '.join(states)} is missing from {self.path}; AMD's loader compiles "
            "it at load time and writes it into the package folder (the first load takes much longer). "
            "Download the package again to avoid that."
        ]

    @property
    def path_warnings(self) -> list[str]:
        """Path hazards of this package for AMD's native loader (see :func:`path_hazards`)."""
        return path_hazards(str(self.path), self.longest_file, windows=NARROW_PATHS)

    # ------------------------------------------------------------------ budget
    @cached_property
    def budget(self) -> ContextBudget:
        """The package's :class:`~ryzenai_core.package.budget.ContextBudget` for :attr:`release`."""
        cfg_path = self.path / "genai_config.json"
        model = self.config["model"]
        candidates: list[int] = []
        if "context_length" in model:
            candidates.append(_as_int(model["context_length"], "model.context_length", cfg_path))
        if "max_length" in self.search:
            candidates.append(_as_int(self.search["max_length"], "search.max_length", cfg_path))
        kv = self.provider_options.get("max_length_for_kv_cache")
        if kv is not None:
            candidates.append(_as_int(kv, "max_length_for_kv_cache", cfg_path))
        if not candidates:
            raise ConfigError(
                f"{cfg_path} sets neither model.context_length nor search.max_length; add one", path=cfg_path
            )
        window = min(candidates)
        seq = self.provider_options.get("hybrid_opt_max_seq_length")
        prefill_window = _as_int(seq, "hybrid_opt_max_seq_length", cfg_path) if seq is not None else None

        limit, source = window, "window"
        limits = self.rai_prompt_limits
        if limits:
            key = _limit_key(limits, self.release)
            limit = min(limits[key], window)
            source = (
                f"rai_config.json max_prompt_length[{key!r}] for release {self.release}"
                if self.release
                else f"rai_config.json max_prompt_length[{key!r}], the smallest entry, since the "
                f"Ryzen AI release is unknown (set {ENV_RELEASE} to choose)"
            )

        feed = image_limit = None
        long_prompts = "one run"
        if prefill_window is not None and prefill_window < limit:
            if self.runtime_chunks_prefill:
                long_prompts = "runtime chunks"
            elif self.sliding_window is not None:
                # Fed in windows, the prefill would be split past the declared sliding window,
                # which is not exact (the window-sized KV cache has evicted what a one-run
                # prefill still attends to): such a package takes one run's prompt.
                limit, long_prompts = prefill_window, "capped"
                source = (
                    f"hybrid_opt_max_seq_length {prefill_window}: one prefill run, since the decoder's "
                    f"{self.sliding_window}-token sliding window makes a prefill split into runs inexact"
                )
            else:
                feed = image_limit = prefill_window
                long_prompts = "windows"

        prefill: tuple[int, ...] = self.prefill_buckets_found
        decode: tuple[int, ...] = self.decode_buckets_found
        if self.mode in (Mode.FULL_FUSION, Mode.TOKEN_FUSION, Mode.NPU):
            cap = prefill_window or window
            if not prefill:
                prefill = tuple(b for b in DEFAULT_PREFILL_BUCKETS if b <= cap) or (cap,)
            if not decode:
                decode = tuple(b for b in DEFAULT_DECODE_BUCKETS if b <= window) or (window,)
        elif self.mode is Mode.HYBRID and prefill:
            decode = ()
        return ContextBudget(
            window=window,
            prompt_limit=limit,
            prefill_window=prefill_window,
            prefill_buckets=prefill,
            decode_buckets=decode,
            prompt_limit_source=source,
            feed_window=feed,
            image_prompt_limit=image_limit,
            long_prompts=long_prompts,
        )

    @property
    def runtime_chunks_prefill(self) -> bool:
        """Whether onnxruntime-genai splits a long prefill by itself (``search.chunk_size``).

        It does so only for text-only model types; a multimodal type (Gemma 3) runs every
        prompt through its multimodal pipeline, which never chunks.
        """
        return "chunk_size" in self.search and not self.has_vision

    @property
    def long_prompts(self) -> dict[str, Any]:
        """How a prompt longer than one prefill run reaches the runtime (``ryzenai-llm info``).

        ``policy`` is ``one run`` (no run length, or runs as long as the prompt limit),
        ``runtime chunks`` (the runtime splits it, ``search.chunk_size``), ``windows`` (the
        engine feeds text prompts in runs of at most ``run_length`` tokens and limits prompts
        with images to one run) or ``capped`` (the prompt limit is one run: the decoder's
        sliding window makes a split prefill inexact).
        """
        b = self.budget
        run = b.prefill_window
        details = {
            "one run": "the whole prompt is prefilled in one run",
            "runtime chunks": f"the runtime prefills in chunks of {self.search.get('chunk_size')} tokens",
            "windows": (
                f"text prompts are fed in runs of at most {run} tokens (hybrid_opt_max_seq_length; the runtime "
                f"does not split {self.model_type!r} prompts itself); a prompt with images is one run, so at "
                f"most {b.image_prompt_limit} tokens"
            ),
            "capped": f"prompts are limited to one prefill run of {run} tokens ({b.prompt_limit_source})",
        }
        policy, detail = b.long_prompts, details[b.long_prompts]
        return {"policy": policy, "run_length": run, "detail": detail}

    def describe(self) -> dict[str, Any]:
        """The JSON-ready summary used by ``ryzenai-llm info --json``."""
        b = self.budget
        return {
            "name": self.name,
            "path": str(self.path),
            "model_type": self.model_type,
            "mode": self.mode.value,
            "release": self.release,
            "release_source": self.release_source,
            "built_for": self.built_for,
            "provider": self.provider,
            "layout": self.layout,
            "token_backend": self.token_backend,
            "vision": self.has_vision,
            "vision_parts": self.vision_parts,
            "image_tokens": self.image_tokens,
            "lfs_pointers": list(self.lfs_pointers),
            "missing_files": list(self.missing_files),
            "path_warnings": self.path_warnings,
            "chat_template": (
                str(self.chat_template_file.name)
                if self.chat_template_file
                else ("tokenizer_config.json" if self.chat_template_source else None)
            ),
            "budget": {
                "prompt_limit": b.prompt_limit,
                "prompt_limit_source": b.prompt_limit_source,
                "window": b.window,
                "prefill_window": b.prefill_window,
                "prefill_buckets": list(b.prefill_buckets),
                "decode_buckets": list(b.decode_buckets),
                "feed_window": b.feed_window,
                "image_prompt_limit": b.image_prompt_limit,
            },
            "sliding_window": self.sliding_window,
            "long_prompts": self.long_prompts,
            "kv_reuse": kv_reuse_policy(self),
        }


# ---------------------------------------------------------------------- helpers
def _check_relative(value: str, where: str, cfg_path: Path) -> None:
    for pure in (PurePosixPath(value), PureWindowsPath(value)):
        if pure.is_absolute() or pure.drive or ".." in pure.parts:
            raise UnsafePathError(
                f"{where} in {cfg_path.name} is {value!r}, which points outside the model folder "
                f"{cfg_path.parent}; a package may only name files inside its own folder. Fix the "
                "config or re-download the package.",
                path=cfg_path,
            )


def _inside(folder: Path, value: str, where: str, cfg_path: Path, linked: Path | None) -> Path:
    """``folder / value``, refused when it points outside the folder.

    A link is followed: its target must be in the folder too, or, in a Hugging Face cache
    snapshot, in the repository's ``blobs/`` (``linked``), where every file of a snapshot is.
    The path is returned as named (not resolved), so neighbours such as ``model.onnx.data``
    are looked up next to it.
    """
    _check_relative(value, where, cfg_path)
    path = folder / value
    target = path.resolve()
    roots = (folder,) if linked is None else (folder, linked)
    if not any(target == root or root in target.parents for root in roots):
        raise UnsafePathError(
            f"{where} in {cfg_path.name} is {value!r}, which resolves to {target}, outside the model "
            f"folder {folder}; a package may only name files inside its own folder",
            path=cfg_path,
        )
    return path


def path_hazards(folder: str, longest_file: str | None, *, windows: bool) -> list[str]:
    """What in a package's path can stop AMD's native loader, with the fix; empty when nothing.

    On Windows the loader receives paths as narrow strings in the ANSI code page, and native
    readers rarely opt in to paths over :data:`MAX_NARROW_PATH` characters: a non-ASCII folder
    name or a deep Hugging Face cache path (a Gemma 16K state file in the default cache is about
    250 characters with a 19-character user name) can fail there. Linux has neither limit.

    Args:
        folder: the package folder, as the runtime is given it.
        longest_file: the package's longest file path relative to ``folder``, if known.
        windows: judge as on Windows (the decision is made by the caller, so it can be tested).
    """
    if not windows:
        return []
    fix = (
        "set HF_HOME=C:\\hf before downloading (the cache is then C:\\hf\\hub), or move the package to a "
        "short ASCII folder"
    )
    out = []
    odd = sorted({c for c in folder if not c.isascii()})
    if odd:
        out.append(
            f"the package path {folder} holds non-ASCII characters ({''.join(odd)}); AMD's native loader takes "
            f"paths in the ANSI code page and may not open it. Fix: {fix}."
        )
    longest = str(PureWindowsPath(folder, longest_file)) if longest_file else folder
    if len(longest) > MAX_NARROW_PATH:
        out.append(
            f"the package's longest file path is {len(longest)} characters ({longest}), over the "
            f"{MAX_NARROW_PATH} that native code without long-path support can open. Fix: {fix}."
        )
    return out


def _missing_npu_files(folder: Path, nodes: Mapping[str, str], files: list[Path]) -> tuple[str, ...]:
    """The NPU files a package's bucket files imply, that are not there.

    Each fused phase whose bucket files are present (``dd_metastate_Llm_<phase>_<node>_..._padded_N_``)
    has one unbucketed ``dd_metastate_Llm_<phase>_<node>.state``. A Full-Fusion package (both
    phases) carries its fused-operator blueprints in ``cache/`` (``<node>_meta.json`` and
    ``Token_<node>_meta.json``), as AMD's Full-Fusion packages do; ``.cache/`` counts too.
    Token-Fusion and hybrid packages are not asked for ``cache/`` (what their loader needs there
    is not known).
    """
    missing: list[str] = []
    if set(nodes) == set(_PHASES):
        cache = next((folder / n for n in ("cache", ".cache") if (folder / n).is_dir()), None)
        if cache is None:
            missing.append("cache/")
        else:
            for phase, blueprint in (("Prefill", "{}_meta.json"), ("Token_Token", "Token_{}_meta.json")):
                name = blueprint.format(nodes[phase])
                if not (cache / name).is_file():
                    missing.append(f"{cache.name}/{name}")
    names = {p.name for p in files}
    for phase, node in nodes.items():
        state = f"dd_metastate_Llm_{phase}_{node}.state"
        if state not in names:
            missing.append(state)
    return tuple(missing)


def _provider(session: Mapping[str, Any], cfg_path: Path) -> tuple[str, dict[str, str], str]:
    """(provider name, its options as strings, layout) from session_options."""
    providers = session.get("provider_options") or []
    if not isinstance(providers, list):
        raise ConfigError(f"session_options.provider_options in {cfg_path} is not a list", path=cfg_path)
    for entry in providers:
        if not isinstance(entry, dict) or len(entry) != 1:
            raise ConfigError(
                f"each entry of provider_options in {cfg_path} must be an object with one provider name, got {entry!r}",
                path=cfg_path,
            )
        ((name, opts),) = entry.items()
        opts = {str(k): str(v) for k, v in (opts or {}).items()}
        if name == "RyzenAI":
            return "RyzenAI", opts, "ryzenai"
        if name == "VitisAI":
            return "VitisAI", opts, "vitisai"
    entries = session.get("config_entries")
    if isinstance(entries, dict) and (
        session.get("custom_ops_library") or any(k in entries for k in _RYZENAI_ENTRY_KEYS)
    ):
        opts = {str(k): str(v) for k, v in entries.items()}
        if isinstance(session.get("external_data_file"), str):
            opts.setdefault("external_data_file", session["external_data_file"])
        return "RyzenAI", opts, "custom-ops"
    if session.get("custom_ops_library"):
        return "RyzenAI", {}, "custom-ops"
    for entry in providers:
        ((name, opts),) = entry.items()
        return name.lower(), {str(k): str(v) for k, v in (opts or {}).items()}, "plain"
    return "cpu", {}, "plain"


def _scan_buckets(folder: Path) -> tuple[tuple[int, ...], tuple[int, ...], dict[str, str], list[Path]]:
    """(prefill buckets, decode buckets, fused node per phase, vision state files) from file names."""
    prefill: set[int] = set()
    decode: set[int] = set()
    nodes: dict[str, str] = {}
    vision: list[Path] = []
    for entry in _walk(folder, depth=2):
        name = entry.name
        if not name.startswith("dd_metastate_"):
            continue
        if m := _PREFILL_RE.match(name):
            prefill.add(int(m["n"]))
            nodes.setdefault("Prefill", m["node"])
        elif m := _DECODE_RE.match(name):
            decode.add(int(m["n"]))
            nodes.setdefault("Token_Token", m["node"])
        elif _VISION_RE.match(name):
            vision.append(entry)
    return tuple(sorted(prefill)), tuple(sorted(decode)), nodes, sorted(vision)


def _walk(folder: Path, depth: int) -> list[Path]:
    out: list[Path] = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return out
    for e in entries:
        if e.name.startswith(".git") and e.is_dir():
            continue
        if e.is_file():
            out.append(Path(e.path))
        elif e.is_dir() and depth > 1:
            out.extend(_walk(Path(e.path), depth - 1))
    return out


def _scan_lfs(folder: Path, files: list[Path]) -> list[str]:
    return sorted(str(p.relative_to(folder).as_posix()) for p in files if is_lfs_pointer(p))


def _release(name: str, name_source: str, explicit: str | None) -> tuple[str | None, str]:
    """The Ryzen AI release a package is planned for, and where it came from.

    The release that runs the package decides its prompt limit: ``RYZENAI_VERSION``, else the
    ``release`` argument, else the installed Ryzen AI runtime, and only when that is unknown
    (a CPU build, or a Ryzen AI build of an unknown version) the release the package's name
    says it was built for.
    """
    env = env_release()
    if env:
        return env, f"environment variable {ENV_RELEASE}"
    if explicit:
        parse_release(explicit)
        return explicit, "argument"
    info = runtime_info()
    if info.ryzenai and info.release:
        return info.release, f"installed runtime {info.distribution} {info.version}"
    m = _RELEASE_IN_NAME.search(name)
    if m:
        return m.group(1), f"{name_source}, as the installed runtime's release is unknown"
    return None, "unknown"


def _limit_key(limits: Mapping[str, int], release: str | None) -> str:
    """The rai_config key to use: the newest release not newer than ``release``.

    A release without a patch number ("1.7") stands for its whole line. With no release,
    or one older than every key, the smallest limit is used (never over-promise).
    """
    keyed = []
    for k in limits:
        try:
            major, minor, patch = parse_release(k)
        except ValueError:
            continue
        keyed.append(((major, minor, patch or 0), k))
    keyed.sort()
    if release is not None:
        major, minor, patch = parse_release(release)
        target = (major, minor, patch if patch is not None else 10**9)
        fitting = [k for v, k in keyed if v <= target]
        if fitting:
            return fitting[-1]
    return min(limits, key=lambda k: (limits[k], k))


def _tokenizer(folder: Path, lfs: list[str]) -> tuple[tuple[Path, ...], dict[str, Any], str | None, Path | None]:
    files = [folder / n for n in ("tokenizer.json", "tokenizer.model") if (folder / n).is_file()]
    if not files:
        raise MissingTokenizerError(
            f"{folder} has no tokenizer (tokenizer.json or tokenizer.model); copy the tokenizer "
            "files of the original model into the package folder",
            path=folder,
        )
    tok_cfg: dict[str, Any] = {}
    cfg_path = folder / "tokenizer_config.json"
    if cfg_path.is_file() and "tokenizer_config.json" not in lfs:
        data = read_json(cfg_path, "tokenizer configuration")
        if isinstance(data, dict):
            tok_cfg = data
    template: str | None = None
    template_file: Path | None = None
    jinja = folder / "chat_template.jinja"
    if jinja.is_file() and "chat_template.jinja" not in lfs:
        template = jinja.read_text(encoding="utf-8")
        template_file = jinja
    elif (folder / "chat_template.json").is_file():
        data = read_json(folder / "chat_template.json", "chat template")
        if isinstance(data, dict) and isinstance(data.get("chat_template"), str):
            template, template_file = data["chat_template"], folder / "chat_template.json"
    if template is None:
        raw = tok_cfg.get("chat_template")
        if isinstance(raw, str):
            template = raw
        elif isinstance(raw, list):  # named templates: [{"name": "default", "template": ...}, ...]
            named = {t.get("name"): t.get("template") for t in raw if isinstance(t, dict)}
            template = named.get("default") or next((v for v in named.values() if isinstance(v, str)), None)
    return tuple(files), tok_cfg, template, template_file
