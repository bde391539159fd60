"""Nothing but validated identifiers and numbers reaches generated C++.

For every diagram in diagrams/, every tensor, axis and the diagram itself are renamed to
names that are valid but hostile (libc macros and functions, CUDA-looking names, and the
identifiers the templates themselves use); the generated source must then be the
original's with identifier tokens replaced one for one: a spec name never becomes
punctuation, a number, a string, a preprocessor line or live text out of a comment.
Invalid names are refused when the spec is read. Odd sizes plan for every diagram.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from functools import cache
from pathlib import Path

import pytest

from ncdc.errors import NcdcError, PlanError
from ncdc.hardware.load import load_hardware
from ncdc.language.diagram import Diagram
from ncdc.language.load import load_diagram, load_diagram_text
from ncdc.language.ops import OPERATIONS
from ncdc.plan.search import plan_diagram
from ncdc.render import render_plan
from tests import support
from tests.support import renamed_text

ROOT = support.ROOT
DIAGRAMS = sorted((ROOT / "diagrams").glob("*.yaml"))
H200 = load_hardware("h200")
NAPKIN = load_hardware("napkin")

# Valid names that are libc/CUDA spellings or locals of the templates (s, q_tile, acc, ...).
HOSTILE = (
    "s", "q_tile", "acc", "epi", "rest", "m0", "n0", "r", "c", "j", "e", "io", "kEps", "Tile",
    "Shape", "y", "z", "a", "i", "t", "v", "o", "row", "col", "tid", "lane", "EOF", "errno",
    "stdin", "stdout", "INT_MAX", "M_PI", "printf", "assert", "offsetof", "half2", "expf",
    "grid", "block", "dim", "Params", "BLOCK_M", "size_m", "size_b", "offset", "stride",
    "load_one", "store_one", "run", "apply", "finish_row", "kPerRow", "Slice", "attn",
    "aligned", "begin_row", "source", "finish", "kPerElement", "V", "W", "size_q", "size_n",
    "size_k", "Epilogue", "shape", "tile", "rem", "stat", "x",
)  # fmt: skip

_TOKEN = re.compile(
    r'(?P<string>"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\')'
    r"|(?P<ident>[A-Za-z_]\w*)"
    r"|(?P<number>\.?\d(?:[\w.]|[eEpP][+-])*)"
    r"|(?P<punct>##?|::|->|<<=?|>>=?|[-+*/%&|^!=<>]=?|&&|\|\||\+\+|--|[()\[\]{};,.?:~])"
    r"|(?P<space>\s+)"
)


def strip_comments(source: str) -> str:
    """The source with `//` and `/* */` comments removed (strings are kept as they are)."""
    out, i, n = [], 0, len(source)
    while i < n:
        if source.startswith("//", i):
            while i < n and source[i] != "\n":
                if source[i] == "\\" and i + 1 < n and source[i + 1] == "\n":
                    i += 1  # a line splice continues the comment
                i += 1
        elif source.startswith("/*", i):
            end = source.find("*/", i + 2)
            i = n if end < 0 else end + 2
            out.append(" ")
        elif source[i] in "\"'":
            m = _TOKEN.match(source, i)
            assert m and m.lastgroup == "string", source[i : i + 40]
            out.append(m.group())
            i = m.end()
        else:
            out.append(source[i])
            i += 1
    return "".join(out)


def tokens(source: str) -> list[tuple[str, str]]:
    """C++ tokens of `source` outside comments, as (kind, text); whitespace dropped."""
    text = strip_comments(source)
    out, pos = [], 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        assert m, f"cannot tokenize {text[pos : pos + 40]!r}"
        if m.lastgroup != "space":
            out.append((m.lastgroup or "", m.group()))
        pos = m.end()
    return out


def spec_names(d: Diagram) -> list[str]:
    return [d.name, *d.axes, *(t.name for t in d.tensors)]


def hostile_mapping(d: Diagram, offset: int = 0) -> dict[str, str]:
    names = list(dict.fromkeys(spec_names(d)))
    pool = [h for h in HOSTILE if h not in names and h not in OPERATIONS]
    pool = pool[offset % len(pool) :] + pool[: offset % len(pool)]
    return dict(zip(names, pool, strict=False))


@cache
def render(path: Path, mapping_items: tuple[tuple[str, str], ...] = ()):
    """Load (renamed), plan and render."""
    from ncdc.render import render_plan

    mapping = dict(mapping_items)
    diagram = (
        load_diagram_text(renamed_text(path, mapping), path.name) if mapping else load_diagram(path)
    )
    return diagram, render_plan(plan_diagram(diagram, H200))


def render_hostile(path: Path, original: Diagram, offset: int):
    """Render `path` renamed to hostile names. The generated code names everything of its
    own ncdc_*, so no valid name is refused."""
    mapping = hostile_mapping(original, offset)
    return mapping, *render(path, tuple(mapping.items()))


@pytest.mark.parametrize("path", DIAGRAMS, ids=lambda p: p.stem)
@pytest.mark.parametrize("offset", [0, 17, 34])
def test_renamed_names_change_only_identifiers(path, offset):
    original, base = render(path)
    mapping, renamed, module = render_hostile(path, original, offset)
    assert spec_names(renamed) == [mapping[n] for n in spec_names(original)]
    before, after = tokens(base.source), tokens(module.source)
    assert len(before) == len(after), "renaming changed the token structure"
    pairs: dict[str, str] = {}
    for (k0, t0), (k1, t1) in zip(before, after, strict=True):
        if t0 == t1:
            continue
        # A spec name may only ever change an identifier, and always the same way.
        assert k0 == k1 == "ident", f"{t0!r} became {t1!r}"
        assert pairs.setdefault(t0, t1) == t1, f"{t0!r} became both {pairs[t0]!r} and {t1!r}"
    for t0, t1 in pairs.items():
        if t0 in mapping:
            assert t1 == mapping[t0]
        else:  # a composite such as a kernel name: built from the validated names only
            assert any(new in t1 for new in mapping.values()), (t0, t1)
    # and the launch metadata names the same buffers, renamed the same way
    assert [p.name for launch in module.launches for p in launch.params] == [
        pairs.get(p.name, p.name) for launch in base.launches for p in launch.params
    ]


@pytest.mark.parametrize("path", DIAGRAMS, ids=lambda p: p.stem)
def test_every_spec_identifier_is_a_validated_name(path):
    diagram, module = render(path)
    names = set(spec_names(diagram))
    source_idents = {t for k, t in tokens(module.source) if k == "ident"}
    header_free = strip_comments(module.source)
    # Spec text that is not a name (doc, op text, numbers as written) stays in comments.
    for op in diagram.ops:
        if any(c in op.text for c in "=("):
            assert op.text not in header_free
    if diagram.doc:
        assert diagram.doc not in header_free
    assert names & source_idents, "no spec name reaches the source?"


HEADER_ATTACKS = {
    "newline_include": "ok\n#include </etc/passwd>",
    "cr_define": "ok\r#define private public",
    "close_block": "ok */ int evil; /*",
    "line_splice": "ok \\",
    "unicode_separator": "ok\u2028#error x",
    "nel": "ok\x85#error x",
    "form_feed": "ok\f#error x",
    "vertical_tab": "ok\v#error x",
}


@pytest.mark.parametrize("attack", sorted(HEADER_ATTACKS))
def test_header_comment_cannot_be_escaped(attack):
    path = ROOT / "diagrams" / "softmax.yaml"
    text = path.read_text(encoding="utf-8")
    _, base = render(path)
    payload = json.dumps(HEADER_ATTACKS[attack])
    evil = text.replace(
        "doc: Y[m, n] = exp(X[m, n] - max_n X) / sum_n exp(X[m, n] - max_n X).", f"doc: {payload}"
    ).replace("  - Y = softmax(X, over=n)", f'  - "Y = softmax(X, over=n) # {payload[1:-1]}"')
    assert evil != text
    from ncdc.render import render_plan

    diagram = load_diagram_text(evil, "evil.yaml")
    assert diagram.doc == HEADER_ATTACKS[attack].strip()
    module = render_plan(plan_diagram(diagram, H200))
    header = module.source.split('#include "ncdc_runtime.cuh"')[0]
    for line in header.splitlines():
        assert line == "" or line.startswith("//"), f"live header line {line!r}"
        assert not line.rstrip().endswith("\\"), f"line splice in {line!r}"
    assert not re.search("[\r\x0b\x0c\x85\u2028\u2029]", header)
    assert tokens(module.source) == tokens(base.source)


@pytest.mark.slow
@pytest.mark.parametrize("path", DIAGRAMS, ids=lambda p: p.stem)
def test_renamed_sources_compile_for_the_cpu(path, tmp_path):
    """Names equal to the templates' own locals must not collide: the source compiles."""
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("no host C++ compiler")
    from ncdc.backends.cpu import include_dir

    original, _ = render(path)
    step = len(set(spec_names(original)))
    jobs = {}  # every hostile name once, compiled in parallel
    for offset in range(0, len(HOSTILE), step):
        _, _, module = render_hostile(path, original, offset)
        src = tmp_path / f"k{offset}.cu"
        src.write_text(module.source, encoding="utf-8")
        jobs[offset] = subprocess.Popen(
            [cxx, "-std=c++17", "-fsyntax-only", "-I", str(include_dir()), "-x", "c++", str(src)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
    for offset, job in jobs.items():
        _, err = job.communicate(timeout=300)
        first = next((x for x in err.splitlines() if "error" in x), err[:500])
        assert job.returncode == 0, f"{path.name} renamed (offset {offset}): {first}"


# --------------------------------------------------------------------------------------
# Sizes: 1 and sizes that are no multiple of any tile plan for every diagram.

ODD_SIZES = (1, 3, 127, 4097)


# what a GPU plan may be refused for; fp8 Q and K: a few queries (decode) have no fp8 kernel
REFUSALS = ("head size", "shared memory", "grid", "fp8 Q (Q) and K run only in", "of hbm on")


def _plans_and_renders(diagram: Diagram) -> str:
    """ "" when `diagram` plans on the h200 and its plan renders; else the one-line refusal,
    which must be a PlanError naming a limit of the kernels (never a crash)."""
    try:
        render_plan(plan_diagram(diagram, H200))
    except NcdcError as e:
        assert isinstance(e, PlanError), e.line()
        assert any(word in e.message for word in REFUSALS), e.line()
        return e.line()
    return ""


# Sizes whose smallest tile the abstract machine cannot hold: a roll reads its axis whole,
# and RoPE before attention keeps about 15 rows of a 4097-wide head on chip (229 KB against
# the napkin's 100 KiB l1); refused in one line naming the level.
TOO_WIDE_FOR_THE_NAPKIN = {("rope_attention", "d", 4097)}


@pytest.mark.parametrize("path", DIAGRAMS, ids=lambda p: p.stem)
def test_odd_sizes_plan(path):
    # Every odd size plans on the paper's abstract machine. On a GPU a plan is one that
    # renders: a size the kernels cannot take (a head size they lack, a tile too large
    # for shared memory, more slices than the grid holds) is refused at planning, in one
    # line, as `ncdc check` and `ncdc cost` then refuse it too.
    diagram = load_diagram(path)
    built = 0
    for axis in diagram.axes:
        for size in ODD_SIZES:
            resized = load_diagram(path, {axis: size})
            if (path.stem, axis, size) in TOO_WIDE_FOR_THE_NAPKIN:
                with pytest.raises(PlanError, match="the smallest tile needs .* at l1"):
                    plan_diagram(resized, NAPKIN)
            else:
                assert plan_diagram(resized, NAPKIN).predicted_time_s > 0
            built += not _plans_and_renders(resized)
    assert built >= len(diagram.axes) * len(ODD_SIZES) // 2


def test_all_axes_of_size_one_plan():
    for path in DIAGRAMS:
        diagram = load_diagram(path, dict.fromkeys(load_diagram(path).axes, 1))
        assert plan_diagram(diagram, NAPKIN).predicted_time_s > 0
        _plans_and_renders(diagram)
