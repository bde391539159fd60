"""The L2 wave model: the tile a wave of thread blocks, running at once, loads through L2.

A GPU runs a grid's blocks a wave at a time (SMs x blocks per SM of them); the blocks of a
wave share what they read through the device-wide cache, so the traffic from the top level
into L2 is that of their union tile when its working set fits in L2 (the plan's L2
partition), and of each block's tile otherwise.

    >>> wave_tile({"m": 4096, "n": 4096}, ("m", "n"), {"m": 128, "n": 128}, 132, 1)
    {'n': 4096, 'm': 640}
"""

from __future__ import annotations

from collections.abc import Mapping

from ncdc.units import ceil_div


def wave_tile(
    sizes: Mapping[str, int],
    woven: tuple[str, ...],
    group: Mapping[str, int],
    wave: int,
    splits: int,
    raster_group: int = 0,
) -> dict[str, int]:
    """Union tile of the first `wave` blocks in raster order (the last woven axis fastest)
    of a grid of `group` tiles over `sizes`, `splits` blocks to each tile. With
    `raster_group` (a GEMM's grouped order), runs of consecutive blocks walk that many tiles
    of the second-last woven axis before the next tile of the last: a wave smaller than one
    group spans `raster_group` tiles along it and the columns it reaches; one of whole
    groups is whole rows of tiles, as in row order."""
    left = max(wave // splits, 1)
    found: dict[str, int] = {}
    axes = list(reversed(woven))
    if raster_group and len(axes) >= 2:
        n, m = axes[0], axes[1]
        count_n = ceil_div(sizes[n], group[n])
        count_m = ceil_div(sizes[m], group[m])
        if left >= raster_group * count_n:  # whole groups: rows of tiles, as in row order
            rows, cols = min(count_m, ceil_div(left, count_n)), count_n
        else:  # part of one group: its rows, and the columns the wave reaches
            rows = min(count_m, raster_group)
            cols = min(count_n, ceil_div(left, rows))
        found[n] = min(cols * group[n], sizes[n])
        found[m] = min(rows * group[m], sizes[m])
        left = max(ceil_div(left, count_m * count_n), 1)
        axes = axes[2:]
    for a in axes:
        count = ceil_div(sizes[a], group[a])
        take = min(count, left)
        found[a] = min(take * group[a], sizes[a])
        left = max(ceil_div(left, count), 1)
    return found
