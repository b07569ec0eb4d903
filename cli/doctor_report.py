"""What ``ryzenai-llm doctor`` reports: a list of checks, facts about the machine, and measurements."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from ryzenai_core.errors import RyzenAIError

__all__ = ["Check", "Report", "Status", "attempt", "ms"]

T = TypeVar("T")

Status = Literal["ok", "warn", "fail", "skip"]


@dataclass
class Check:
    """One line of the report."""

    name: str
    status: Status
    detail: str

    def to_dict(self) -> dict[str, str]:
        """The JSON form: ``{"name", "status", "detail"}``."""
        return {"name": self.name, "status": self.status, "detail": self.detail}


@dataclass
class Report:
    """What ``doctor`` found: the checks in order, facts about the machine, and measurements."""

    checks: list[Check] = field(default_factory=list)
    system: dict[str, Any] = field(default_factory=dict)
    measurements: dict[str, Any] = field(default_factory=dict)

    def add(self, name: str, status: Status, detail: str) -> Check:
        """Append a check."""
        check = Check(name, status, detail)
        self.checks.append(check)
        return check

    @property
    def failed(self) -> bool:
        """Whether a check failed."""
        return any(c.status == "fail" for c in self.checks)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form."""
        return {
            "checks": [c.to_dict() for c in self.checks],
            "system": self.system,
            "measurements": self.measurements,
        }


def ms(seconds: float | None) -> str:
    """A duration in milliseconds, as the report prints it (``-`` when unknown)."""
    return f"{1000 * seconds:.0f} ms" if seconds is not None else "-"


def attempt(report: Report, check: str, work: Callable[[], T], close: Callable[[], None]) -> T | None:
    """``work()``, then ``close()`` whatever happens; a :class:`RyzenAIError` fails ``check`` (None returned)."""
    try:
        return work()
    except RyzenAIError as exc:
        report.add(check, "fail", str(exc))
        return None
    finally:
        close()
