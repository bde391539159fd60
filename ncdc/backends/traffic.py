"""What an emulated kernel did to memory: global bytes read and written, and, with
counters on, the sectors its warps touched and the shared-memory wavefronts their accesses
took (docs/cpu-backend.md, "Access counters").
"""

from __future__ import annotations

from dataclasses import astuple, dataclass


@dataclass(frozen=True)
class Counters:
    """Warp-wide requests a launch issued and what they cost, beside the fewest possible for
    the same bytes (docs/cpu-backend.md, "Access counters"): 32-byte sectors per global
    load (cp.async's reads included) and store, shared-memory wavefronts per access
    (ldmatrix, cp.async's writes, `ld_shared`/`st_shared`). Zero when not asked for.

        >>> c = Counters(4, 16, 16, 2, 16, 8, 2, 9, 8)
        >>> c.excess_sectors, c.bank_conflicts
        (8, 1)
    """

    load_requests: int = 0
    load_sectors: int = 0
    load_ideal_sectors: int = 0
    store_requests: int = 0
    store_sectors: int = 0
    store_ideal_sectors: int = 0
    shared_requests: int = 0
    shared_wavefronts: int = 0
    shared_ideal_wavefronts: int = 0

    def __add__(self, other: Counters) -> Counters:
        pairs = zip(astuple(self), astuple(other), strict=True)
        return Counters(*(a + b for a, b in pairs))

    @property
    def excess_sectors(self) -> int:
        """Sectors beyond the ideal: 0 when every global access is fully coalesced."""
        return (
            self.load_sectors + self.store_sectors
            - self.load_ideal_sectors - self.store_ideal_sectors
        )  # fmt: skip

    @property
    def bank_conflicts(self) -> int:
        """Wavefronts beyond the ideal: 0 when no shared-memory access conflicts."""
        return self.shared_wavefronts - self.shared_ideal_wavefronts


@dataclass(frozen=True)
class Traffic:
    """Global-memory bytes a launch issued (loads, stores, cp.async, atomics), before caches,
    and its access counters when the launch asked for them."""

    bytes_read: int
    bytes_written: int
    counters: Counters = Counters()

    def __add__(self, other: Traffic) -> Traffic:
        return Traffic(
            self.bytes_read + other.bytes_read,
            self.bytes_written + other.bytes_written,
            self.counters + other.counters,
        )
