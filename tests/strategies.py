"""Hypothesis strategies for diagram specs: valid diagrams built from the operation
registry with consistent shapes, and mutations of them that break one thing at a time.

A `Built` diagram carries both its data (what the YAML says) and the axes each result
must have, so a test can check the loader's shape inference as well as its errors.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

from ncdc.language.diagram import MAX_AXIS_SIZE
from ncdc.language.dtypes import DTYPES
from ncdc.language.ops import BINARY_MAPS, UNARY_MAPS

DTYPES = tuple(DTYPES)

# Valid identifiers that look like C, C++, CUDA or libc names: they must load, and they
# must reach generated code only as the names they are.
HOSTILE_VALID = (
    "int_", "class_", "NULL_", "x_y", "I", "e", "f", "L", "u8", "std_", "ptr", "tid",
    "lane", "acc", "smem", "i", "j", "printf", "memcpy", "assert", "expf", "sqrtf",
    "syncthreads", "atomicAdd", "EOF", "errno", "stdin", "offsetof", "INT_MAX", "M_PI",
    "nv_bfloat16", "Tensor", "Params", "BLOCK_M", "kBlockM", "grid", "block", "dim",
    "half2", "bf16", "fp32", "float_", "threadIdx_x", "Q" * 48,
)  # fmt: skip

# Names the loader must refuse: not identifiers, C++ keywords, CUDA built-ins, macros,
# reserved spellings, ncdc's own prefixes, too long, and text crafted to inject code.
HOSTILE_INVALID = (
    "int", "class", "template", "this", "NULL", "threadIdx", "blockIdx", "warpSize",
    "size_t", "uint32_t", "main", "std", "max", "min", "INFINITY", "NAN", "__LINE__",
    "__FILE__", "__x", "x__y", "__syncthreads", "_Foo", "_x", "_", "ncdc_buf", "NCDC_X", "cudaMalloc",
    "1a", "a-b", "a b", "a.b", "a;system(\"x\")", "a/*", "a*/", "a//", "a\n#include <x>",
    "a\\", "a\"", "a'", "é", "a\u200bb", "a\x00", "Q" * 49, "", " a", "a ", "a\tb", "${a}",
    "{{ a }}", "{% a %}", "a)", "a,b", "a=b",
)  # fmt: skip

_NAME_POOL = (
    "A", "B", "C", "X", "Y", "Z", "W", "H", "S", "P", "O", "Q", "K", "V", "bias", "scale",
    "x_1", "out", "tmp",
) + HOSTILE_VALID  # fmt: skip
_AXIS_POOL = ("m", "n", "k", "b", "h", "q", "x", "d", "g", "r", "a1", "row", "col") + (
    "e",
    "i",
    "j",
    "tid",
    "lane",
    "EOF",
    "grid",
    "dim",
    "L",
    "f",
)
SIZES = (1, 2, 3, 4, 7, 8, 16, 32, 64, 127, 128, 256, 4097)


@dataclass
class Built:
    """A valid diagram under construction: its YAML data and the expected result axes."""

    axes: dict[str, int]
    inputs: dict[str, dict[str, Any]] = field(default_factory=dict)
    ops: list[str] = field(default_factory=list)
    shapes: dict[str, tuple[str, ...]] = field(default_factory=dict)
    results: list[str] = field(default_factory=list)
    used: set[str] = field(default_factory=set)
    name: str = "fuzz"
    doc: str | None = None
    schedule: dict[str, Any] | None = None

    @property
    def outputs(self) -> list[str]:
        return [r for r in self.results if r not in self.used]

    def data(self) -> dict[str, Any]:
        out: dict[str, Any] = {"ncdc": 1, "name": self.name}
        if self.doc is not None:
            out["doc"] = self.doc
        out |= {"axes": dict(self.axes), "inputs": self.inputs, "ops": list(self.ops)}
        out["outputs"] = self.outputs
        if self.schedule is not None:
            out["schedule"] = self.schedule
        return out


def valid_diagrams(max_ops: int = 4) -> st.SearchStrategy[Built]:
    """Diagrams that must load: every input used, every result used or an output.

    The structure comes from one seeded `random.Random`: building strategies inside a
    composite for every choice made Hypothesis's own bookkeeping cost ten times the
    loader, and a failing example is reported with its YAML text anyway.
    """
    return st.integers(0, 2**64 - 1).map(lambda seed: build_valid(random.Random(seed), max_ops))


def build_valid(rnd: random.Random, max_ops: int = 4) -> Built:
    """One valid diagram drawn with `rnd` (see `valid_diagrams`)."""
    axis_names = rnd.sample(_AXIS_POOL, rnd.randint(1, 5))
    b = Built({a: rnd.choice(SIZES) for a in axis_names})
    free = [n for n in _NAME_POOL if n not in b.axes]
    rnd.shuffle(free)
    g = _Gen(rnd, b, axis_names, free)
    for _ in range(rnd.randint(1, max_ops)):
        out = g.fresh()
        kind = rnd.choice(("map", "binary", "reduce", "softmax", "norm", "cast", "causal",
                           "scan", "select", "slice", "permute"))  # fmt: skip
        if rnd.random() < 0.35:
            kind = "contract"
        if kind == "causal" and len(axis_names) < 2:
            kind = "map"
        text, axes, reads = g.op(kind, out)
        if "[" not in text and rnd.random() < 0.25:  # `key: value`, read as a YAML mapping
            text = text.replace("=", ":").replace(":", "=", 1)
        b.ops.append(text)
        b.shapes[out] = axes
        b.results.append(out)
        b.used |= set(reads)
    b.name = rnd.choice(("fuzz", "mm", "attention_x") + HOSTILE_VALID)
    if rnd.random() < 0.5:
        b.doc = rnd.choice(("", "a doc", "x */ y", "#include <z>", "a\\", "a\n#define x 1"))
    if rnd.random() < 0.25:
        b.schedule = {}
    return b


class _Gen:
    """The choices of one diagram: fresh names, operands, and one operation of each kind."""

    def __init__(self, rnd: random.Random, b: Built, axis_names: list[str], free: list[str]):
        self.rnd, self.b, self.axis_names, self.free = rnd, b, axis_names, free

    def fresh(self) -> str:
        return self.free.pop()

    def some_axes(self, min_size: int = 1) -> tuple[str, ...]:
        n = self.rnd.randint(min(min_size, len(self.axis_names)), len(self.axis_names))
        return tuple(self.rnd.sample(self.axis_names, n))

    def new_input(self, axes: tuple[str, ...]) -> str:
        name = self.fresh()
        self.b.inputs[name] = {"axes": list(axes), "dtype": self.rnd.choice(DTYPES)}
        self.b.shapes[name] = axes
        return name

    def operand(self, min_axes: int = 0) -> str:
        known = [n for n, ax in self.b.shapes.items() if len(ax) >= min_axes]
        if known and self.rnd.random() < 0.6:
            return self.rnd.choice(known)
        return self.new_input(self.some_axes(max(min_axes, 1)))

    def op(self, kind: str, out: str) -> tuple[str, tuple[str, ...], list[str]]:
        """One operation of `kind`: its text, the axes of its result, the tensors it reads."""
        rnd, shapes = self.rnd, self.b.shapes
        dtype = f", dtype={rnd.choice(DTYPES)}" if rnd.random() < 0.2 else ""
        if kind == "map":
            x = self.operand()
            return f"{out} = {rnd.choice(UNARY_MAPS)}({x}{dtype})", shapes[x], [x]
        if kind == "binary":
            fn = rnd.choice(BINARY_MAPS)
            x = self.operand()
            if rnd.random() < 0.4:
                y = rnd.choice(("2", "0.5", "-1e-3", "3.0", "+4"))
                args, reads = ([x, y] if rnd.random() < 0.5 else [y, x]), [x]
            else:
                y = self.operand()
                args, reads = [x, y], [x, y]
            axes = tuple(dict.fromkeys(a for n in reads for a in shapes[n]))
            return f"{out} = {fn}({', '.join(args)}{dtype})", axes, reads
        if kind in ("reduce", "softmax", "norm"):
            x = self.operand(1)
            over = tuple(rnd.sample(shapes[x], rnd.randint(1, len(shapes[x]))))
            over_text = over[0] if len(over) == 1 and rnd.random() < 0.5 else f"[{', '.join(over)}]"
            if kind == "reduce":
                fn = rnd.choice(("sum", "mean", "max"))
                axes = tuple(a for a in shapes[x] if a not in over)
                return f"{out} = {fn}({x}, over={over_text}{dtype})", axes, [x]
            if kind == "softmax":
                return f"{out} = softmax({x}, over={over_text}{dtype})", shapes[x], [x]
            fn = rnd.choice(("layernorm", "rmsnorm"))
            extra, reads = "", [x]
            for key in ("weight", "bias") if fn == "layernorm" else ("weight",):
                if rnd.random() < 0.5:
                    w = self.new_input(tuple(rnd.sample(over, rnd.randint(0, len(over)))))
                    extra += f", {key}={w}"
                    reads.append(w)
            if rnd.random() < 0.5:
                extra += f", eps={rnd.choice(('1e-5', '1e-6', '0.001', '0'))}"
            return f"{out} = {fn}({x}, over={over_text}{extra}{dtype})", shapes[x], reads
        if kind == "cast":
            x = self.operand()
            extra, reads = "", [x]
            if rnd.random() < 0.5:
                s = self.new_input(())
                extra, reads = f", scale={s}", [x, s]
            return f"{out} = cast({x}, to={rnd.choice(DTYPES)}{extra})", shapes[x], reads
        if kind == "scan":
            x = self.operand(1)
            fn = rnd.choice(("cumsum", "cummax", "cummin"))
            flag = rnd.choice(("", ", reverse=true", ", reverse=false"))
            return f"{out} = {fn}({x}, over={rnd.choice(shapes[x])}{flag}{dtype})", shapes[x], [x]
        if kind == "select":
            x = self.operand(1)
            a = rnd.choice(shapes[x])
            spare = [j for j in self.axis_names
                     if j not in shapes[x] and self.b.axes[j] <= min(16, self.b.axes[a])]  # fmt: skip
            if spare and rnd.random() < 0.5:
                j = rnd.choice(spare)
                flag = rnd.choice(("", ", largest=false"))
                axes = tuple(j if b == a else b for b in shapes[x])
                return f"{out} = topk({x}, over={a}, k={j}{flag})", axes, [x]
            fn = rnd.choice(("argmax", "argmin"))
            return f"{out} = {fn}({x}, over={a})", tuple(b for b in shapes[x] if b != a), [x]
        if kind == "slice":
            x = self.operand(1)
            a = rnd.choice(shapes[x])
            n = self.b.axes[a]
            by = rnd.randint(-(n - 1), n - 1)
            fn = rnd.choice(("shift", "roll", "slice"))
            if fn != "slice":
                return f"{out} = {fn}({x}, axis={a}, by={by}{dtype})", shapes[x], [x]
            spare = [j for j in self.axis_names if j not in shapes[x]]
            j = rnd.choice(spare) if spare and rnd.random() < 0.6 else a
            start = rnd.randint(-(self.b.axes[j] - 1), n - 1)
            into = f", into={j}" if j != a else ""
            axes = tuple(j if b == a else b for b in shapes[x])
            return f"{out} = slice({x}, axis={a}, start={start}{into}{dtype})", axes, [x]
        if kind == "permute":
            x = self.operand(1)
            order = list(shapes[x])
            rnd.shuffle(order)
            return f"{out} = permute({x}, axes=[{', '.join(order)}]{dtype})", tuple(order), [x]
        if kind == "causal":
            x = self.operand(2)
            if len(shapes[x]) < 2:
                x = self.new_input(tuple(rnd.sample(self.axis_names, 2)))
            q, k = rnd.sample(shapes[x], 2)
            return f"{out} = causal({x}, query={q}, key={k})", shapes[x], [x]
        # contract: the second operand shares the summed axis with the first
        x = self.operand(1)
        k = rnd.choice(shapes[x])
        rest = [a for a in self.axis_names if a != k]
        y_axes = [k, *rnd.sample(rest, rnd.randint(0, len(rest)))]
        rnd.shuffle(y_axes)
        y = self.new_input(tuple(y_axes))
        scale = rnd.choice(("", "", " * 0.125", " * 2"))
        axes = tuple(dict.fromkeys(a for a in shapes[x] + shapes[y] if a != k))
        return f"{out} = contract({x}, {y}, over={k}{dtype}){scale}", axes, [x, y]


# --------------------------------------------------------------------------------------
# Writing YAML by hand, so that flow, block and odd-but-legal spellings all appear.


def to_yaml(data: Any, style: str = "block") -> str:
    """Diagram data as YAML text: `block` for mappings at the top, `flow` for JSON-like."""
    if style == "json":
        return json.dumps(data)
    lines = []
    for key, value in data.items():
        if key == "ops" and isinstance(value, list):
            lines.append("ops:")
            lines += [f"  - {_scalar_text(op)}" for op in value] or ["  []"]
        elif isinstance(value, dict) and value and style == "block":
            lines.append(f"{_scalar_text(key)}:")
            lines += [f"  {_scalar_text(k)}: {_flow(v)}" for k, v in value.items()]
        else:
            lines.append(f"{_scalar_text(key)}: {_flow(value)}")
    return "\n".join(lines) + "\n"


def _flow(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_scalar_text(k)}: {_flow(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_flow(v) for v in value) + "]"
    return _scalar_text(value)


def _scalar_text(value: Any) -> str:
    if isinstance(value, str):
        plain = value and all(c.isalnum() or c in "_ =(),.*-" for c in value)
        plain = plain and not value[0].isdigit() and value[0] not in "-" and ": " not in value
        # An operation with `key: value` is left plain on purpose: YAML reads a mapping.
        if plain or (
            " = " in value and "\n" not in value and '"' not in value and "#" not in value
        ):
            return value
        return json.dumps(value)  # a JSON string is a YAML double-quoted scalar
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value) if not isinstance(value, float) else repr(value)


# --------------------------------------------------------------------------------------
# Mutations: each breaks (or may break) one thing of a valid diagram.

JUNK_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.sampled_from((0, -1, -(2**63), 2**31, MAX_AXIS_SIZE + 1, 2**64, 10**40)),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(HOSTILE_INVALID + HOSTILE_VALID + ("bf17", "fp64", "Bf16", "float")),
    st.lists(st.integers(-3, 3), max_size=3),
    st.dictionaries(st.sampled_from(("a", "axes", "dtype", "m")), st.integers(0, 3), max_size=2),
)
GARBAGE_OP_TEXTS = (
    "Y = exp(X",
    "Y = exp X",
    "= exp(X)",
    "Y = (X)",
    "Y == exp(X)",
    "Y = exp(X))",
    "Y = contract(X, X, over=[])",
    "Y = sum(X, over=[[m]])",
    "Y = sum(X, over=1)",
    "Y = cast(X, to=1)",
    "Y = cast(X, to=[bf16])",
    "Y = contract(X, X) * X",
    "Y = contract(X, X) * 1e999",
    "Y = mul(X, 1e999)",
    "Y = mul(1, 2)",
    "Y = layernorm(X, over=m, eps=nan)",
    "Y = layernorm(X, over=m, eps=[1])",
    "Y = causal(X, query=[m], key=n)",
    "Y = exp(X, X=X)",
    "Y = exp(over=m)",
    "Y = exp(X, dtype=X)",
    "Y = sum(X, over=m, over=m)",
    "Y = exp(X) # \n#include <x>",
    'Y = exp(X);system("x")',
    "Y = é(X)",
    "Y = __LINE__(X)",
    "__x = exp(X)",
    "NULL = exp(X)",
    "Y = exp(" + "X," * 300 + "X)",
    "Y = sum(X, over=[" + "[" * 200 + "])",
    "Y = mul(X, " + "9" * 400 + ")",
    "Y = mul(X, 1" + "0" * 400 + ".0)",
)
GARBAGE_OPS = st.one_of(
    st.text(alphabet="AXYZ=(),:[]*#.0123456789e-+ \tover", max_size=40),
    st.text(max_size=30),
    st.sampled_from(GARBAGE_OP_TEXTS),
)


def _paths(data: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(data, dict):
        for k, v in data.items():
            out += _paths(v, prefix + (k,))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            out += _paths(v, prefix + (i,))
    return out


def _set(data: Any, path: tuple, value: Any) -> Any:
    if not path:
        return value
    head, rest = path[0], path[1:]
    if isinstance(data, dict):
        return {k: (_set(v, rest, value) if k == head else v) for k, v in data.items()}
    return [_set(v, rest, value) if i == head else v for i, v in enumerate(data)]


def _drop(data: Any, path: tuple) -> Any:
    head, rest = path[0], path[1:]
    if not rest:
        if isinstance(data, dict):
            return {k: v for k, v in data.items() if k != head}
        return [v for i, v in enumerate(data) if i != head]
    if isinstance(data, dict):
        return {k: (_drop(v, rest) if k == head else v) for k, v in data.items()}
    return [_drop(v, rest) if i == head else v for i, v in enumerate(data)]


def _rename_key(data: Any, path: tuple, new: str) -> Any:
    head, rest = path[0], path[1:]
    if not rest:
        if isinstance(data, dict):
            return {(new if k == head else k): v for k, v in data.items()}
        return data
    if isinstance(data, dict):
        return {k: (_rename_key(v, rest, new) if k == head else v) for k, v in data.items()}
    return [_rename_key(v, rest, new) if i == head else v for i, v in enumerate(data)]


MUTATIONS = (
    "drop", "junk", "rename_key", "hostile_name", "garbage_op", "unknown_axis", "bad_dtype",
    "size", "text", "text", "text",
)  # fmt: skip
_BAD_SIZES = (0, -1, -4097, 2**31, 2**31 - 1, 2**62, 10**30, 1.5, "128", True, None, [4])
_BAD_DTYPES = ("bf17", "fp64", "BF16", "", "int4", "float", "fp8", "e4m3", None, 2, [])
_HOSTILE = HOSTILE_INVALID + HOSTILE_VALID
_STYLES = ("block", "flow", "json")


@st.composite
def mutated_specs(draw: st.DrawFn) -> tuple[str, str]:
    """(mutation name, YAML text) of a valid diagram with one thing broken (or, now and
    then, one thing changed that is still valid: a mutation need not break the spec)."""
    rnd = random.Random(draw(st.integers(0, 2**64 - 1)))
    built = build_valid(rnd, max_ops=3)
    data = built.data()
    paths = [p for p in _paths(data) if p]
    how = rnd.choice(MUTATIONS)
    style = rnd.choice(_STYLES)
    if how == "drop":
        data = _drop(data, rnd.choice(paths))
    elif how == "junk":
        data = _set(data, rnd.choice(paths), draw(JUNK_VALUES))
    elif how == "rename_key":
        keyed = [p for p in paths if isinstance(p[-1], str)]
        new = draw(JUNK_NAMES)
        data = _rename_key(data, rnd.choice(keyed), new)
    elif how == "hostile_name":
        old = rnd.choice([built.name, *built.axes, *built.inputs, *built.results])
        return how, _replace_word(to_yaml(data, style), old, draw(JUNK_NAMES))
    elif how == "garbage_op":
        ops = list(data["ops"])
        ops.insert(rnd.randint(0, len(ops)), draw(GARBAGE_OPS))
        data["ops"] = ops
    elif how == "unknown_axis":
        tensor = rnd.choice(sorted(data["inputs"]))
        data["inputs"][tensor] = {**data["inputs"][tensor], "axes": ["zz_unknown"]}
    elif how == "bad_dtype":
        tensor = rnd.choice(sorted(data["inputs"]))
        data["inputs"][tensor] = {**data["inputs"][tensor], "dtype": rnd.choice(_BAD_DTYPES)}
    elif how == "size":
        axis = rnd.choice(sorted(data["axes"]))
        data["axes"] = {**data["axes"], axis: rnd.choice(_BAD_SIZES)}
    text = to_yaml(data, style)
    if how == "text":
        how, text = text_mutation(rnd, text, draw(JUNK_TEXT))
    return how, text


JUNK_NAMES = st.sampled_from(_HOSTILE) | st.text(max_size=8)
JUNK_TEXT = st.text(min_size=1, max_size=8) | st.sampled_from(
    (
        "\x00", "\x1b[31m", "\ufeff", "\u2028", "\ud7ff", "é", "漢", "\U0001f600", "\r",
        "\r\n", "\t", ": ", "- ", "{", "]", "&a ", "*a", "!!python/object:os.system ",
        "!!binary ", "? ", "<<: ", "%YAML 1.2\n---\n", "---\n", "...\n", "#", "'", '"',
        "|\n", ">-\n", "!!int ", "!!float ", "!!str ", "!!set ", "!!omap ", "!!timestamp ",
    )
)  # fmt: skip
TEXT_MUTATIONS = (
    "insert", "insert", "truncate", "dup_line", "swap_lines", "indent", "nest", "alias",
    "tab", "bom",
)  # fmt: skip


def _replace_word(text: str, old: str, new: str) -> str:
    pattern = re.compile(rf"(?<![A-Za-z0-9_]){re.escape(old)}(?![A-Za-z0-9_])")
    return pattern.sub(lambda m: new.replace("\\", "\\\\").replace('"', '\\"'), text)


def text_mutation(rnd: random.Random, text: str, junk: str) -> tuple[str, str]:
    """Damage YAML text: bytes, unicode, truncation, duplicated lines, nesting, aliases."""
    lines = text.splitlines(keepends=True)
    how = rnd.choice(TEXT_MUTATIONS)
    pos = rnd.randint(0, len(text))
    if how == "insert":
        return how, text[:pos] + junk + text[pos:]
    if how == "truncate":
        return how, text[:pos]
    if how == "dup_line" and lines:
        i = rnd.randrange(len(lines))
        return how, "".join(lines[: i + 1] + [lines[i]] + lines[i + 1 :])
    if how == "swap_lines" and len(lines) > 1:
        i = rnd.randrange(len(lines) - 1)
        lines[i], lines[i + 1] = lines[i + 1], lines[i]
        return how, "".join(lines)
    if how == "indent" and lines:
        i = rnd.randrange(len(lines))
        lines[i] = rnd.choice(("  ", " ", "    ", "\t")) + lines[i]
        return how, "".join(lines)
    if how == "nest":
        depth = rnd.choice((31, 32, 33, 40, 200))  # deeper ones: test_deep_nesting_*
        return how, text + "schedule: {tiles: " + "[" * depth + "1" + "]" * depth + "}\n"
    if how == "alias":
        return how, text + "doc: &d x\nschedule: {materialize: [*d, *d]}\n"
    if how == "tab":
        return how, text.replace("  ", "\t", 1)
    return "bom", "\ufeff" + text


def alias_bomb(levels: int = 9, width: int = 9) -> str:
    """The billion-laughs document: `width ** levels` strings from a few hundred bytes."""
    lines = ["a0: &a0 [" + ", ".join(["lol"] * width) + "]"]
    for i in range(1, levels + 1):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]")
    return "\n".join(lines) + "\n"
