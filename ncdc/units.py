"""Units: how ncdc writes sizes, times, rates and counts for people, and the one
ceiling division every tile count uses.
"""

from __future__ import annotations

from typing import Any


def format_bytes(n: float, digits: int = 2) -> str:
    """1536 -> '1.50 KiB' (binary prefixes, as memory sizes are counted).

    >>> format_bytes(1536), format_bytes(1536, digits=1), format_bytes(100)
    ('1.50 KiB', '1.5 KiB', '100 B')
    """
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.{digits}f} {unit}"
        n /= 1024
    return f"{n:.{digits}f} TiB"


def format_time(s: float) -> str:
    """2.5e-6 -> '2.50 µs'."""
    if s >= 1:
        return f"{s:.3f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.3f} ms"
    return f"{s * 1e6:.2f} µs"


def format_rate(x: float, unit: str) -> str:
    """Bytes or FLOPs per second, with decimal prefixes as datasheets print them.

    >>> format_rate(4.8e12, "B/s"), format_rate(2500, "FLOP/s"), format_rate(0, "FLOP/s")
    ('4.80 TB/s', '2.50 kFLOP/s', '0 FLOP/s')
    """
    for prefix, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if x >= scale:
            return f"{x / scale:.2f} {prefix}{unit}"
    return f"{x:.3g} {unit}"


def format_count(n: float) -> str:
    """1.37e11 -> '1.37e+11'; small counts stay whole."""
    return f"{n:,.0f}" if n < 1e6 else f"{n:.3e}"


def counted(n: int, noun: str) -> str:
    """`n` and the noun, plural but for one.

    >>> counted(1, "stage"), counted(3, "stage")
    ('1 stage', '3 stages')
    """
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def ceil_div(a: Any, b: Any) -> Any:
    """ceil(a / b) for whole numbers (or NumPy arrays of them), exactly: the number of
    tiles of b that cover a.

    >>> ceil_div(4097, 128), ceil_div(4096, 128)
    (33, 32)
    """
    return -(-a // b)
