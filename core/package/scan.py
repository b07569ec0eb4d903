"""What a model folder's files say, read without loading anything: the scan under :class:`ModelPackage`.

:meth:`~ryzenai_core.package.folder.ModelPackage.open` puts these together: JSON configs and
Git LFS pointers (:func:`read_json`, :func:`is_lfs_pointer`), paths a config names, kept
inside the folder (:func:`inside_folder`), the execution provider and its options in
``session_options`` (:func:`read_provider`), the NPU's ``dd_metastate_*`` bucket files and
what they imply is missing (:func:`scan_buckets`, :func:`missing_npu_files`), the Ryzen AI
release a package is planned for and the ``rai_config.json`` key that gives its prompt limit
(:func:`choose_release`, :func:`prompt_limit_key`), the tokenizer files and chat template
source (:func:`read_tokenizer`), what in a path can stop AMD's native loader
(:func:`path_hazards`), and what changes when the folder does (:func:`folder_stamp`). Only the
core's errors and the package wing's runtime facts are imported here.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any

from ..errors import ConfigError, LfsPointerError, MissingTokenizerError, UnsafePathError
from .ep import npu_runtime
from .runtime import ENV_RELEASE, env_release, parse_release, runtime_info

__all__ = [
    "MAX_NARROW_PATH",
    "broken_links",
    "external_data_names",
    "check_relative",
    "choose_release",
    "config_int",
    "inside_folder",
    "is_lfs_pointer",
    "is_vision_state",
    "missing_npu_files",
    "path_hazards",
    "windows_path_settings",
    "prompt_limit_key",
    "read_json",
    "read_provider",
    "read_tokenizer",
    "release_in_name",
    "scan_buckets",
    "scan_lfs",
    "walk_files",
]

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

#: The longest path (without the closing NUL) that Windows file APIs take from code that does
#: not opt in to long paths (MAX_PATH is 260 with the NUL).
MAX_NARROW_PATH = 259


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


def config_int(value: Any, where: str, path: Path) -> int:
    """A positive whole number from a config (``where`` in ``path``), or :class:`ConfigError`."""
    try:
        n = int(str(value).strip())
    except (TypeError, ValueError):
        raise ConfigError(
            f"{where} in {path.name} is {value!r}, not a whole number; fix the value", path=path
        ) from None
    if n <= 0:
        raise ConfigError(f"{where} in {path.name} is {n}; it must be a positive number of tokens", path=path)
    return n


def release_in_name(name: str) -> str | None:
    """The Ryzen AI release a package's name says it was built for (``_rai_1.8.0_``), if any."""
    m = _RELEASE_IN_NAME.search(name)
    return m.group(1) if m else None


def is_vision_state(name: str) -> bool:
    """True for a file name of the NPU-compiled vision model (``dd_metastate_Llm_Vision_*``)."""
    return _VISION_RE.match(name) is not None


def check_relative(value: str, where: str, cfg_path: Path) -> None:
    """Refuse (:class:`UnsafePathError`) a config path that is absolute, has a drive or climbs out with ``..``."""
    for pure in (PurePosixPath(value), PureWindowsPath(value)):
        if pure.is_absolute() or pure.drive or ".." in pure.parts:
            raise UnsafePathError(
                f"{where} in {cfg_path.name} is {value!r}, which points outside the model folder "
                f"{cfg_path.parent}; a package may only name files inside its own folder. Fix the "
                "config or re-download the package.",
                path=cfg_path,
            )


def inside_folder(folder: Path, value: str, where: str, cfg_path: Path, linked: Path | None) -> Path:
    """``folder / value``, refused when it points outside the folder.

    A link is followed: its target must be in the folder too, or, in a Hugging Face cache
    snapshot, in the repository's ``blobs/`` (``linked``), where every file of a snapshot is.
    The path is returned as named (not resolved), so neighbours such as ``model.onnx.data``
    are looked up next to it.
    """
    check_relative(value, where, cfg_path)
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


def windows_path_settings() -> tuple[bool | None, bool | None]:
    """(long paths enabled, ANSI code page is UTF-8) on this Windows machine; (None, None) elsewhere or unknown.

    Read from the registry's ``LongPathsEnabled`` (under ``Control/FileSystem``) and ``GetACP()`` (65001 is UTF-8).
    """
    if sys.platform != "win32":
        return None, None
    long_paths: bool | None = None
    utf8: bool | None = None
    try:  # pragma: no cover - Windows only
        import ctypes
        import winreg

        with winreg.OpenKey(winreg.HKEY_LOCAL_MACHINE, r"SYSTEM\CurrentControlSet\Control\FileSystem") as key:
            long_paths = bool(winreg.QueryValueEx(key, "LongPathsEnabled")[0])
    except OSError:
        long_paths = False
    try:  # pragma: no cover - Windows only
        utf8 = ctypes.windll.kernel32.GetACP() == 65001
    except (AttributeError, OSError):
        utf8 = None
    return long_paths, utf8


def path_hazards(
    folder: str,
    longest_file: str | None,
    *,
    windows: bool,
    long_paths: bool | None = None,
    utf8: bool | None = None,
) -> list[str]:
    """What in a package's path can stop AMD's native loader, with the fix; empty when nothing.

    On Windows the loader receives paths as narrow strings in the ANSI code page, and native
    readers rarely opt in to paths over :data:`MAX_NARROW_PATH` characters: a non-ASCII folder
    name or a deep Hugging Face cache path (a Gemma 16K state file in the default cache is about
    250 characters with a 19-character user name) can fail there. Linux has neither limit.
    Windows' own settings soften this: with the UTF-8 code page (65001) a narrow path holds any
    character, and with ``LongPathsEnabled`` Windows takes long paths from Python's process
    (native code with fixed 260-character buffers can still fail).

    Args:
        folder: the package folder, as the runtime is given it.
        longest_file: the package's longest file path relative to ``folder``, if known.
        windows: judge as on Windows (the decision is made by the caller, so it can be tested).
        long_paths: Windows' ``LongPathsEnabled`` (None: unknown).
        utf8: whether the ANSI code page is UTF-8 (None: unknown).
    """
    if not windows:
        return []
    fix = (
        "set HF_HOME=C:\\hf before downloading (the cache is then C:\\hf\\hub), or move the package to a "
        "short ASCII folder"
    )
    out = []
    odd = sorted({c for c in folder if not c.isascii()})
    if odd and not utf8:
        out.append(
            f"the package path {folder} holds non-ASCII characters ({''.join(odd)}); AMD's native loader takes "
            f"paths in the ANSI code page and may not open it. Fix: {fix}."
        )
    longest = str(PureWindowsPath(folder, longest_file)) if longest_file else folder
    if len(longest) > MAX_NARROW_PATH:
        if long_paths:
            out.append(
                f"the package's longest file path is {len(longest)} characters ({longest}), over {MAX_NARROW_PATH}; "
                "LongPathsEnabled is on, so Windows takes it from this process, but native code with fixed "
                f"260-character buffers may still fail. If the load fails: {fix}."
            )
        else:
            out.append(
                f"the package's longest file path is {len(longest)} characters ({longest}), over the "
                f"{MAX_NARROW_PATH} that native code without long-path support can open (LongPathsEnabled is off). "
                f"Fix: {fix}."
            )
    return out


def missing_npu_files(folder: Path, nodes: Mapping[str, str], files: list[Path]) -> tuple[str, ...]:
    """The NPU files a package's bucket files imply, that are not there.

    Each fused phase whose bucket files are present (``dd_metastate_Llm_<phase>_<node>_..._padded_N_``)
    has one unbucketed ``dd_metastate_Llm_<phase>_<node>.state`` and a fused-operator blueprint in
    ``cache/`` (``.cache/`` counts too), which every DD kernel reads: ``<node>_meta.json`` for the
    prefill phase, ``Token_<node>_meta.json`` for the token phase. So a Full-Fusion package (both
    phases) needs both blueprints, a Token-Fusion package (the token phase only) the second.
    """
    missing: list[str] = []
    if nodes:
        cache = next((folder / n for n in ("cache", ".cache") if (folder / n).is_dir()), None)
        if cache is None:
            missing.append("cache/")
        else:
            for phase, blueprint in (("Prefill", "{}_meta.json"), ("Token_Token", "Token_{}_meta.json")):
                if phase in nodes and not (cache / blueprint.format(nodes[phase])).is_file():
                    missing.append(f"{cache.name}/{blueprint.format(nodes[phase])}")
    names = {p.name for p in files}
    for phase, node in nodes.items():
        state = f"dd_metastate_Llm_{phase}_{node}.state"
        if state not in names:
            missing.append(state)
    return tuple(missing)


def read_provider(session: Mapping[str, Any], cfg_path: Path) -> tuple[str, dict[str, str], str]:
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


def scan_buckets(folder: Path) -> tuple[tuple[int, ...], tuple[int, ...], dict[str, str], list[Path]]:
    """(prefill buckets, decode buckets, fused node per phase, vision state files) from file names."""
    prefill: set[int] = set()
    decode: set[int] = set()
    nodes: dict[str, str] = {}
    vision: list[Path] = []
    for entry in walk_files(folder, depth=2):
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


#: The files a package's facts are read from, by name in its folder (see :func:`folder_stamp`).
FACT_FILES = (
    "genai_config.json",
    "rai_config.json",
    "tokenizer_config.json",
    "chat_template.jinja",
    "chat_template.json",
    "tokenizer.json",
    "tokenizer.model",
)


def folder_stamp(folder: Path, depth: int = 3) -> tuple[tuple[str, int, int], ...]:
    """What a change to a package folder changes, from stats and folder listings only (no file is read).

    ``(name, size, modification time)`` of each file of :data:`FACT_FILES` there is, and ``(path/,
    -1, modification time)`` of the folder and of each folder in it down to ``depth`` levels (a file
    added, removed or replaced there: a download that finished, a Git LFS pointer replaced by its content).
    """
    out: list[tuple[str, int, int]] = []
    for name in FACT_FILES:
        try:
            st = (folder / name).stat()
        except OSError:
            continue
        out.append((name, st.st_size, st.st_mtime_ns))

    def folders(path: Path, rel: str, depth: int) -> None:
        try:
            out.append((rel, -1, path.stat().st_mtime_ns))
            entries = list(os.scandir(path)) if depth > 1 else []
        except OSError:
            return
        for e in sorted(entries, key=lambda e: e.name):
            if e.is_dir() and not e.name.startswith(".git"):
                folders(Path(e.path), f"{rel}{e.name}/", depth - 1)

    folders(folder, "/", depth)
    return tuple(out)


def walk_files(folder: Path, depth: int) -> list[Path]:
    """The files of ``folder`` down to ``depth`` levels (``.git*`` folders skipped)."""
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
            out.extend(walk_files(Path(e.path), depth - 1))
    return out


def broken_links(folder: Path, depth: int) -> list[str]:
    """Links under ``folder`` (down to ``depth`` levels) whose target is not there, relative to ``folder``, sorted.

    In a Hugging Face cache every file of a snapshot is a link into ``blobs/``: an interrupted or
    pruned download leaves links to blobs that are gone.
    """
    out: list[str] = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return out
    for e in entries:
        if e.is_symlink() and not os.path.exists(e.path):
            out.append(e.name)
        elif e.is_dir() and not e.name.startswith(".git") and depth > 1:
            out.extend(f"{e.name}/{name}" for name in broken_links(Path(e.path), depth - 1))
    return sorted(out)


#: A tensor's external data location in an ONNX graph: ``StringStringEntryProto {key: "location", value: ...}``.
_LOCATION = re.compile(rb"\x0a\x08location\x12")
#: ONNX graphs larger than this are not read for their external data (they hold their weights).
_ONNX_SCAN_BYTES = 64 * 1024 * 1024


def external_data_names(onnx: Path) -> tuple[str, ...]:
    """The external data files an ONNX graph names (``model.onnx.data``), relative to its folder.

    Read from the graph's bytes without an ONNX library; a graph that is missing, an LFS pointer
    or larger than 64 MB names none here.
    """
    try:
        stat = onnx.stat()
    except OSError:
        return ()
    if stat.st_size > _ONNX_SCAN_BYTES or stat.st_size < 16:
        return ()
    return _external_data_names(str(onnx), stat.st_size, stat.st_mtime_ns)


@lru_cache(maxsize=64)
def _external_data_names(path: str, size: int, mtime: int) -> tuple[str, ...]:
    try:
        data = Path(path).read_bytes()
    except OSError:
        return ()
    names: set[str] = set()
    for m in _LOCATION.finditer(data):
        pos, length, shift = m.end(), 0, 0
        while pos < len(data):  # a varint: the value's length
            byte = data[pos]
            length |= (byte & 0x7F) << shift
            pos, shift = pos + 1, shift + 7
            if byte < 0x80:
                break
        name = data[pos : pos + length].decode("utf-8", "replace")
        if name and 0 < length < 4096:
            names.add(name)
    return tuple(sorted(names))


def scan_lfs(folder: Path, files: list[Path]) -> list[str]:
    """The ``files`` that are Git LFS pointers, relative to ``folder``, sorted."""
    return sorted(str(p.relative_to(folder).as_posix()) for p in files if is_lfs_pointer(p))


def choose_release(name: str, name_source: str, explicit: str | None) -> tuple[str | None, str]:
    """The Ryzen AI release a package is planned for, and where it came from.

    The release that runs the package decides its prompt limit: ``RYZENAI_VERSION``, else the
    ``release`` argument, else the installed runtime's (AMD's build, or any build whose Ryzen AI
    EP library loads: see :func:`~.ep.npu_runtime`), and only when that is unknown (a CPU
    build, or a Ryzen AI build of an unknown version) the release the package's name says it
    was built for.
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
    runtime = npu_runtime() if info.installed and not info.ryzenai else None
    if runtime is not None and runtime.usable and runtime.release:
        return runtime.release, f"installed runtime {info.distribution} {info.version} with its Ryzen AI EP library"
    m = _RELEASE_IN_NAME.search(name)
    if m:
        return m.group(1), f"{name_source}, as the installed runtime's release is unknown"
    return None, "unknown"


def prompt_limit_key(limits: Mapping[str, int], release: str | None) -> str:
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


def read_tokenizer(folder: Path, lfs: list[str]) -> tuple[tuple[Path, ...], dict[str, Any], str | None, Path | None]:
    """(tokenizer files, tokenizer_config.json, chat template source, its file) of a package folder.

    The template comes from ``chat_template.jinja``, else ``chat_template.json``, else
    ``tokenizer_config.json`` (its default template when it names several); files in ``lfs``
    (Git LFS pointers) are not read.

    Raises:
        MissingTokenizerError: no ``tokenizer.json`` or ``tokenizer.model``.
    """
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
