"""Numbers out of tool text, shared by the parsers: the probe's captures hold strings, and a
value a tool could not read must come back as None rather than stop the parse."""

from __future__ import annotations


def int_or_none(text: str | None) -> int | None:
    """An integer in any base Python reads ('8', '0x1f'); None for absent or unreadable text."""
    try:
        return int(text, 0) if text is not None else None
    except ValueError:
        return None


def significant(value: float, digits: int = 4) -> float:
    """`value` kept to `digits` significant figures. Rounding to fixed decimals would erase
    the slow links a probe exists to find: a 27 Mbit/s link is 0.0034 GB/s, which three
    decimals turn into 0.003 and a tenth of that into zero."""
    return float(f"{value:.{digits}g}")
