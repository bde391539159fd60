"""Published kernels' tiles beside the model's choice: where the model prefers its own tile
to a published kernel's by more than its measured error on that kernel, nothing but a GPU
run can say which is right.

Each entry is a kernel whose measured times the model was scored on at the kernel's own
tiles (benchmarks/model_accuracy.py, the set named in `source`), with the worst relative
error it made there. `ncdc cost` notes a plan whose kernel beats the published tiles by
more than that error (`doubted_notes`), and `ncdc tune` times the published tiling beside
the model's best (`published_plans`).

    >>> from ncdc.language.load import load_diagram
    >>> from ncdc.hardware.load import load_hardware
    >>> from ncdc.plan.search import plan_diagram
    >>> plan = plan_diagram(load_diagram("diagrams/attention.yaml"), load_hardware("a100"))
    >>> doubted_notes(plan)[0]  # doctest: +ELLIPSIS
    "note: attention: the model prefers q=64 x=32 to FlashAttention-2's q=128 x=64 by ..."
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ncdc.model.values import KernelPlan, Plan


@dataclass(frozen=True)
class Published:
    """A published kernel's tiles for one family on one GPU profile, by role, at one size
    of the role `head` names, and the model's worst error on its measured points."""

    kernel: str
    family: str
    hardware: str
    tiles: Mapping[str, int]  # role -> block tile
    head: tuple[str, int]  # (role, size) the tiles are published for
    error: float
    source: str


PUBLISHED = (
    Published(
        "FlashAttention-2", "attention", "a100", {"q": 128, "x": 64}, ("d", 128), 0.10,
        "benchmarks/external/fa2_a100.yaml (9 points, A100 SXM4, d = 128; FlashAttention-2's "
        "sm80 forward tile, flash_fwd_launch_template.h run_mha_fwd_hdim128): the model at "
        "these tiles is 4% off in the median, 7.5% at worst",
    ),
)  # fmt: skip


def published_tiles(plan: Plan) -> list[tuple[Published, KernelPlan, dict[str, int]]]:
    """The published tilings that apply to the plan's kernels and differ from what the
    kernel runs: each with its kernel and the tiles by axis name."""
    hw, d = plan.graph.hardware, plan.graph.diagram
    out = []
    for kp in plan.kernels:
        for pub in PUBLISHED:
            if pub.family != kp.family.name or pub.hardware != hw.name:
                continue
            role, size = pub.head
            if [d.axes[a] for a in kp.family.axes(role)] != [size]:
                continue
            tiles = {kp.family.axes(r)[-1]: t for r, t in pub.tiles.items() if kp.family.axes(r)}
            if any(kp.block_tile.get(a) != t for a, t in tiles.items()):
                out.append((pub, kp, tiles))
    return out


def published_plans(plan: Plan) -> list[tuple[Published, KernelPlan, dict[str, int], Plan]]:
    """Each tiling of `published_tiles` with the plan that runs it (the plan's own fixed
    tiles kept): what `ncdc tune` times beside the model's best."""
    from ncdc.plan.search import plan_diagram

    d, hw = plan.graph.diagram, plan.graph.hardware
    return [
        (pub, kp, tiles, plan_diagram(d, hw, {**plan.fixed, **tiles}))
        for pub, kp, tiles in published_tiles(plan)
    ]


def doubted_notes(plan: Plan) -> list[str]:
    """One line per kernel the model runs at its own tiles where a published kernel's tiles
    price slower by more than the model's measured error on that kernel (none where the
    spec or the user fixed tiles)."""
    if plan.fixed:
        return []
    out = []
    for pub, kp, tiles, alt in published_plans(plan):
        ours, theirs = plan.kernel_time_s, alt.kernel_time_s
        if ours >= theirs * (1 - pub.error):
            continue
        mine = " ".join(f"{a}={kp.block_tile[a]}" for a in tiles if a in kp.block_tile)
        published = " ".join(f"{a}={t}" for a, t in tiles.items())
        out.append(
            f"note: {kp.kernel.name}: the model prefers {mine} to {pub.kernel}'s {published} "
            f"by {1 - ours / theirs:.0%} ({ours * 1e3:.3f} ms against {theirs * 1e3:.3f} ms), "
            f"more than its worst error on {pub.kernel}'s measured times ({pub.error:.0%}); "
            f"no measurement supports the gap: `ncdc tune` times both on a GPU"
        )
    return out
