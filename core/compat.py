"""What a newer Python has and Python 3.10 lacks: :class:`StrEnum` (``enum.StrEnum``, 3.11)."""

from __future__ import annotations

import enum
import sys

__all__ = ["StrEnum"]

if sys.version_info >= (3, 11):
    from enum import StrEnum
else:

    class StrEnum(str, enum.Enum):
        """A str-valued enum whose ``str()`` and ``format()`` are its value, as ``enum.StrEnum``'s are."""

        def __str__(self) -> str:
            return str(self.value)

        @staticmethod
        def _generate_next_value_(name: str, start: int, count: int, last_values: list[str]) -> str:
            return name.lower()  # auto(), as enum.StrEnum's
