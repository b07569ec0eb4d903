"""Where a compiled encoder really runs: the VitisAI compiler's pass summary, read.

When onnxruntime's VitisAI execution provider compiles a graph in BF16, its VAIML pass writes
``<cache_dir>/<cache_key>/final-vaiml-pass-summary.txt`` (``preliminary-vaiml-pass-summary.txt``
while it compiles): how many of the model's operators it supports, how many it offloaded to the
NPU, and how many subgraphs fell back to the CPU and why. A session created with the VitisAI
provider says nothing of that (``get_providers()`` lists VitisAI even when every operator runs
on the CPU), so this file is what tells "on the NPU" from "VitisAI requested, ran on the CPU".

:func:`parse_pass_summary` reads the text (the layouts AMD prints, with or without a space before
the percentage); :func:`read_pass_summary` finds the file of a cache key. Only the counts are
read: the layout is the compiler's, not a contract, so a line it does not know is skipped and a
file with no operator counts reads as unrecognised rather than as an error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

__all__ = ["FINAL_SUMMARY", "PRELIMINARY_SUMMARY", "PassSummary", "parse_pass_summary", "read_pass_summary"]

FINAL_SUMMARY = "final-vaiml-pass-summary.txt"
PRELIMINARY_SUMMARY = "preliminary-vaiml-pass-summary.txt"

_NUMBER = r"([0-9][0-9,]*(?:\.[0-9]+)?)"
_COUNT = re.compile(
    r"^\s*(?P<what>Number of operators|GOPs|Number of subgraphs)\s+"
    r"(?P<how>in the model|of the model|supported by VAIML|offloaded by VAIML)\s*:\s*" + _NUMBER
)
_FALLBACK = re.compile(r"^\s*Number of subgraphs (?P<why>.+?)\s*:\s*(?P<n>[0-9]+)")
_PARTITIONS = re.compile(r"^\s*Number of partitions (?P<where>offloaded to NPU|executed on CPU)\s*:\s*(?P<n>[0-9]+)")
_FIELD = re.compile(
    r"^\s*(?P<key>Model data type|Device data type|Device|Target Device)\s*:\s*(?P<value>.+?)\s*$", re.IGNORECASE
)
_TOTAL = re.compile(r"^\s*Total\s*:\s*" + _NUMBER + r"\s*s\b")

Verdict = Literal["npu", "partial", "cpu", "unknown"]


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def _percent(share: float) -> str:
    """A share as a percentage that reads 100% only when it is whole (99.996% is 99.99%)."""
    return "100%" if share >= 1.0 else f"{min(share, 0.9999):.2%}"


@dataclass(frozen=True)
class PassSummary:
    """The counts of one VAIML pass summary.

    Attributes:
        kind: ``"final"`` (the compile finished) or ``"preliminary"`` (partitioning only: what
            VAIML supports, not yet what it offloaded).
        operators: operators in the model.
        supported: operators VAIML supports.
        offloaded: operators offloaded to the NPU (a final summary only).
        gops, gops_supported, gops_offloaded: the model's work in GOPs, and the NPU's shares.
        subgraphs_supported, subgraphs_offloaded: NPU subgraphs found, and compiled.
        fallbacks: subgraphs that fell back to the CPU, by the reason the summary gives
            (``"with compilation errors (fall back to CPU)"``...); reasons with none left out.
        partitions_npu, partitions_cpu: partitions on each side (the newer layout).
        model_dtype, device_dtype, device: what the summary says of them.
        compile_seconds: the compile's total time (the newer layout).
        path: the file read, if any.
    """

    kind: Literal["final", "preliminary"]
    operators: int | None = None
    supported: int | None = None
    offloaded: int | None = None
    gops: float | None = None
    gops_supported: float | None = None
    gops_offloaded: float | None = None
    subgraphs_supported: int | None = None
    subgraphs_offloaded: int | None = None
    fallbacks: dict[str, int] = field(default_factory=dict)
    partitions_npu: int | None = None
    partitions_cpu: int | None = None
    model_dtype: str | None = None
    device_dtype: str | None = None
    device: str | None = None
    compile_seconds: float | None = None
    path: Path | None = None

    @property
    def recognised(self) -> bool:
        """Whether the text held the model's operator count (else nothing here is known)."""
        return self.operators is not None

    @property
    def npu_operators(self) -> int | None:
        """Operators on the NPU: the offloaded ones (a preliminary summary: the supported ones, at most)."""
        return self.offloaded if self.offloaded is not None else self.supported

    @property
    def cpu_operators(self) -> int | None:
        """Operators left to the CPU."""
        if self.operators is None or self.npu_operators is None:
            return None
        return max(self.operators - self.npu_operators, 0)

    @property
    def npu_share(self) -> float | None:
        """The share of the model's operators on the NPU, 0.0 to 1.0 (None when not known)."""
        if not self.operators or self.npu_operators is None:
            return None
        return min(self.npu_operators / self.operators, 1.0)

    @property
    def npu_gops_share(self) -> float | None:
        """The share of the model's work (GOPs) on the NPU, 0.0 to 1.0."""
        done = self.gops_offloaded if self.gops_offloaded is not None else self.gops_supported
        if not self.gops or done is None:
            return None
        return min(done / self.gops, 1.0)

    @property
    def verdict(self) -> Verdict:
        """``npu`` (every operator), ``partial``, ``cpu`` (none: VitisAI requested, the CPU ran it) or ``unknown``."""
        share = self.npu_share
        if share is None:
            return "unknown"
        if self.npu_operators == 0:
            return "cpu"
        return "npu" if self.cpu_operators == 0 else "partial"

    def line(self) -> str:
        """One line for ``info``, ``doctor`` and logs."""
        if not self.recognised:
            return f"unrecognised VitisAI pass summary{f' ({self.path})' if self.path else ''}"
        assert self.operators is not None
        npu, cpu, share = self.npu_operators or 0, self.cpu_operators or 0, self.npu_share or 0.0
        finishing = self.kind == "preliminary" and npu > 0  # with none supported, no compile changes that
        where = "supported on the NPU (compile not finished)" if finishing else "on the NPU"
        text = f"{npu} of {self.operators} operators ({_percent(share)}) {where}, {cpu} on the CPU"
        gops = self.npu_gops_share
        if gops is not None:
            text += f"; {_percent(gops)} of the work"
        reasons = ", ".join(f"{n} {why}" for why, n in self.fallbacks.items())
        if reasons:
            text += f"; subgraphs {reasons}"
        if self.verdict == "cpu":
            text = "VitisAI requested, ran on the CPU: " + text
        return text

    def describe(self) -> dict[str, Any]:
        """A JSON-ready view (``info --json``, result metadata)."""
        return {
            "kind": self.kind,
            "verdict": self.verdict,
            "operators": self.operators,
            "npu_operators": self.npu_operators,
            "cpu_operators": self.cpu_operators,
            "npu_share": self.npu_share,
            "npu_gops_share": self.npu_gops_share,
            "fallbacks": dict(self.fallbacks),
            "device": self.device,
            "device_dtype": self.device_dtype,
            "compile_seconds": self.compile_seconds,
            "path": str(self.path) if self.path else None,
        }


def parse_pass_summary(
    text: str, *, kind: Literal["final", "preliminary"] = "final", path: Path | None = None
) -> PassSummary:
    """Read a VAIML pass summary's counts; lines it does not know are skipped."""
    counts: dict[tuple[str, str], float] = {}
    fallbacks: dict[str, int] = {}
    partitions: dict[str, int] = {}
    fields: dict[str, str] = {}
    total: float | None = None
    for line in text.splitlines():
        if m := _COUNT.match(line):
            counts.setdefault((m["what"], m["how"]), _number(m.group(3)))
        elif m := _PARTITIONS.match(line):
            partitions[m["where"]] = int(m["n"])
        elif (m := _FALLBACK.match(line)) and int(m["n"]):
            fallbacks[" ".join(m["why"].split())] = int(m["n"])
        elif m := _FIELD.match(line):
            fields.setdefault(m["key"].lower(), m["value"])
        elif m := _TOTAL.match(line):
            total = _number(m.group(1))

    def count(what: str, how: str) -> int | None:
        value = counts.get((what, how))
        return int(value) if value is not None else None

    def gops(how: str) -> float | None:
        return counts.get(("GOPs", how))

    return PassSummary(
        kind=kind,
        operators=count("Number of operators", "in the model"),
        supported=count("Number of operators", "supported by VAIML"),
        offloaded=count("Number of operators", "offloaded by VAIML"),
        gops=gops("of the model"),
        gops_supported=gops("supported by VAIML"),
        gops_offloaded=gops("offloaded by VAIML"),
        subgraphs_supported=count("Number of subgraphs", "supported by VAIML"),
        subgraphs_offloaded=count("Number of subgraphs", "offloaded by VAIML"),
        fallbacks=fallbacks,
        partitions_npu=partitions.get("offloaded to NPU"),
        partitions_cpu=partitions.get("executed on CPU"),
        model_dtype=fields.get("model data type"),
        device_dtype=fields.get("device data type"),
        device=fields.get("target device") or fields.get("device"),
        compile_seconds=total,
        path=path,
    )


def read_pass_summary(cache_dir: str | Path, cache_key: str) -> PassSummary | None:
    """The pass summary of one compiled shape: the final one, else the preliminary one, else None.

    An unreadable file (permissions, a compile writing it now) reads as None, as if absent.
    """
    folder = Path(cache_dir) / cache_key
    files: tuple[tuple[str, Literal["final", "preliminary"]], ...] = (
        (FINAL_SUMMARY, "final"),
        (PRELIMINARY_SUMMARY, "preliminary"),
    )
    for name, kind in files:
        path = folder / name
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        return parse_pass_summary(text, kind=kind, path=path)
    return None
