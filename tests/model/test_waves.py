"""The L2 wave model (ncdc.model.waves): the tile a wave of blocks loads through L2."""

from __future__ import annotations

from ncdc.hardware.load import load_hardware
from ncdc.language.load import load_diagram

H200 = load_hardware("h200")


def test_grouped_order_wave_spans_eight_tile_rows() -> None:
    # mlp (m 4096, n 16384) in 256 x 128 tiles: 16 x 128 tiles. 132 blocks in row order
    # cover 2 tile rows (512 rows of C) across all 128 columns; in groups of 8 tile rows
    # they cover 8 tile rows (2048) of the first ceil(132 / 8) = 17 columns (2176).
    from ncdc.model.graph import build_graph
    from ncdc.model.structure import KernelModel
    from ncdc.plan.kernels import Checker

    d = load_diagram("diagrams/mlp.yaml")
    (kernel,) = build_graph(d, H200).kernels
    checker = Checker(KernelModel(d, kernel), H200)
    group = {"m": 256, "n": 128}
    assert checker.wave_group(group, 132, 1) == {"n": 16384, "m": 512}
    assert checker.wave_group(group, 132, 1, 8) == {"n": 17 * 128, "m": 2048}
    # a wave of whole groups (8 x 128 = 1024 blocks and more) is whole rows of tiles
    assert checker.wave_group(group, 1100, 1, 8) == checker.wave_group(group, 1100, 1)
