"""The settings of a translation search (section 6.1): one name each, validated here once."""
from __future__ import annotations

import dataclasses
from typing import Any, Optional


@dataclasses.dataclass(frozen=True)
class SearchSettings:
    """Beam size, length penalty alpha (GNMT's `((5 + length) / 6)^alpha`) and how many output
    tokens may exceed the source length. The paper: beam 4, alpha 0.6, +50; parsing (6.3):
    beam 21, alpha 0.3, +300. The same names are a `Recipe`'s search fields and the command
    lines' `--beam-size`, `--length-penalty`, `--max-decode-extra`.
    """

    beam_size: int = 4
    length_penalty: float = 0.6
    max_decode_extra: int = 50

    def __post_init__(self) -> None:
        if not _is_int(self.beam_size) or self.beam_size < 1:
            raise ValueError(f"beam_size: must be a positive integer, got {self.beam_size!r}")
        if (not isinstance(self.length_penalty, (int, float)) or isinstance(self.length_penalty, bool)
                or not self.length_penalty >= 0):
            raise ValueError(f"length_penalty: must be a non-negative number, got "
                             f"{self.length_penalty!r}")
        if not _is_int(self.max_decode_extra) or self.max_decode_extra < 0:
            raise ValueError(f"max_decode_extra: must be a non-negative integer, got "
                             f"{self.max_decode_extra!r}")

    @classmethod
    def of(cls, defaults: "SearchSettings", beam_size: Optional[int] = None,
           length_penalty: Optional[float] = None,
           max_decode_extra: Optional[int] = None) -> "SearchSettings":
        """`defaults`, each setting replaced by the argument of the same name unless that is
        None."""
        given = {"beam_size": beam_size, "length_penalty": length_penalty,
                 "max_decode_extra": max_decode_extra}
        return cls(**{name: getattr(defaults, name) if value is None else value
                      for name, value in given.items()})


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
