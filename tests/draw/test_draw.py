"""`ncdc draw`: every diagram draws in every mode on a GPU and on the napkin machine, the
SVG parses and carries its labels and level colours, nothing in a layout overlaps, and
files are written only where ncdc may write them."""

from __future__ import annotations

import json
import os
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from ncdc.draw import draw, draw_to_file, picture_to_svg
from ncdc.draw import svg as svg_module
from ncdc.draw.heatmap import evaluate_tiles, short_reason
from ncdc.draw.model import (
    Path as Line,
)
from ncdc.draw.model import (
    Picture,
    Rect,
    Text,
    crosses,
    crossings,
    level_colour,
    outside,
    overlaps,
    segments,
)
from ncdc.draw.roofline import read_measured
from ncdc.errors import UsageError
from ncdc.hardware.load import load_hardware
from ncdc.language.load import load_diagram
from ncdc.plan.search import plan_diagram
from tests import support

ROOT = support.ROOT
SPECS = sorted((ROOT / "diagrams").glob("*.yaml"))
HARDWARE = ("h200", "napkin")
NS = "{http://www.w3.org/2000/svg}"


def _picture(spec: Path, hw: str, mode: str) -> Picture:
    return draw(load_diagram(spec), load_hardware(hw), mode)


def _texts(svg: str) -> list[str]:
    root = ET.fromstring(svg)
    return [el.text or "" for el in root.iter(f"{NS}text")]


def _check_picture(picture: Picture) -> str:
    assert overlaps(picture) == [], [
        (getattr(a, "text", a), getattr(b, "text", b)) for a, b in overlaps(picture)
    ]
    assert crossings(picture) == [], [(t.text, p.css, p.points) for t, p in crossings(picture)]
    assert outside(picture) == []
    svg = picture_to_svg(picture)
    root = ET.fromstring(svg)  # well-formed
    assert root.tag == f"{NS}svg"
    assert root.get("data-ncdc") == "draw/1"
    return svg


@pytest.mark.parametrize("hw", HARDWARE)
@pytest.mark.parametrize("spec", SPECS, ids=lambda p: p.stem)
@pytest.mark.parametrize("mode", ["plain", "plan"])
def test_circuit_draws_with_labels_and_level_colours(spec: Path, hw: str, mode: str) -> None:
    diagram = load_diagram(spec)
    machine = load_hardware(hw)
    svg = _check_picture(draw(diagram, machine, mode))
    texts = _texts(svg)
    joined = "\n".join(texts)
    for t in diagram.tensors:
        assert any(s.startswith(f"{t.name} · ") for s in texts), t.name
        for a in t.axes:
            # by its size; in a plan, an axis only tensors on chip have (paged K's keys) may
            # show as its tile alone
            tiled = mode == "plan" and any(s.startswith((f"g_{a} ", f"s_{a} ")) for s in texts)
            assert f"{a} {diagram.axes[a]}" in texts or tiled, (t.name, a)
    for i, level in enumerate(machine.levels):
        assert any(s.startswith(f"{level.name} ") for s in texts), level.name
        assert level_colour(level.name, i) in svg
    if mode == "plain":  # no tile labels (the diagram's own name may hold "g_" or "s_")
        untiled = joined.replace(diagram.name, "")
        assert "g_" not in untiled and "s_" not in untiled
    assert "load " in joined and "save " in joined


def test_plan_relabels_grouped_and_streamed_axes() -> None:
    # FlashAttention on an H200: queries grouped, keys streamed, scores on chip.
    svg = picture_to_svg(_picture(ROOT / "diagrams/attention.yaml", "h200", "plan"))
    texts = _texts(svg)
    tile = _attention_tile()
    assert f"g_q {tile['q']}" in texts and f"s_x {tile['x']}" in texts
    assert "S · bf16 · rf" in texts and "P · bf16 · rf" in texts
    assert "Q · bf16 · hbm" in texts and "O · bf16 · hbm" in texts
    assert any(t.startswith("load ") for t in texts) and any(t.startswith("save ") for t in texts)
    assert level_colour("smem") in svg and level_colour("rf") in svg


def test_napkin_levels_are_l0_and_l1() -> None:
    svg = picture_to_svg(_picture(ROOT / "diagrams/attention.yaml", "napkin", "plan"))
    texts = _texts(svg)
    assert "Q · bf16 · l0" in texts and "S · bf16 · l1" in texts
    assert level_colour("l0") in svg and level_colour("l1") in svg


def test_unfused_attention_saves_its_scores() -> None:
    texts = _texts(
        picture_to_svg(_picture(ROOT / "diagrams/attention_unfused.yaml", "h200", "plan"))
    )
    assert "S · bf16 · hbm" in texts
    assert sum(t.startswith("save ") for t in texts) == 3  # S, P and O


@pytest.mark.parametrize("hw", HARDWARE)
@pytest.mark.parametrize("spec", SPECS, ids=lambda p: p.stem)
def test_roofline_draws(spec: Path, hw: str) -> None:
    svg = _check_picture(_picture(spec, hw, "roofline"))
    joined = "\n".join(_texts(svg))
    if load_diagram(spec).ops[0].kind == "permute":  # moves data alone: no FLOPs to plot
        assert "no dot: the plan computes nothing" in joined
    else:
        assert f"{spec.stem} (model)" in joined
    assert "FLOP/s" in joined
    for level in load_hardware(hw).levels:
        assert f"{level.name} " in joined
    if spec.stem == "attention":
        assert "unfused (model)" in joined


@pytest.mark.parametrize("hw", ["h200", "a100"])
@pytest.mark.parametrize("name", ["attention", "matmul", "mlp", "gqa_attention"])
def test_roofline_level_dots_sit_under_their_slopes(name: str, hw: str) -> None:
    """The hierarchical roofline: at each lower boundary's intensity the plan's rate is at
    most that level's bandwidth times the intensity, and the level that bounds the plan
    sits on its slope (within the model's wave and occupancy slowdowns)."""
    from ncdc.draw.roofline import _level_points
    from ncdc.plan.search import plan_diagram

    profile = load_hardware(hw)
    plan = plan_diagram(load_diagram(ROOT / f"diagrams/{name}.yaml"), profile)
    dots = {text.removeprefix("at "): (x, y) for x, y, text, _ in _level_points(plan)}
    assert set(dots) == {t.upper for t in plan.transfers[1:]}
    for level, (x, y) in dots.items():
        roof = profile.level(level).bandwidth_bytes_per_s * x
        assert y <= roof * (1 + 1e-9), level
        if plan.bound == level:  # priced at the bandwidth the GPU sustains, under the slope
            achievable = profile.achieved_bandwidth(level) * x
            assert y >= achievable / 1.1, (level, y / achievable)


def test_roofline_measured_points(tmp_path: Path) -> None:
    bench = tmp_path / "bench.json"
    runs = [{"name": "sdpa", "flops": 2.2e12, "time_s": 4e-3, "hbm_bytes": 3e8, "extra": 1}]
    bench.write_text(json.dumps(runs))
    d, hw = load_diagram(ROOT / "diagrams/attention.yaml"), load_hardware("h200")
    svg = _check_picture(draw(d, hw, "roofline", measured=bench))
    assert "sdpa (measured)" in _texts(svg)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("{}", "expected a JSON list of runs"),
        ('[{"name": "a", "flops": 1}]', "missing time_s, hbm_bytes"),
        ('[{"name": "a", "flops": 1, "time_s": 0, "hbm_bytes": 1}]', "time_s must be a positive"),
        ("[1", "not valid JSON"),
        ("[" * 100_000, "nested deeper than 64"),
        ("[1e999]", "expected a finite number"),
    ],
)
def test_measured_file_errors_are_one_line(tmp_path: Path, content: str, expected: str) -> None:
    bench = tmp_path / "bench.json"
    bench.write_text(content)
    with pytest.raises(UsageError) as info:
        read_measured(bench)
    assert expected in info.value.line()
    assert "\n" not in info.value.line()


def test_a_measured_file_that_is_a_fifo_is_refused_without_hanging(tmp_path: Path) -> None:
    # Issue 31: every file ncdc reads goes through one guarded reader.
    bench = tmp_path / "bench.json"
    os.mkfifo(bench)
    with pytest.raises(UsageError, match="expected a bench JSON, found a named pipe"):
        read_measured(bench)


@pytest.mark.parametrize("hw", HARDWARE)
@pytest.mark.parametrize("spec", SPECS, ids=lambda p: p.stem)
def test_tiles_draw(spec: Path, hw: str) -> None:
    svg = _check_picture(_picture(spec, hw, "tiles"))
    root = ET.fromstring(svg)
    chosen = [r for r in root.iter(f"{NS}rect") if r.get("class") == "chosen"]
    assert len(chosen) == 1


def _attention_tile() -> dict[str, int]:
    """The block tile the model picks for attention on an H200."""
    diagram = load_diagram(ROOT / "diagrams/attention.yaml")
    return dict(plan_diagram(diagram, load_hardware("h200")).kernels[0].block_tile)


def test_tiles_grid_of_attention_marks_the_plan_and_the_limits() -> None:
    # H200 attention: the plan's g_q x s_x is marked; s_x 256 overflows shared memory.
    grid = evaluate_tiles(load_diagram(ROOT / "diagrams/attention.yaml"), load_hardware("h200"))
    assert (grid.rows.label, grid.cols.label) == ("g_q", "s_x")
    i, j = grid.chosen
    tile = _attention_tile()
    assert (grid.rows.values[i], grid.cols.values[j]) == (tile["q"], tile["x"])
    cells = {(c.row, c.col): c for c in grid.cells}
    # the plan is the fastest cell of its key tile, the Hopper kernel's rule of the widest
    # key tile that fits (128); only narrower key tiles price less (a fixed 64-key tile
    # by 0.8%: each block's start waits for half the K tile, and its last tile's exposed
    # softmax is shorter), while they issue 3.3 slots per HMMA against 2.2
    chosen = cells[grid.chosen]
    assert chosen.time_s == min(c.time_s for c in grid.cells if c.time_s and c.col == j)
    faster = [c for c in grid.cells if c.time_s and c.time_s < chosen.time_s]
    assert faster and all(grid.cols.values[c.col] < tile["x"] for c in faster)
    assert min(c.time_s for c in faster) >= 0.99 * chosen.time_s
    over = cells[(grid.rows.values.index(64), grid.cols.values.index(256))]
    assert over.time_s is None and short_reason(over.reason) == "smem"


def test_matmul_tiles_are_g_m_by_g_n() -> None:
    grid = evaluate_tiles(load_diagram(ROOT / "diagrams/matmul.yaml"), load_hardware("h200"))
    assert (grid.rows.label, grid.cols.label) == ("g_m", "g_n")


def test_overlap_check_finds_collisions() -> None:
    a, b = Text(10, 20, "q 4096"), Text(20, 22, "x 4096")
    assert overlaps(Picture("t", 200, 60, (a, b))) == [(a, b)]
    assert Rect(0, 0, 10, 10).intersects(Rect(5, 5, 10, 10))
    assert not Rect(0, 0, 10, 10).intersects(Rect(10, 0, 10, 10))  # touching is fine


def test_crossing_check_finds_a_label_over_a_line() -> None:
    # "at l2" at size 11 spans x 100..133 (5 characters of 6.6 px), y 91.2..102.75
    label = Text(100, 100, "at l2")
    through = Line(((90, 110), (140, 85)), width=1.6)  # falls across the box's middle
    beside = Line(((90, 106), (140, 106)), width=2.0)  # 3.25 px under it, 1 px half width
    touching = Line(((90, 104), (140, 104)), width=4.0)  # 2 px half width reaches 102
    picture = Picture("t", 200, 200, (label, through, beside, touching))
    assert [p for _, p in crossings(picture)] == [through, touching]
    assert not crosses((90, 50), (140, 50), label.bbox())  # a segment wholly above
    assert crosses((110, 95), (120, 96), label.bbox())  # a segment wholly inside
    grid = Line(((90, 95), (140, 95)), css="grid")
    assert crossings(Picture("t", 200, 200, (label, grid))) == []  # the background grid


def test_a_curved_wire_is_checked_along_the_bend_the_svg_draws() -> None:
    # an S-bend from (0, 0) to (100, 60), handles at x = 50: it passes (50, 30) at its middle
    bend = Line(((0, 0), (100, 60)), curve=True)
    pieces = segments(bend)
    assert len(pieces) == 12 and pieces[0][0] == (0, 0) and pieces[-1][1] == (100, 60)
    assert pieces[5][1] == pytest.approx((50, 30))
    label = Text(40, 36, "xx")  # spans x 40..53.2, y 27.2..38.75: the middle of the bend
    assert crossings(Picture("t", 200, 200, (label, bend))) == [(label, bend)]
    assert crossings(Picture("t", 200, 200, (Text(0, 60, "xx"), bend))) == []


def _cost_lines(plan) -> list[str]:
    from rich.console import Console

    from ncdc.cli.report import cost_table

    console = Console(width=200, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
    console.print(cost_table(plan, []))
    return console.export_text().splitlines()


@pytest.mark.parametrize(("name", "hw"), [("attention", "h200"), ("matmul", "a100"),
                                          ("softmax", "h200"), ("matmul", "napkin")])  # fmt: skip
def test_roofline_numbers_are_the_ones_cost_prints_and_agree_within_the_picture(
    name: str, hw: str
) -> None:
    from ncdc.draw.roofline import roof_figures
    from ncdc.units import format_rate

    diagram, machine = load_diagram(ROOT / f"diagrams/{name}.yaml"), load_hardware(hw)
    plan = plan_diagram(diagram, machine, compare_unfused=True)
    picture = draw(diagram, machine, "roofline")
    texts = [t.text for t in picture.texts()]
    cost = "\n".join(_cost_lines(plan))
    roof = roof_figures(plan)
    # the ridge `cost` prints beside the intensity is the bold roof's knee
    ridge = f"ridge {roof.ridge:.1f} flop/B"
    assert ridge in cost and sum(ridge in t for t in texts) == 1
    # the top level's sustained bandwidth, as the transfer table prints it, prices the roof
    sustained = format_rate(roof.bandwidth, "B/s")
    assert f"{sustained} (" in cost and any(f"and {sustained} from" in t for t in texts)
    # the plan's rate
    achieved = format_rate(plan.flops / plan.predicted_time_s, "FLOP/s")
    assert any(f"the plan, {achieved};" in t for t in texts)
    if plan.bound != machine.levels[0].name:
        assert re.search(rf"achieved +{re.escape(achieved)}", cost)
    # each slope's label is the level's datasheet bandwidth, as cost prints it in brackets
    for t in picture.texts():
        level = t.text.split(" ")[0]
        if level in [lv.name for lv in machine.levels] and t.text.endswith("B/s"):
            bandwidth = format_rate(machine.level(level).bandwidth_bytes_per_s, "B/s")
            assert t.text == f"{level} {bandwidth}"
    # the bold roof's rate: one figure in its label and in the note, and where it is drawn
    rate = format_rate(roof.rate, "FLOP/s")
    (label,) = [t for t in picture.texts() if t.text.startswith("model roof ")]
    assert label.text == f"model roof {rate}" and any(f"roof, {rate} and" in t for t in texts)
    (line,) = [p for p in picture.items if isinstance(p, Line) and p.css == "roof"]
    assert line.points[1][1] == line.points[2][1]  # flat past the knee
    stacked = sum(t.x == label.x for t in picture.texts())  # labels right of the plot
    assert 0 <= label.y - (line.points[2][1] + 4) <= 13 * stacked


def test_a_planned_circuit_says_what_its_prefixes_mean_and_a_bare_one_has_none() -> None:
    d, hw = load_diagram(ROOT / "diagrams/attention.yaml"), load_hardware("h200")
    tile = _attention_tile()
    texts = [t.text for t in draw(d, hw, "plan").texts()]
    legend = [t for t in texts if "grouped" in t]
    assert legend == [f"g_q {tile['q']}: q grouped, {tile['q']} of it per smem core; "
                      f"s_x {tile['x']}: x streamed, {tile['x']} at a time"]  # fmt: skip
    assert not any("grouped" in t for t in (x.text for x in draw(d, hw, "plain").texts()))


def test_the_circuit_summary_gives_the_time_and_rate_cost_prints() -> None:
    from ncdc.units import format_rate, format_time

    d, hw = load_diagram(ROOT / "diagrams/attention.yaml"), load_hardware("h200")
    plan = plan_diagram(d, hw, compare_unfused=True)
    time, rate = (
        format_time(plan.predicted_time_s),
        format_rate(plan.flops / plan.predicted_time_s, "FLOP/s"),
    )
    summary = [t.text for t in draw(d, hw, "plan").texts() if t.text.startswith("predicted ")]
    assert summary[0].startswith(f"predicted {time}, {rate}, ")
    cost = _cost_lines(plan)
    assert any(re.match(rf"predicted time +{re.escape(time)}", line) for line in cost)


def test_labels_are_escaped() -> None:
    svg = picture_to_svg(Picture("a<b", 100, 40, (Text(4, 20, "x & <y>"),)))
    assert "x &amp; &lt;y&gt;" in svg
    assert [t.text for t in ET.fromstring(svg).iter(f"{NS}text")] == ["x & <y>"]


# ----------------------------------------------------------------------------- files


def test_writes_svg_and_refuses_foreign_files(tmp_path: Path) -> None:
    d, hw = load_diagram(ROOT / "diagrams/softmax.yaml"), load_hardware("h200")
    out = tmp_path / "softmax.svg"
    draw_to_file(d, hw, out, "plan")
    first = out.read_text()
    ET.fromstring(first)
    draw_to_file(d, hw, out, "plain")  # ours: overwritten
    assert out.read_text() != first
    foreign = tmp_path / "mine.svg"
    foreign.write_text("<svg xmlns='http://www.w3.org/2000/svg'/>")
    with pytest.raises(UsageError, match="not drawn by ncdc"):
        draw_to_file(d, hw, foreign)
    assert foreign.read_text() == "<svg xmlns='http://www.w3.org/2000/svg'/>"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.svg", "softmax.svg"]


def test_a_fifo_in_the_way_of_a_drawing_is_refused_without_hanging(tmp_path: Path) -> None:
    # Issue 31: the check of who drew a file read it whole, and hung on a FIFO.
    d, hw = load_diagram(ROOT / "diagrams/softmax.yaml"), load_hardware("h200")
    os.mkfifo(tmp_path / "x.svg")
    with pytest.raises(UsageError, match="x.svg: exists and was not drawn by ncdc"):
        draw_to_file(d, hw, tmp_path / "x.svg")


def test_other_suffix_is_a_usage_error(tmp_path: Path) -> None:
    d, hw = load_diagram(ROOT / "diagrams/softmax.yaml"), load_hardware("h200")
    with pytest.raises(UsageError, match="expected a .svg or .png"):
        draw_to_file(d, hw, tmp_path / "x.pdf")


def test_missing_converter_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(svg_module, "find_converter", lambda: None)
    d, hw = load_diagram(ROOT / "diagrams/softmax.yaml"), load_hardware("h200")
    with pytest.raises(UsageError) as info:
        draw_to_file(d, hw, tmp_path / "x.png")
    line = info.value.line()
    assert "no SVG to PNG converter found" in line and "install librsvg2-bin" in line
    assert "\n" not in line and info.value.exit_code == 2
    assert not (tmp_path / "x.png").exists()


@pytest.mark.skipif(
    svg_module.find_converter() is None,
    reason="no working SVG to PNG converter (rsvg-convert, cairosvg or ImageMagick convert)",
)
def test_png_is_marked_as_ours(tmp_path: Path) -> None:
    d, hw = load_diagram(ROOT / "diagrams/softmax.yaml"), load_hardware("napkin")
    out = tmp_path / "softmax.png"
    draw_to_file(d, hw, out, "plain")
    data = out.read_bytes()
    assert data.startswith(svg_module.PNG_SIGNATURE) and svg_module.PNG_MARK in data[:4096]
    draw_to_file(d, hw, out, "plan")  # ours: may be overwritten


def test_png_mark_keeps_the_file_valid() -> None:
    import struct
    import zlib

    ihdr = b"IHDR" + struct.pack(">IIBBBBB", 1, 1, 8, 0, 0, 0, 0)
    png = (
        svg_module.PNG_SIGNATURE
        + struct.pack(">I", 13)
        + ihdr
        + struct.pack(">I", zlib.crc32(ihdr))
    )
    marked = svg_module.mark_png(png)
    assert marked.startswith(png) and marked.endswith(
        struct.pack(">I", zlib.crc32(b"tEXt" + svg_module.PNG_MARK))
    )


def test_cli_draws_and_reports_bad_flags(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from ncdc.cli.main import main

    out = tmp_path / "attention.svg"
    main(["draw", str(ROOT / "diagrams/attention.yaml"), "-o", str(out), "--plain"])
    assert "Q · bf16 · hbm" in _texts(out.read_text())
    capsys.readouterr()
    with pytest.raises(SystemExit) as done:
        main(["draw", str(ROOT / "diagrams/matmul.yaml"), "--tiles", "--roofline", "-o", str(out)])
    assert done.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "error: choose one picture, not --roofline and --tiles (hint: ncdc draw SPEC "
        "[--plain | --roofline | --tiles] -o FILE.svg)"
    ]


def test_a_converter_that_makes_no_png_is_not_used(tmp_path: Path, monkeypatch) -> None:
    """A `convert` on PATH that exits 0 but writes no PNG (a stand-in) is passed over."""
    fake = tmp_path / "convert"
    fake.write_text("#!/bin/sh\necho 'not ImageMagick' >&2\nexit 0\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(svg_module, "CONVERTERS", ("convert",))
    svg_module.find_converter.cache_clear()
    try:
        assert svg_module.find_converter() is None
        d, hw = load_diagram(ROOT / "diagrams/softmax.yaml"), load_hardware("napkin")
        with pytest.raises(UsageError, match="no SVG to PNG converter found"):
            draw_to_file(d, hw, tmp_path / "x.png")
    finally:
        svg_module.find_converter.cache_clear()


def test_drawing_a_chain_is_linear(monkeypatch) -> None:
    # Issue 31: drawing a 1,000-op chain took over 90 s: a kernel model per operation, and
    # per column a scan of every tensor and every reader. Doubling the chain must about
    # double the work (benchmarks/bench_check_scaling.py has the times).
    from ncdc.draw import circuit
    from ncdc.language.load import load_diagram_text
    from ncdc.model.structure import KernelModel

    hw = load_hardware("h200")
    counts = []
    for n in (40, 80):
        diagram = load_diagram_text(support.chain_spec(n), "chain.yaml")
        plan = plan_diagram(diagram, hw)
        reads = support.count_calls(monkeypatch, circuit, "_reads")
        models = support.count_calls(monkeypatch, KernelModel, "__init__")
        circuit.layout_circuit(diagram, hw, plan)
        counts.append((reads[0], models[0]))
        monkeypatch.undo()
    assert counts[0][1] == counts[1][1] == len(plan.kernels), counts  # one model a kernel
    assert counts[1][0] < 2.6 * counts[0][0], counts


def test_a_doc_with_control_characters_draws_valid_xml(tmp_path) -> None:
    # Issue 31: an ESC in a doc made `draw` write an SVG no XML parser reads (exit 0).
    data = json.loads(support.renamed_text(support.DIAGRAMS / "softmax.yaml", {}))
    data["doc"] = "evil \x1b[31mred\x07 \x0c \ufffe \u202e end"
    spec = tmp_path / "esc.yaml"
    spec.write_text(json.dumps(data))
    out = tmp_path / "esc.svg"
    result = support.ncdc("draw", str(spec), "-o", str(out))
    assert result.returncode == 0, result.stderr
    root = ET.parse(out).getroot()  # a parser, not a string search, says it is XML
    texts = [el.text or "" for el in root.iter("{http://www.w3.org/2000/svg}text")]
    assert any("\\x1b[31mred\\x07" in t for t in texts), texts


@pytest.mark.parametrize("name", ["embedding", "paged_decode_attention"])
def test_a_gathered_source_is_drawn_loading_the_rows_the_model_counts(name: str) -> None:
    """The load marker of a table read only through gathers says the distinct rows they
    select (an embedding's picked rows, a paged cache's pages), not a tile of the table."""
    from ncdc.model.structure import KernelModel
    from ncdc.units import format_bytes

    diagram = load_diagram(support.DIAGRAMS / f"{name}.yaml")
    h200 = load_hardware("h200")
    texts = _texts(picture_to_svg(draw(diagram, h200, "plan")))
    kernel = plan_diagram(diagram, h200).kernels[0].kernel
    model = KernelModel(diagram, kernel)
    for source in sorted(kernel.gathered_only):
        rows = sum(g.distinct * g.bytes for g in model.gathered if g.source == source)
        assert f"load {format_bytes(int(rows), digits=1)}" in texts, (source, texts)
