"""The cost report: a plan as a table a human reads, in the spirit of opt_einsum's PathInfo.

>>> from rich.console import Console
>>> from ncdc.language.load import load_diagram
>>> from ncdc.hardware.load import load_hardware
>>> from ncdc.plan.search import rank_tiles
>>> plans = rank_tiles(load_diagram("diagrams/matmul.yaml"), load_hardware("h100"), 3)
>>> Console().print(cost_table(plans[0], plans[1:]))  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ncdc.model.records import intensity, ridge
from ncdc.model.values import Plan
from ncdc.output import safe_markup
from ncdc.units import counted, format_bytes, format_count, format_rate, format_time

if TYPE_CHECKING:
    from rich.console import Group
    from rich.table import Table


def with_note(table: Any, note: str | None) -> Any:
    """`table` followed by one line of `note` (none when `note` is None)."""
    if note is None:
        return table
    from rich.console import Group
    from rich.text import Text

    return Group(table, Text(note))


def cost_tables(plans: Sequence[Plan]) -> Group:
    """One `cost_table` per plan (a folder of specs)."""
    from rich.console import Group

    return Group(*(cost_table(p) for p in plans))


def cost_table(plan: Plan, runners_up: Sequence[Plan] = ()) -> Group:
    """The plan's summary, its transfers per boundary, and the runners-up (from rank_tiles)."""
    # rich's tables load here, not on import: `ncdc cost --format json` never builds one
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    d = plan.graph.diagram
    hw = plan.graph.hardware
    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold")
    head.add_column()
    head.add_row("diagram", f"{d.name} on {safe_markup(hw.name)} ({safe_markup(hw.title)})")
    for k in plan.kernels:
        tiles = " ".join(f"{a}={v}" for a, v in k.block_tile.items())
        launch = f"grid {k.grid}, {counted(k.warps, 'warp')}, {counted(k.stages, 'stage')}"
        if hw.is_gpu:
            launch += (
                f", {counted(k.blocks_per_sm, 'block')}/SM, {counted(k.waves, 'wave')}, "
                f"~{k.registers_per_thread} regs/thread, {format_bytes(k.smem_bytes)} smem"
            )
        if k.splits > 1:
            launch += f", {k.splits} splits merged by a second kernel"
        head.add_row(f"kernel {k.kernel.name}", f"{k.family.name}: {tiles}")
        head.add_row("", launch)
        if k.instructions is not None:
            head.add_row(
                "",
                f"main loop: {k.instructions.slots_per_mma:.1f} issue slots per mma "
                f"({k.instructions.source})",
            )
    head.add_row("flops", format_count(plan.flops))
    head.add_row(
        "intensity",
        f"{intensity(plan):.1f} flop/B at {hw.levels[0].name} (ridge {ridge(plan):.1f} flop/B)",
    )
    head.add_row("compute time", format_time(plan.compute_time_s))
    launch = f", {format_time(plan.launch_s)} of it launch latency" if plan.launch_s else ""
    if plan.fill_s:
        launch += f"{' and' if launch else ', of it'} {format_time(plan.fill_s)} pipeline fill"
    head.add_row(
        "predicted time",
        f"{format_time(plan.predicted_time_s)} a call{launch} (no overlap: "
        f"{format_time(plan.predicted_time_no_overlap_s)})",
    )
    if plan.launch_s:
        head.add_row(
            "kernel time",
            f"{format_time(plan.kernel_time_s)} (the kernels alone, as a profiler or a "
            "CUDA-graph replay times them)",
        )
    head.add_row("bound", Text(f"{plan.bound} ({plan.bound_kind})", style="bold"))
    if plan.bound != hw.levels[0].name:
        achieved = format_rate(plan.flops / plan.predicted_time_s, "FLOP/s")
    else:
        achieved = format_rate(plan.top_bytes / plan.predicted_time_s, "B/s")
    head.add_row("achieved", achieved)
    if plan.unfused is not None:
        head.add_row(
            "unfused",
            f"{format_bytes(plan.unfused.top_bytes)} at {hw.levels[0].name} "
            f"({format_time(plan.unfused.predicted_time_s)}): fusion saves "
            f"{plan.unfused.ratio:.1f}x {hw.levels[0].name} traffic",
        )
    parts: list = [head, _transfer_table(plan)]
    if len(plan.breaks) > 1:
        parts.append(_breaks_table(plan))
    if runners_up:
        parts.append(_runners_up(plan, runners_up))
    return Group(*parts)


def _transfer_table(plan: Plan) -> Table:
    from rich.table import Table

    table = Table(title="transfers per boundary", title_justify="left")
    hw = plan.graph.hardware
    for name in ("boundary", "values", "bytes", "bandwidth (datasheet)", "time"):
        table.add_column(name, justify="left" if name == "boundary" else "right")
    for t in plan.transfers:
        mark = " *" if t.upper == plan.bound else ""
        # priced at what the GPU sustains (Hardware.achieved_bandwidth), beside the datasheet
        table.add_row(
            f"{t.upper} -> {t.lower}{mark}",
            format_count(t.values),
            format_bytes(t.bytes),
            f"{format_rate(t.bandwidth_bytes_per_s, 'B/s')} "
            f"({format_rate(hw.bandwidth(t.upper), 'B/s')})",
            format_time(t.time_s),
        )
    return table


def _breaks_table(plan: Plan) -> Table:
    """The kernel breaks the model weighed (the spec wrote none): the chosen one marked,
    each with its cost or why it was left."""
    from rich.table import Table

    top = plan.graph.hardware.levels[0].name
    table = Table(title="kernel breaks (saved results)", title_justify="left")
    for name in ("saved", f"{top} bytes", "predicted", "", "note"):
        table.add_column(name, justify="right" if name in (f"{top} bytes", "predicted") else "left")
    for b in plan.breaks:
        saved = ", ".join(b.saved) if b.saved else "none (fused)"
        time = (
            format_time(b.predicted_time_s)
            if b.predicted_time_s is not None
            else f">= {format_time(b.least_time_s)}"
        )
        table.add_row(
            saved, format_bytes(b.top_bytes), time, "chosen" if b.chosen else "", b.problem
        )
    return table


def _runners_up(best: Plan, others: Sequence[Plan]) -> Table:
    from rich.table import Table

    table = Table(title="runners-up", title_justify="left")
    for name in ("tiles", "predicted", f"{best.graph.hardware.levels[0].name} bytes", "bound"):
        table.add_column(name, justify="left" if name == "tiles" else "right")
    for p in (best, *others):
        tiles = " ".join(f"{a}={v}" for a, v in p.tiles.items())
        table.add_row(tiles, format_time(p.predicted_time_s), format_bytes(p.top_bytes), p.bound)
    return table
