"""Human views of ncdc's data: rich trees and tables for `show` and `hardware`, and the
tables of the other commands. Pure presentation; no decisions are made here.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.table import Table
from rich.tree import Tree

from ncdc.hardware.machine import Hardware
from ncdc.model.graph import ON_CHIP, MemoryGraph
from ncdc.output import safe_markup
from ncdc.units import format_bytes, format_rate, format_time

if TYPE_CHECKING:
    pass


def graph_tree(graph: MemoryGraph) -> Tree:
    """The memory graph as a tree: levels, then each kernel's loads, operations and saves."""
    d = graph.diagram
    where = f"{safe_markup(graph.hardware.title)}  ({safe_markup(d.source)})"
    root = Tree(f"[bold]{d.name}[/] on {where}")
    if d.doc:
        root.add(f"[dim]{safe_markup(d.doc)}[/]")
    root.add("axes: " + "  ".join(f"{a}={n}" for a, n in d.axes.items()))
    levels = root.add("memory levels (top first)")
    for lv in graph.hardware.levels:
        levels.add(
            f"[bold]{lv.name}[/]  {format_bytes(lv.capacity_bytes, digits=1)} per {lv.per}, "
            f"{format_rate(lv.bandwidth_bytes_per_s, 'B/s')} out"
        )
    for k in graph.kernels:
        node = root.add(
            f"kernel [bold]{k.name}[/]  woven: {' '.join(k.woven) or '-'}  "
            f"consumed inside: {' '.join(k.reduced) or '-'}"
        )
        for name in k.inputs:
            t = graph.tensors[name]
            node.add(f"load  {_tensor_label(graph, name)}  from {t.home}")
        for op in k.ops:
            t = graph.tensors[op.out]
            where = "stays on chip" if t.home == ON_CHIP else f"saved to {t.home}"
            detail = f"over {' '.join(op.over)}" if op.over else "elementwise"
            label = _tensor_label(graph, op.out)
            node.add(f"[cyan]{safe_markup(op.text)}[/]  ({op.kind}, {detail})  -> {label}, {where}")
        for name in k.outputs:
            node.add(f"save  {_tensor_label(graph, name)}  to {graph.tensors[name].home}")
    return root


def _tensor_label(graph: MemoryGraph, name: str) -> str:
    t = graph.tensors[name]
    axes = " ".join(t.tensor.axes)
    return safe_markup(f"{name}[{axes}] {t.tensor.dtype} {format_bytes(t.bytes, digits=1)}")


def hardware_list_table(profiles: list[Hardware]) -> Table:
    table = Table(title="GPU profiles (ncdc hardware NAME shows one with sources)")
    for col in ("name", "title", "arch", "SMs", "top level", "bf16 tensor", "fp32 cuda"):
        table.add_column(col)
    for hw in profiles:
        top = hw.levels[0]
        table.add_row(
            safe_markup(hw.name),
            safe_markup(hw.title),
            safe_markup(hw.arch),
            str(hw.limits.sms),
            f"{format_bytes(top.capacity_bytes, digits=1)}, "
            f"{format_rate(top.bandwidth_bytes_per_s, 'B/s')} "
            f"({format_rate(hw.achieved_bandwidth(top.name), 'B/s')} achievable)",
            format_rate(hw.rates.get("tensor", {}).get("bf16", 0), "FLOP/s"),
            format_rate(hw.rates.get("cuda", {}).get("fp32", 0), "FLOP/s"),
        )
    return table


def hardware_table(hw: Hardware) -> Table:
    """Every number of one profile with its unit, source and kind."""
    title = safe_markup(f"{hw.name}: {hw.title} ({hw.arch}, {hw.clock_hz / 1e6:.0f} MHz)")
    table = Table(title=title)
    for col in ("quantity", "value", "kind", "source"):
        table.add_column(col, overflow="fold")
    for path, src in hw.sources.items():
        row = (path, f"{src.value:g} {src.unit}", src.kind, src.source)
        table.add_row(*map(safe_markup, row))
    return table


SHORT_NAME = 40  # characters of a kernel name a table shows; JSON and -v show all of it


def short_name(name: str, limit: int = SHORT_NAME) -> str:
    """A kernel name cut in the middle to `limit` characters, keeping its family at the
    front and its architecture at the end; the whole name with `-v`.

        >>> short_name("attention_attention_wgmma_bf16_q128_x128_d128_w12_s2_sm90a")
        'attention_attention_wgm…128_w12_s2_sm90a'
    """
    from ncdc.output import VERBOSITY

    if len(name) <= limit or VERBOSITY.level > 0:
        return name
    tail = limit * 2 // 5
    return f"{name[: limit - tail - 1]}…{name[-tail:]}"


def compile_table(reports: list, out_dir: Path) -> Table:
    """One row per compiled kernel: launch shape and the resources NVRTC reported."""
    table = Table(title=f"compiled into {safe_markup(str(out_dir))}/ (.cu, .cubin, .json)")
    for col in (
        "kernel",
        "arch",
        "grid",
        "block",
        "regs",
        "spills",
        "smem static+dyn",
        "blocks/SM",
        "occupancy",
    ):
        table.add_column(col)
    for r in reports:
        for k in r.kernels:
            launch = k.launch
            table.add_row(
                short_name(launch.kernel),
                r.arch,
                "x".join(map(str, launch.grid)),
                "x".join(map(str, launch.block)),
                str(k.registers),
                f"{k.spill_stores_bytes + k.spill_loads_bytes} B",
                f"{format_bytes(k.static_smem_bytes, digits=1)} + "
                f"{format_bytes(launch.dynamic_smem, digits=1)}",
                f"{k.blocks_per_sm} ({k.limited_by})",
                f"{k.occupancy:.0%}",
            )
    table.caption = _sass_caption(reports)
    return table


def _sass_caption(reports: list) -> str:
    """Per kernel, its main loop's instruction mix and the bound it implies (ncdc.backends.sass)."""
    from ncdc.backends.outputs import sass_summary

    lines = []
    for r in reports:
        for name, s in (sass_summary(r) or {}).items():
            mix = ", ".join(f"{n} {c}" for c, n in s["main_loop_mix"].items() if n)
            lines.append(
                f"{short_name(name)} main loop: {mix}; {s['bound']}-bound, tensor pipe "
                f"{s['tensor_share']:.0%} busy"
            )
    return "\n".join(lines)


def run_table(outcome) -> Table:  # noqa: ANN001 - a run.RunOutcome
    """Per output: errors against the reference and the verdict; then the traffic check."""
    r = outcome.result
    title = (
        f"{outcome.diagram.name} on the {r.backend} backend "
        f"({outcome.seconds:.2f} s from planning to the check)"
    )
    table = Table(title=title)
    columns = ("output", "dtype", "max |ref|", "max abs error", "error / max |ref|",
               "tolerance", "unwritten or NaN", "NaN/inf mismatch", "result")  # fmt: skip
    for col in columns:
        table.add_column(col)
    for c in r.checks:
        table.add_row(
            c.name, c.dtype, f"{c.scale:.3g}", f"{c.max_abs_error:.3g}",
            f"{c.max_rel_error:.2e}", f"{c.tolerance:g}", str(c.unexpected_nan),
            str(c.nonfinite_mismatch),
            "[green]ok[/]" if c.ok else "[red]MISMATCH[/]",
        )  # fmt: skip
    if r.backend == "cpu":
        issued = r.bytes_read + r.bytes_written
        ratio = issued / outcome.predicted_bytes if outcome.predicted_bytes else float("nan")
        table.caption = (
            f"global traffic issued: {format_bytes(r.bytes_read, digits=1)} read + "
            f"{format_bytes(r.bytes_written, digits=1)} written = {issued:,} B; model across "
            f"{outcome.boundary}: {outcome.predicted_bytes:,} B (ratio {ratio:.3f})"
        )
    for name, how in outcome.module.sums:
        table.caption = (f"{table.caption}\n" if table.caption else "") + (
            f"the reference sums {name} as the tensor cores do: {how.block} products a step, "
            f"{how.fraction_bits} fraction bits kept (Hopper fp8 wgmma)"
        )
    for name, tiled in outcome.module.softmaxes:
        table.caption = (f"{table.caption}\n" if table.caption else "") + (
            f"the reference rounds {name} as the kernel does: {tiled.block} keys a tile against "
            f"the running max, to {tiled.dtype}"
        )
    if (c := r.counters) is not None:
        table.caption = f"{table.caption or ''}" + (
            f"\nglobal loads: {c.load_requests:,} warp requests, {c.load_sectors:,} sectors "
            f"(ideal {c.load_ideal_sectors:,}); stores: {c.store_requests:,}, "
            f"{c.store_sectors:,} sectors (ideal {c.store_ideal_sectors:,}); shared: "
            f"{c.shared_requests:,} requests, {c.shared_wavefronts:,} wavefronts (ideal "
            f"{c.shared_ideal_wavefronts:,}: {c.bank_conflicts:,} from bank conflicts)"
        )
    return table


def cache_table(info: dict) -> Table:
    """`ncdc cache info` for people: one row per cache."""
    from ncdc.units import format_bytes

    safety = "safe" if info["safe"] else f"UNSAFE: {safe_markup(info['problem'])}"
    table = Table(title=f"cache root {safe_markup(info['root'])} ({safety})")
    for col in ("cache", "entries", "size", "path"):
        table.add_column(col, justify="right" if col in ("entries", "size") else "left")
    for name, s in info["sections"].items():
        table.add_row(name, str(s["entries"]), format_bytes(s["bytes"]), safe_markup(s["path"]))
    return table


def calibration_table(found: dict[str, Any]) -> Table:
    """What `ncdc calibrate` measured: each profile entry it wrote and how."""
    table = Table(title="ncdc calibrate")
    for col in ("profile entry", "value", "how"):
        table.add_column(col, overflow="fold")
    for path, f in found.items():
        if path != "samples":
            table.add_row(path, f"{f['value']:g} {f['unit']}", f["method"])
    return table


def grad_table(choice, data: dict, show_cost: bool):  # noqa: ANN001, ANN201 - grad.choose.Choice
    """`ncdc grad`: each way of getting the backward's reads, priced, the chosen one marked;
    with `--cost`, both passes' cost tables and the totals against the unfused step."""
    from rich.console import Group

    from ncdc.cli.report import cost_table
    from ncdc.grad.choose import ways_text

    table = Table(title=f"{data['diagram']}: save or recompute (forward + backward, predicted)")
    for col in ("ways", "saved", "held", "forward", "backward", "total", ""):
        table.add_column(col, overflow="fold")
    for a in choice.alternatives:
        times = [format_time(t) if t is not None else "-" for t in
                 (a.forward_s, a.backward_s, a.total_s)]  # fmt: skip
        table.add_row(
            ways_text(a.ways), ", ".join(a.saved) or "-", format_bytes(a.held_bytes),
            *times, "chosen" if a.chosen else a.note,
        )  # fmt: skip
    if not show_cost:
        return table
    summary = (
        f"forward {format_time(data['forward_s'])} + backward {format_time(data['backward_s'])}"
        f" = {format_time(data['total_s'])} (backward / forward {data['backward_over_forward']}x);"
        f" unfused training step {format_time(data['unfused_s'])}"
    )
    return Group(table, cost_table(choice.forward), cost_table(choice.backward), summary)
