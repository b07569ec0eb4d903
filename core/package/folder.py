"""A model folder, read once: what it is, what it needs, and what it can hold.

:meth:`ModelPackage.open` reads ``genai_config.json`` (every layout AMD has shipped: plain
builder output, 1.3-1.6 ``config_entries``/``custom_ops_library``, 1.4 ``VitisAI``, 1.7/1.8
``provider_options[0].RyzenAI``), ``rai_config.json``, the tokenizer files and chat
template source, and the ``dd_metastate_*`` bucket file names (the file scan is
:mod:`~ryzenai_core.package.scan`'s), and plans the package's context budget for the Ryzen AI
release that runs it. It never loads weights and never imports onnxruntime-genai.

Any ``model.type`` is accepted: the installed runtime decides what it runs (its refusal
becomes :class:`~ryzenai_core.errors.UnsupportedModelError` at load time). A folder inside a
Hugging Face cache snapshot may be a tree of links into the repository's ``blobs/``; its name
comes from the repository (:func:`~ryzenai_core.package.hub.package_name`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from ..compat import StrEnum
from ..errors import ConfigError, LfsPointerError, ModelNotFoundError, ModelPackageError
from .budget import ContextBudget
from .hub import cache_repository, package_name
from .limits import long_prompt_policy, package_budget
from .reuse import kv_reuse_policy
from .scan import (
    broken_links,
    check_relative,
    choose_release,
    external_data_names,
    folder_stamp,
    inside_folder,
    is_lfs_pointer,
    is_vision_state,
    missing_npu_files,
    path_hazards,
    read_json,
    read_provider,
    read_tokenizer,
    release_in_name,
    scan_buckets,
    scan_lfs,
    walk_files,
    windows_path_settings,
)

__all__ = ["IMAGE_TOKENS", "NARROW_PATHS", "Mode", "ModelPackage"]

#: Prompt tokens one image costs, per ``model.type``: onnxruntime-genai's Gemma 3 processor
#: expands each ``<start_of_image>`` into 256 ``<image_soft_token>`` tokens (plus the
#: ``<end_of_image>`` marker and the newlines around them).
IMAGE_TOKENS = {"gemma3": 256}

#: Whether model paths reach native code as narrow (ANSI code page) strings with MAX_PATH:
#: AMD's native loader on Windows. Linux passes bytes and has no such limit.
NARROW_PATHS = sys.platform == "win32"


class Mode(StrEnum):
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
    broken_links: tuple[str, ...] = ()
    """Links in the folder whose target is gone (a Hugging Face cache download that stopped early)."""
    stamp: tuple[tuple[str, int, int], ...] = ()
    """The folder as it was when it was read (:func:`~.scan.folder_stamp`, taken before reading): see :meth:`reuse`."""

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
        stamp = folder_stamp(folder)  # before reading: a change while it is read shows as a change
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
        decoder_file = inside_folder(folder, filename, "model.decoder.filename", cfg_path, linked)

        session = decoder.get("session_options") or {}
        if not isinstance(session, dict):
            raise ConfigError(f"model.decoder.session_options in {cfg_path} is not an object", path=cfg_path)
        provider, options, layout = read_provider(session, cfg_path)
        external: list[Path] = []
        for key in ("external_data_file",):
            for source in (session, options):
                value = source.get(key)
                if isinstance(value, str) and value:
                    external.append(inside_folder(folder, value, key, cfg_path, linked))
        if isinstance(options.get("config_file"), str):
            external.append(inside_folder(folder, options["config_file"], "config_file", cfg_path, linked))
        lib = session.get("custom_ops_library")
        if isinstance(lib, str) and lib:
            check_relative(lib, "custom_ops_library", cfg_path)

        vision: list[Path] = []
        for part in ("embedding", "vision", "speech"):
            sub = model.get(part)
            if isinstance(sub, dict):
                for key in ("filename", "config_filename"):
                    if isinstance(sub.get(key), str):
                        vision.append(inside_folder(folder, sub[key], f"model.{part}.{key}", cfg_path, linked))

        prefill, decode, nodes, vision_states = scan_buckets(folder)
        vision.extend(vision_states)
        files = walk_files(folder, depth=3)
        lfs = scan_lfs(folder, files)

        token_backend = options.get("hybrid_opt_token_backend")
        rai_path = folder / "rai_config.json"
        rai = read_json(rai_path, "Ryzen AI prompt limits") if rai_path.is_file() else None
        if rai is not None and not isinstance(rai, dict):
            raise ConfigError(f"{rai_path} is not a JSON object; restore rai_config.json", path=rai_path)

        name = package_name(folder)
        rel, rel_source = choose_release(name, "repository name" if repo is not None else "folder name", release)
        tok_files, tok_cfg, template, template_file = read_tokenizer(folder, lfs)

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
            missing_files=missing_npu_files(folder, nodes, files),
            longest_file=max((p.relative_to(folder).as_posix() for p in files), key=len, default=None),
            broken_links=tuple(broken_links(folder, depth=3)),
            stamp=stamp,
        )

    @classmethod
    def reuse(cls, package: ModelPackage | None, path: str, release: str | None = None) -> ModelPackage:
        """``package``, read before (by the caller that starts a model worker), while it is still the folder.

        It is, when it was read from ``path`` and the folder's :func:`~.scan.folder_stamp` is still
        the one taken when it was read (its configuration files, and no file added, removed or
        replaced since); otherwise (or with no ``package``) the folder is read now, as :meth:`open` with
        ``release`` reads it.
        """
        if package is not None and package.stamp and str(package.path) == path:
            if folder_stamp(package.path) == package.stamp:
                return package
        return cls.open(path, release=release)

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
        return release_in_name(self.name)

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
            "npu_states": [p.relative_to(self.path).as_posix() for p in self.vision_files if is_vision_state(p.name)],
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

    @property
    def external_data(self) -> dict[str, tuple[str, ...]]:
        """The external data files each ONNX graph of the package names (``model.onnx`` -> ``model.onnx.data``)."""
        graphs = [self.decoder_file, *(f for f in self.vision_files if f.suffix == ".onnx")]
        return {g.name: names for g in graphs if (names := external_data_names(g))}

    def required_files(self) -> list[Path]:
        """Files that must hold real content to load the model: the graphs, the data files they name, the tokenizer."""
        files = [self.decoder_file, *self.external_files, *self.tokenizer_files]
        graphs = [self.decoder_file, *(f for f in self.vision_files if f.suffix == ".onnx")]
        for graph in graphs:
            files.extend(graph.with_name(name) for name in external_data_names(graph))
        data = self.decoder_file.with_name(self.decoder_file.name + ".data")
        if data.exists():
            files.append(data)
        return list(dict.fromkeys(files))

    @property
    def download_fix(self) -> str:
        """How to get the files a partial download lacks: ``ryzenai-llm pull REPO`` in a Hugging Face cache."""
        repo = cache_repository(self.path)
        if repo is not None:
            return f"run `ryzenai-llm pull {repo.repo_id}` to fetch what is missing"
        return "download the complete package (in a git clone: `git lfs pull`)"

    def check_loadable(self) -> None:
        """Raise a :class:`ModelPackageError` if a file needed to load is missing, a broken link or a pointer.

        Raises:
            LfsPointerError: a needed file is a Git LFS pointer.
            ModelPackageError: a needed file is missing (or a link to a blob that is gone).
        """
        files = self.required_files()
        for f in files:
            if f.is_symlink() and not f.exists():
                raise ConfigError(
                    f"{f.name} in {self.path} is a link to {os.readlink(f)}, which is not there (the Hugging Face "
                    f"download stopped early, or the cache was pruned): {self.download_fix}",
                    path=f,
                )
            if not f.exists():
                graphs = [graph for graph, names in self.external_data.items() if f.name in names]
                named = f"{graphs[0]} keeps its weights in it" if graphs else "genai_config.json names it"
                raise ConfigError(f"{f.name} is missing from {self.path} ({named}): {self.download_fix}", path=f)
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
        long_paths, utf8 = windows_path_settings() if NARROW_PATHS else (None, None)
        return path_hazards(str(self.path), self.longest_file, windows=NARROW_PATHS, long_paths=long_paths, utf8=utf8)

    # ------------------------------------------------------------------ budget
    @cached_property
    def budget(self) -> ContextBudget:
        """The package's :class:`~.budget.ContextBudget` for :attr:`release` (see :mod:`.limits`)."""
        return package_budget(self)

    @property
    def runtime_chunks_prefill(self) -> bool:
        """Whether onnxruntime-genai splits a long prefill by itself (``search.chunk_size``).

        It does so only for text-only model types; a multimodal type (Gemma 3) runs every
        prompt through its multimodal pipeline, which never chunks.
        """
        return "chunk_size" in self.search and not self.has_vision

    @property
    def long_prompts(self) -> dict[str, Any]:
        """How a prompt longer than one prefill run reaches the runtime (see :func:`.limits.long_prompt_policy`)."""
        return long_prompt_policy(self)

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
            "broken_links": list(self.broken_links),
            "external_data": {graph: list(names) for graph, names in self.external_data.items()},
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
                "prefill_buckets_estimated": b.prefill_buckets_estimated,
                "feed_window": b.feed_window,
                "image_prompt_limit": b.image_prompt_limit,
            },
            "sliding_window": self.sliding_window,
            "long_prompts": self.long_prompts,
            "kv_reuse": kv_reuse_policy(self),
        }
