"""The diagram language: YAML specs read and validated into a frozen `Diagram`.

A diagram names its axes once, declares its inputs over those axes, and lists operations
as one-line equations. Shapes are inferred from the axes: weaving (broadcasting) is by
name, a contraction joins the wires of the axes it sums over, a reduction removes its axis.
See docs/diagram-language.md for the language with an example of every construct.

    >>> d = load_diagram_text('''
    ... ncdc: 1
    ... name: mm
    ... axes: {m: 64, n: 32, k: 16}
    ... inputs: {A: {axes: [m, k], dtype: bf16}, B: {axes: [k, n], dtype: bf16}}
    ... ops: ["C = contract(A, B, over=k)"]
    ... outputs: [C]
    ... ''')
    >>> d.tensor("C").axes, d.tensor("C").dtype
    (('m', 'n'), 'bf16')

Every problem is a `SpecError` whose one line names the file, the line, the YAML path,
what was expected and what was found, with a hint.
"""

from __future__ import annotations

import difflib
import functools
import heapq
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ncdc.errors import SpecError, excerpt
from ncdc.language.yamlsrc import YamlDoc, YamlPath, read_yaml_file, read_yaml_text

FORMAT_VERSION = 1

# Bytes per value of every element type a tensor may have.
DTYPE_BYTES: dict[str, int] = {
    "fp32": 4,
    "fp16": 2,
    "bf16": 2,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "int8": 1,
    "int32": 4,
}
# Integer dtypes. A value stored as one is rounded to the nearest integer (ties to even) and
# saturated to the type's range, as cvt.rni.sat does; NaN stores as 0. int8 x int8
# contractions accumulate exactly in int32 on tensor cores (wrapping past 2^31, as mma.sync
# .s32 does without .satfinite); every other operation computes in fp32.
INTEGER_DTYPES: dict[str, tuple[int, int]] = {"int8": (-128, 127), "int32": (-(2**31), 2**31 - 1)}
# Which dtype wins when operands of an elementwise operation differ.
_DTYPE_RANK = {
    "fp32": 5, "bf16": 4, "fp16": 4, "int32": 3, "fp8_e4m3": 2, "fp8_e5m2": 2, "int8": 1,
}  # fmt: skip

MAX_AXIS_SIZE = 2**31 - 1
MAX_NAME_LENGTH = 48

UNARY_MAPS = (
    "exp",
    "log",
    "relu",
    "gelu",
    "silu",
    "sigmoid",
    "tanh",
    "neg",
    "abs",
    "sqrt",
    "rsqrt",
    "recip",
    "square",
)
BINARY_MAPS = ("add", "sub", "mul", "div", "max", "min")
REDUCTIONS = ("sum", "max", "mean")


@dataclass(frozen=True)
class OpSignature:
    """What an operation accepts: its kind, how many operands, which keyword arguments."""

    kind: str  # contract | map | binary | reduce | softmax | norm | cast | mask | index
    operands: int
    keywords: frozenset[str]
    required: frozenset[str] = frozenset()


def _sig(kind: str, operands: int, keywords: str, required: str = "") -> OpSignature:
    return OpSignature(kind, operands, frozenset(keywords.split()), frozenset(required.split()))


# The operation registry: a plain dict, and its error lists the names.
OPERATIONS: dict[str, OpSignature] = {
    "contract": _sig("contract", 2, "over scale dtype"),
    **{name: _sig("map", 1, "dtype") for name in UNARY_MAPS},
    "gelu": _sig("map", 1, "dtype approximate"),
    **{name: _sig("binary", 2, "dtype") for name in BINARY_MAPS},
    "sum": _sig("reduce", 1, "over dtype", "over"),
    "mean": _sig("reduce", 1, "over dtype", "over"),
    "softmax": _sig("softmax", 1, "over dtype", "over"),
    # log-softmax normalises a row as a norm does; logsumexp reduces it (cross-entropy)
    "log_softmax": _sig("norm", 1, "over dtype", "over"),
    "logsumexp": _sig("reduce", 1, "over dtype", "over"),
    "layernorm": _sig("norm", 1, "over weight bias eps dtype", "over"),
    "rmsnorm": _sig("norm", 1, "over weight eps dtype", "over"),
    "cast": _sig("cast", 1, "to scale", "to"),
    "causal": _sig("mask", 1, "query key align", "query key"),
    # key j kept for query i when i + shift - left <= j <= i + shift + right (see MASK_ALIGN)
    "window": _sig("mask", 1, "query key left right align", "query key left"),
    # per-sequence lengths (int32): padded (over batch axes) or packed (over a sequence axis)
    "varlen": _sig("mask", 1, "query key lengths", "query key lengths"),
    # I = index(q): the position i along axis q, as a value (ALiBi's j - i is sub(J, I))
    "index": _sig("index", 1, "dtype"),
}
# gelu's `approximate=` (PyTorch's spelling) -> the op it stands for
GELU_APPROXIMATIONS = {"none": "gelu", "tanh": "gelu_tanh"}

# Where a causal or window mask puts its diagonal when the query and key axes differ in
# size: `end` (bottom-right, key i + x - q for query i, so a decode step sees every key) or
# `start` (top-left, key i for query i).
MASK_ALIGN = ("end", "start")
# `max` with one operand and `over:` is a reduction; with two operands, elementwise.
_REDUCE_MAX = _sig("reduce", 1, "over dtype", "over")

# Names that would break or hijack generated C++: keywords, CUDA built-ins, our prefixes.
_RESERVED = frozenset(
    """alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t
    char16_t char32_t class compl concept const consteval constexpr constinit const_cast
    continue co_await co_return co_yield decltype default delete do double dynamic_cast
    else enum explicit export extern false float for friend goto if inline int long mutable
    namespace new noexcept not not_eq nullptr operator or or_eq private protected public
    register reinterpret_cast requires return short signed sizeof static static_assert
    static_cast struct switch template this thread_local throw true try typedef typeid
    typename union unsigned using virtual void volatile wchar_t while xor xor_eq
    threadIdx blockIdx blockDim gridDim warpSize dim3 half float2 float4 int4 uint4 uint2
    size_t int8_t int16_t int32_t int64_t uint8_t uint16_t uint32_t uint64_t
    main NULL INFINITY NAN min max std""".split()
)
_IDENT = re.compile(r"[A-Za-z][A-Za-z0-9_]*\Z")


@dataclass(frozen=True)
class Tensor:
    """A named array over named axes with one element type."""

    name: str
    axes: tuple[str, ...]
    dtype: str
    # values the cost model assumes for an int32 input (a varlen mask's lengths), row-major;
    # the kernels read the real ones
    expected: tuple[int, ...] = ()

    @property
    def bytes_per_value(self) -> int:
        return DTYPE_BYTES[self.dtype]


@dataclass(frozen=True)
class Op:
    """One operation: `out = fn(operands, keywords)`, with its inferred output axes."""

    out: str
    fn: str
    kind: str
    operands: tuple[str | float, ...]  # tensor names, or numbers for binary maps
    over: tuple[str, ...]  # axes contracted, reduced or normalised over
    axes: tuple[str, ...]  # axes of the result, in order
    dtype: str  # dtype of the result
    scale: tuple[str | float, ...] = ()  # factors multiplied into the result
    params: Mapping[str, Any] = field(default_factory=dict)  # eps, weight, bias, to, query, key...
    line: int = 0
    text: str = ""

    @property
    def inputs(self) -> tuple[str, ...]:
        """Every tensor this operation reads: operands, weights, biases, scale tensors."""
        names = [o for o in self.operands if isinstance(o, str)]
        names += [s for s in self.scale if isinstance(s, str)]
        names += [self.params[k] for k in ("weight", "bias", "lengths") if k in self.params]
        return tuple(dict.fromkeys(names))

    @property
    def reduced(self) -> tuple[str, ...]:
        """Axes this operation takes in and does not give back."""
        return self.over if self.kind in ("contract", "reduce") else ()


@dataclass(frozen=True)
class Schedule:
    """How the user asks the diagram to be run; everything here is optional."""

    group: tuple[str, ...] = ()  # axes to partition into groups (one per core)
    stream: tuple[str, ...] = ()  # axes to feed in chunks through an accumulator
    tiles: Mapping[str, int] = field(default_factory=dict)  # fixed group/stream sizes
    materialize: tuple[str, ...] = ()  # intermediates saved to the top level (kernel breaks)
    # The spec wrote `materialize` (even an empty list): its kernel breaks are obeyed, not
    # chosen by the model (ncdc.plan.search.choose_breaks).
    breaks_given: bool = False


@dataclass(frozen=True)
class Diagram:
    """A validated diagram: ops are in an order where every operand is defined first."""

    name: str
    doc: str
    axes: Mapping[str, int]
    inputs: tuple[Tensor, ...]
    ops: tuple[Op, ...]
    outputs: tuple[str, ...]
    schedule: Schedule
    source: str = "<string>"

    def tensor(self, name: str) -> Tensor:
        """The input or intermediate called `name`."""
        return self._by_name[name]  # KeyError for an unknown name

    # Cached: the graph and the cost model ask for tensors by name once per operation, and
    # rebuilding the tuple each time made a diagram of n operations cost n^2.
    @functools.cached_property
    def tensors(self) -> tuple[Tensor, ...]:
        return self.inputs + tuple(Tensor(op.out, op.axes, op.dtype) for op in self.ops)

    @functools.cached_property
    def _by_name(self) -> dict[str, Tensor]:
        return {t.name: t for t in self.tensors}

    @functools.cached_property
    def _producers(self) -> dict[str, Op]:
        return {op.out: op for op in self.ops}

    @functools.cached_property
    def _consumers(self) -> dict[str, tuple[Op, ...]]:
        found: dict[str, list[Op]] = {}
        for op in self.ops:
            for name in dict.fromkeys(op.inputs):
                found.setdefault(name, []).append(op)
        return {name: tuple(ops) for name, ops in found.items()}

    def size(self, tensor: Tensor) -> int:
        """Number of values in `tensor` at this diagram's axis sizes."""
        n = 1
        for a in tensor.axes:
            n *= self.axes[a]
        return n

    def producer(self, name: str) -> Op | None:
        return self._producers.get(name)

    def consumers(self, name: str) -> tuple[Op, ...]:
        return self._consumers.get(name, ())


# --------------------------------------------------------------------------------------
# Loading


def load_diagram(path: str | Path, sizes: Mapping[str, int] | None = None) -> Diagram:
    """Read and validate the spec at `path`; `sizes` overrides axis sizes (`--set`)."""
    doc = read_yaml_file(Path(path))
    return _with_sizes(_Validator(doc).diagram(), sizes)


def spec_names(paths: Iterable[str | Path]) -> dict[Path, str]:
    """The diagram name each spec declares, for the specs whose YAML reads (no validation).

    Two specs with one name would overwrite each other's outputs and baseline entries;
    callers refuse that before doing any work.
    """
    names: dict[Path, str] = {}
    for path in map(Path, paths):
        try:
            data = read_yaml_file(path).data
        except SpecError:
            continue  # reported when the spec itself is loaded
        if isinstance(data, dict) and isinstance(data.get("name"), str):
            names[path] = data["name"]
    return names


def check_unique_names(paths: Iterable[str | Path]) -> None:
    """Refuse, in one line, two specs whose diagrams have one name: their outputs (and
    their baseline entries) would overwrite each other. A spec that does not load is left
    for its own load to report.

        >>> check_unique_names(["diagrams/matmul.yaml", "diagrams/softmax.yaml"])
    """
    seen: dict[str, Path] = {}
    for path, name in spec_names(paths).items():
        if name in seen:
            raise SpecError(
                f"two specs name their diagram '{name}': {seen[name]} and {path}",
                hint="give each diagram its own `name:`",
            )
        seen[name] = path


def load_diagram_text(
    text: str, source: str = "<string>", sizes: Mapping[str, int] | None = None
) -> Diagram:
    """Like `load_diagram`, from YAML text."""
    return _with_sizes(_Validator(read_yaml_text(text, source)).diagram(), sizes)


def parse_assignments(items: Iterable[str], option: str = "--set") -> dict[str, int]:
    """['q=128', 'x=256'] -> {'q': 128, 'x': 256}; for `--set` and `--tile`."""
    out: dict[str, int] = {}
    for item in items:
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or not _IDENT.match(name):
            raise SpecError(
                f"expected AXIS=SIZE, found '{item}'", where=option, hint=f"{option} q=128"
            )
        try:
            number = int(value.replace("_", ""))
        except ValueError:
            raise SpecError(
                f"expected a whole number for '{name}', found '{value}'", where=option
            ) from None
        if not 1 <= number <= MAX_AXIS_SIZE:
            raise SpecError(
                f"expected a size from 1 to {MAX_AXIS_SIZE} for '{name}', found {number}",
                where=option,
            )
        out[name] = number
    return out


def _with_sizes(diagram: Diagram, sizes: Mapping[str, int] | None) -> Diagram:
    if not sizes:
        return diagram
    for axis in sizes:
        if axis not in diagram.axes:
            raise SpecError(
                f"unknown axis '{axis}'; the diagram has {_names(diagram.axes)}",
                where=f"--set {axis}",
                hint=_did_you_mean(axis, diagram.axes) or "set one of the diagram's axes",
            )
    diagram = replace(diagram, axes={**diagram.axes, **sizes})
    problem = _expected_problem(diagram)
    if problem:
        raise SpecError(
            problem[1], where=f"inputs.{problem[0]}.expected (with --set)", hint=problem[2]
        )
    return diagram


def _expected_problem(diagram: Diagram) -> tuple[str, str, str] | None:
    """(input, what is wrong, what to write) for expected values that do not fit the
    diagram's sizes: one per value of the tensor, and lengths a varlen mask can hold (packed
    sequences within the query and key axes, padded ones at most the key axis)."""
    for t in diagram.inputs:
        if not t.expected:
            continue
        n = diagram.size(t)
        if len(t.expected) != n:
            return (
                t.name,
                f"{t.name} has {n} values at these sizes; `expected` lists {len(t.expected)}",
                f"give one expected value per value of {t.name} ({n}), or drop `expected`",
            )
        for op in diagram.ops:
            if op.fn != "varlen" or op.params.get("lengths") != t.name:
                continue
            q, x = op.params["query"], op.params["key"]
            packed = any(a not in op.axes for a in t.axes)
            limit = min(diagram.axes[q], diagram.axes[x]) if packed else diagram.axes[x]
            rows = n // diagram.axes[t.axes[-1]] if packed else n
            per_row = len(t.expected) // rows
            for r in range(rows):
                part = (
                    t.expected[r * per_row : (r + 1) * per_row] if packed else t.expected[r : r + 1]
                )
                if sum(part) > limit:
                    what = f"sum to {sum(part)}" if packed else f"include {part[0]}"
                    return (
                        t.name,
                        f"expected lengths of {t.name} {what}, more than "
                        f"{'min(' + q + ', ' + x + ')' if packed else x} = {limit}",
                        f"lower them to at most {limit}, or raise the axes: --set {q}={sum(part)} "
                        f"--set {x}={sum(part)}"
                        if packed
                        else f"lower them to at most {limit}, or raise the axis: "
                        f"--set {x}={part[0]}",
                    )
    return None


# --------------------------------------------------------------------------------------
# Validation


_TOP_KEYS = {"ncdc", "name", "doc", "axes", "inputs", "ops", "outputs", "schedule"}
_REQUIRED_TOP = ("ncdc", "name", "axes", "inputs", "ops", "outputs")
_INPUT_KEYS = {"axes", "dtype", "doc", "expected"}
_SCHEDULE_KEYS = {"group", "stream", "tiles", "materialize"}


class _Validator:
    """Walks one YAML document and builds the Diagram, failing at the first problem."""

    def __init__(self, doc: YamlDoc):
        self.doc = doc

    def fail(self, path: YamlPath, message: str, hint: str | None = None) -> SpecError:
        return SpecError(message, where=self.doc.where(path), hint=hint)

    def diagram(self) -> Diagram:
        data = self.doc.data
        if not isinstance(data, dict):
            raise self.fail(
                (),
                f"expected a mapping of diagram keys, found {_kind(data)}",
                "start with `ncdc: 1` and `name:`",
            )
        self.keys(data, (), _TOP_KEYS, _REQUIRED_TOP)
        if data["ncdc"] != FORMAT_VERSION or isinstance(data["ncdc"], bool):
            raise self.fail(
                ("ncdc",),
                f"expected format version {FORMAT_VERSION}, found {_shown(data['ncdc'])}",
                "write `ncdc: 1`",
            )
        name = self.name(data["name"], ("name",), "diagram name")
        doc = data.get("doc", "")
        if not isinstance(doc, str):
            raise self.fail(("doc",), f"expected text, found {_kind(doc)}")
        axes = self.axes(data["axes"])
        inputs = self.inputs(data["inputs"], axes)
        ops = self.ops(data["ops"], axes, {t.name: t for t in inputs})
        outputs = self.outputs(data["outputs"], inputs, ops)
        schedule = self.schedule(data.get("schedule", {}), axes, ops, outputs)
        self.check_used(inputs, ops, outputs)
        diagram = Diagram(
            name, doc.strip(), axes, tuple(inputs), tuple(ops), outputs, schedule, self.doc.source
        )
        problem = _expected_problem(diagram)
        if problem:
            raise self.fail(("inputs", problem[0], "expected"), problem[1], problem[2])
        return diagram

    # -- small checks ----------------------------------------------------------------

    def keys(self, data: dict, path: YamlPath, allowed: set[str], required: Iterable[str]) -> None:
        for key in data:
            if key not in allowed:
                raise self.fail(
                    path + (key,),
                    f"unknown key '{excerpt(key)}'; expected one of {_names(sorted(allowed))}",
                    _did_you_mean(key, allowed),
                )
        for key in required:
            if key not in data:
                raise self.fail(
                    path, f"missing key '{key}'", f"add `{key}:`; see docs/diagram-language.md"
                )

    def name(self, value: Any, path: YamlPath, what: str) -> str:
        if not isinstance(value, str):
            raise self.fail(
                path,
                f"expected a {what} (an identifier), found {_kind(value)}",
                self.doc.quote_hint(path),  # `no` read as False explains itself
            )
        check_identifier(value, what, self.doc.where(path))
        return value

    def mapping(self, value: Any, path: YamlPath, what: str) -> dict:
        if not isinstance(value, dict):
            raise self.fail(path, f"expected a mapping of {what}, found {_kind(value)}")
        return value

    def name_list(self, value: Any, path: YamlPath, what: str) -> list:
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list):
            raise self.fail(path, f"expected a list of {what}, found {_kind(value)}")
        for i, item in enumerate(value):
            if not isinstance(item, str):
                raise self.fail(
                    path + (i,),
                    f"expected a name in this list of {what}, found {_kind(item)}",
                    self.doc.quote_hint(path + (i,)),
                )
        return value

    def known_axis(self, axis: str, axes: Mapping[str, int], path: YamlPath) -> str:
        if axis not in axes:
            raise self.fail(
                path,
                f"unknown axis '{axis}'; declared axes are {_names(axes)}",
                _did_you_mean(axis, axes) or "declare it under `axes:`",
            )
        return axis

    # -- sections --------------------------------------------------------------------

    def axes(self, value: Any) -> dict[str, int]:
        value = self.mapping(value, ("axes",), "axis names to sizes")
        if not value:
            raise self.fail(("axes",), "expected at least one axis, found none")
        axes: dict[str, int] = {}
        for axis, size in value.items():
            path = ("axes", axis)
            self.name(axis, path, "axis name")
            if isinstance(size, bool) or not isinstance(size, int):
                raise self.fail(
                    path,
                    f"expected a whole number as the size of '{axis}', found {_kind(size)}",
                    "e.g. `q: 4096`",
                )
            if not 1 <= size <= MAX_AXIS_SIZE:
                raise self.fail(
                    path, f"expected a size from 1 to {MAX_AXIS_SIZE} for '{axis}', found {size}"
                )
            axes[axis] = size
        return axes

    def inputs(self, value: Any, axes: Mapping[str, int]) -> list[Tensor]:
        value = self.mapping(value, ("inputs",), "input names to {axes, dtype}")
        if not value:
            raise self.fail(("inputs",), "expected at least one input, found none")
        out = []
        for name, decl in value.items():
            path: YamlPath = ("inputs", name)
            self.name(name, path, "input name")
            decl = self.mapping(decl, path, "`axes` and `dtype`")
            self.keys(decl, path, _INPUT_KEYS, ("axes", "dtype"))
            names = self.name_list(decl["axes"], path + ("axes",), "axes")
            for i, axis in enumerate(names):
                self.known_axis(axis, axes, path + ("axes", i))
            if len(set(names)) != len(names):
                raise self.fail(
                    path + ("axes",),
                    f"expected distinct axes, found {names}",
                    "a tensor has each axis once",
                )
            dtype = self.dtype(decl["dtype"], path + ("dtype",))
            expected = self.expected(decl, path, dtype) if "expected" in decl else ()
            out.append(Tensor(name, tuple(names), dtype, expected))
        return out

    def expected(self, decl: dict, path: YamlPath, dtype: str) -> tuple[int, ...]:
        """An int32 input's `expected` values: a list of whole numbers from 0 to 2^31 - 1."""
        value = decl["expected"]
        path = path + ("expected",)
        if dtype != "int32":
            raise self.fail(
                path,
                f"`expected` is for int32 inputs (a varlen mask's lengths); this one is {dtype}",
                "remove `expected`, or declare the lengths as dtype: int32",
            )
        ok = (
            isinstance(value, list)
            and value
            and all(
                isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_AXIS_SIZE
                for v in value
            )
        )
        if not ok:
            raise self.fail(
                path,
                f"expected a list of whole numbers from 0 to {MAX_AXIS_SIZE}, "
                f"found {_shown(value)}",
                "e.g. expected: [512, 1024, 0, 1]: one value per value of the tensor, row-major",
            )
        return tuple(value)

    def dtype(self, value: Any, path: YamlPath) -> str:
        if not isinstance(value, str) or value not in DTYPE_BYTES:
            raise self.fail(
                path,
                f"unknown dtype {_shown(value)}; expected one of {_names(DTYPE_BYTES)}",
                _did_you_mean(str(value), DTYPE_BYTES),
            )
        return str(value)

    def ops(self, value: Any, axes: Mapping[str, int], inputs: dict[str, Tensor]) -> list[Op]:
        if not isinstance(value, list) or not value:
            raise self.fail(
                ("ops",),
                f"expected a list of operations, found {_kind(value)}",
                "e.g. `- C = contract(A, B, over=k)`",
            )
        statements = []
        for i, text in enumerate(value):
            if isinstance(text, dict) and len(text) == 1:
                text = self.doc.raw(("ops", i))  # 'Y = f(X, over=a)' read as a mapping
            if not isinstance(text, str):
                raise self.fail(
                    ("ops", i),
                    f"expected an operation like 'Y = exp(X)', found {_kind(text)}",
                    "quote it if it contains a colon",
                )
            statements.append(parse_op_text(text, self.doc.where(("ops", i))))
        defined = dict(inputs)
        for i, st in enumerate(statements):
            self.name(st.out, ("ops", i), "result name")
            if st.out in defined:
                raise self.fail(
                    ("ops", i), f"'{st.out}' is defined twice", "give each result its own name"
                )
            defined[st.out] = Tensor(st.out, (), "fp32")  # shape filled in by _infer
        return self.infer_in_order(statements, axes, inputs, defined)

    def infer_in_order(
        self,
        statements: list[_Statement],
        axes: Mapping[str, int],
        inputs: dict[str, Tensor],
        defined: dict[str, Tensor],
    ) -> list[Op]:
        """Infer shapes in dependency order, so an op may refer to a later line.

        The order is that of repeated passes over the lines, each taking every line whose
        operands are known by then; computed with counts of unmet operands (Kahn's
        algorithm) so that it takes time linear in the ops, not quadratic.
        """
        producer = {st.out: i for i, st in enumerate(statements)}
        waiting = [0] * len(statements)
        dependents: list[list[int]] = [[] for _ in statements]
        for i, st in enumerate(statements):
            deps = {n for n in st.names() if n in defined and n not in inputs}
            if st.out in deps:
                waiting[i] = len(statements) + 1  # reads itself: never ready, a cycle
                continue
            for d in deps:
                dependents[producer[d]].append(i)
            waiting[i] = len(deps)
        now = [i for i, n in enumerate(waiting) if n == 0]
        later: list[int] = []
        known = dict(inputs)
        ops: dict[str, Op] = {}
        while now or later:
            if not now:
                now, later = sorted(later), []
            i = heapq.heappop(now)
            op = self.infer(statements[i], i, axes, known, defined)
            ops[op.out], known[op.out] = op, Tensor(op.out, op.axes, op.dtype)
            for j in dependents[i]:
                waiting[j] -= 1
                if waiting[j] == 0 and j > i:  # the current pass still reaches j
                    heapq.heappush(now, j)
                elif waiting[j] == 0:
                    later.append(j)
        if len(ops) < len(statements):
            pending = [i for i, st in enumerate(statements) if st.out not in ops]
            i = pending[0]
            cycle = " -> ".join(statements[j].out for j in pending)
            raise self.fail(
                ("ops", i),
                f"operations depend on each other in a cycle: {cycle} -> {statements[i].out}",
                "a result cannot feed its own inputs",
            )
        return list(ops.values())  # inference order is a topological order

    def infer(
        self,
        st: _Statement,
        i: int,
        axes: Mapping[str, int],
        known: dict[str, Tensor],
        defined: dict[str, Tensor],
    ) -> Op:
        """Check one parsed statement against the registry and infer its result's shape."""
        path: YamlPath = ("ops", i)
        sig = OPERATIONS.get(st.fn)
        if sig is None:
            raise self.fail(
                path,
                f"unknown operation '{st.fn}'; expected one of {_names(sorted(OPERATIONS))}",
                _did_you_mean(st.fn, OPERATIONS),
            )
        if st.fn == "max" and len(st.args) == 1:
            sig = _REDUCE_MAX
        if len(st.args) != sig.operands:
            raise self.fail(
                path,
                f"{st.fn} expects {sig.operands} operand(s), found {len(st.args)}: '{st.text}'",
            )
        for key in st.kwargs:
            if key not in sig.keywords:
                raise self.fail(
                    path,
                    f"{st.fn} has no argument '{key}'; expected "
                    f"{_names(sorted(sig.keywords)) or 'none'}",
                    _did_you_mean(key, sig.keywords),
                )
        for key in sig.required:
            if key not in st.kwargs:
                example = _EXAMPLES.get(st.fn, _EXAMPLES.get(sig.kind, ""))
                raise self.fail(path, f"{st.fn} needs '{key}='", f"e.g. {example}")
        if st.trailing_scale is not None and sig.kind != "contract":
            raise self.fail(
                path,
                f"a trailing '* {st.trailing_scale}' is only allowed on contract",
                f"scale in an op of its own: mul(X, {st.trailing_scale})",
            )

        def tensor(arg: Any, what: str) -> Tensor:
            if not isinstance(arg, str):
                raise self.fail(
                    path, f"expected a tensor as {what} of {st.fn}, found {_shown(arg)}"
                )
            if arg not in known:
                hint = _did_you_mean(arg, defined) or "declare it under inputs or compute it"
                raise self.fail(path, f"unknown tensor '{arg}' in '{st.text}'", hint)
            return known[arg]

        def over(t: Tensor) -> tuple[str, ...]:
            names = st.kwargs.get("over")
            names = [names] if isinstance(names, str) else names
            if (
                not isinstance(names, list)
                or not names
                or not all(isinstance(a, str) for a in names)
            ):
                raise self.fail(path, f"expected axis names for 'over', found {_shown(names)}")
            for a in names:
                self.known_axis(a, axes, path)
                if a not in t.axes:
                    raise self.fail(
                        path,
                        f"{st.fn} over '{a}', but {t.name} has axes {list(t.axes)}",
                        f"choose one of {_names(t.axes)}",
                    )
            return tuple(names)

        dtype_kw = st.kwargs.get("dtype")
        out_dtype = self.dtype(dtype_kw, path) if dtype_kw is not None else None
        params: dict[str, Any] = {}
        scale: tuple[str | float, ...] = ()
        kind = sig.kind
        fn = st.fn

        if kind == "contract":
            a, b = tensor(st.args[0], "first operand"), tensor(st.args[1], "second operand")
            shared = [x for x in a.axes if x in b.axes]
            if "over" in st.kwargs:
                red = over(a)
                for x in red:
                    if x not in b.axes:
                        raise self.fail(
                            path,
                            f"contract over '{x}', but {b.name} has axes {list(b.axes)}",
                            "both operands need the axis",
                        )
            elif len(shared) == 1:
                red = (shared[0],)
            else:
                raise self.fail(
                    path,
                    f"contract of {a.name} and {b.name} shares axes "
                    f"{shared}; expected 'over=' to say which are summed",
                    f"e.g. contract({a.name}, {b.name}, over={(shared or ['k'])[-1]})",
                )
            out_axes = tuple(x for x in a.axes + b.axes if x not in red)
            out_axes = tuple(dict.fromkeys(out_axes))
            scale = self.scales(st, path, known, out_axes)
            operands: tuple[str | float, ...] = (a.name, b.name)
            dtype = out_dtype or _contract_dtype(a.dtype, b.dtype, bool(scale))
            red_axes = red
        elif kind == "index":
            (axis,) = st.args
            if not isinstance(axis, str):
                raise self.fail(path, f"expected an axis name for index, found {_shown(axis)}",
                                "e.g. I = index(q)")  # fmt: skip
            self.known_axis(axis, axes, path)
            operands, red_axes, out_axes = (), (), (axis,)
            params = {"axis": axis}
            dtype = out_dtype or "int32"  # ranks below every float: sub(J, I) * slope is bf16
        elif kind in ("map", "softmax", "norm", "mask", "cast", "reduce"):
            src = tensor(st.args[0], "operand")
            operands = (src.name,)
            red_axes = over(src) if "over" in sig.keywords else ()
            out_axes = src.axes
            if kind == "reduce":
                out_axes = tuple(a for a in src.axes if a not in red_axes)
            if kind == "norm":
                params["eps"] = self.number(st.kwargs.get("eps", 1e-5), path, "eps")
                for key in ("weight", "bias"):
                    if key in st.kwargs:
                        w = tensor(st.kwargs[key], key)
                        if set(w.axes) - set(red_axes):
                            raise self.fail(
                                path,
                                f"{key} {w.name} has axes {list(w.axes)}; "
                                f"expected only the normalised axes "
                                f"{list(red_axes)}",
                            )
                        params[key] = w.name
            if kind == "mask":
                params = self.mask_params(st, path, src, known, axes)
            dtype = out_dtype or src.dtype
            if st.fn == "gelu" and "approximate" in st.kwargs:
                form = st.kwargs["approximate"]
                if form not in GELU_APPROXIMATIONS:
                    raise self.fail(
                        path,
                        f"gelu approximate={_shown(form)}; expected "
                        f"{_names(sorted(GELU_APPROXIMATIONS))}",
                        f"e.g. gelu({src.name}, approximate=tanh)",
                    )
                fn = GELU_APPROXIMATIONS[form]
            if kind == "cast":
                dtype = self.dtype(st.kwargs["to"], path)
                params["to"] = dtype
                scale = self.scales(st, path, known, out_axes)
        else:  # binary
            tensors = [tensor(arg, "operand") for arg in st.args if isinstance(arg, str)]
            if not tensors:
                raise self.fail(path, f"{st.fn} needs at least one tensor operand")
            for arg in st.args:
                if not isinstance(arg, str):
                    self.number(arg, path, "operand")
            out_axes = tuple(dict.fromkeys(a for t in tensors for a in t.axes))
            operands = tuple(st.args)
            dtype = out_dtype or max((t.dtype for t in tensors), key=_DTYPE_RANK.__getitem__)
            red_axes = ()
        return Op(
            out=st.out,
            fn=fn,
            kind=kind,
            operands=operands,
            over=red_axes,
            axes=out_axes,
            dtype=dtype,
            scale=scale,
            params=params,
            line=self.doc.line(path),
            text=st.text,
        )

    def mask_params(
        self,
        st: _Statement,
        path: YamlPath,
        src: Tensor,
        known: dict[str, Tensor],
        axes: Mapping[str, int],
    ) -> dict[str, Any]:
        """query and key axes of a mask, its alignment, window extents and lengths tensor."""
        params: dict[str, Any] = {}
        for key in ("query", "key"):
            ax = st.kwargs[key]
            if not isinstance(ax, str):
                raise self.fail(path, f"expected an axis name for '{key}', found {_shown(ax)}")
            self.known_axis(ax, axes, path)
            if ax not in src.axes:
                raise self.fail(
                    path,
                    f"{st.fn} {key} axis '{ax}' is not an axis of {src.name} {list(src.axes)}",
                    f"choose one of {_names(src.axes)}",
                )
            params[key] = ax
        if params["query"] == params["key"]:
            raise self.fail(path, f"{st.fn} needs two different axes for query and key")
        if st.fn in ("causal", "window"):
            align = st.kwargs.get("align", "end")
            if align not in MASK_ALIGN:
                raise self.fail(
                    path,
                    f"expected align=end or align=start, found {_shown(align)}",
                    "end: the last query sees the last key (bottom-right); start: top-left",
                )
            params["align"] = align
        if st.fn == "window":
            for key, default in (("left", None), ("right", 0)):
                n = st.kwargs.get(key, default)
                if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= MAX_AXIS_SIZE:
                    raise self.fail(
                        path,
                        f"expected a whole number of keys from 0 to {MAX_AXIS_SIZE} for "
                        f"'{key}', found {_shown(n)}",
                        "e.g. window(S, query=q, key=x, left=4095): the key itself and "
                        "the 4095 before it",
                    )
                params[key] = n
        if st.fn == "varlen":
            name = st.kwargs["lengths"]
            lengths = known.get(name) if isinstance(name, str) else None
            if lengths is None:
                raise self.fail(
                    path,
                    f"expected a lengths tensor for 'lengths', found {_shown(name)}",
                    "declare it as an input: L: {axes: [b], dtype: int32}",
                )
            if lengths.dtype != "int32":
                raise self.fail(
                    path,
                    f"lengths {lengths.name} is {lengths.dtype}; expected int32",
                    f"declare it as {lengths.name}: {{axes: {list(lengths.axes)}, dtype: int32}}",
                )
            own = [a for a in lengths.axes if a not in src.axes]
            rows = {params["query"], params["key"]} & set(lengths.axes)
            if len(own) > 1 or rows or (own and own[0] != lengths.axes[-1]):
                raise self.fail(
                    path,
                    f"lengths {lengths.name} has axes {list(lengths.axes)}; expected batch "
                    f"axes of {src.name} (padded sequences), then at most one axis of its "
                    "own (sequences packed along the query and key axes)",
                    f"e.g. {lengths.name}: {{axes: [b], dtype: int32}}, or axes: [n] with "
                    "`n` the number of packed sequences",
                )
            params["lengths"] = lengths.name
        return params

    def number(self, value: Any, path: YamlPath, what: str) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.fail(path, f"expected a number for {what}, found {_shown(value)}")
        if isinstance(value, int) and abs(value) > 2**1023:  # float() would overflow
            found = f"a whole number of {value.bit_length()} bits"
            raise self.fail(path, f"expected a finite number for {what}, found {found}")
        if value != value or value in (float("inf"), float("-inf")):
            raise self.fail(path, f"expected a finite number for {what}, found {value}")
        return float(value)

    def scales(
        self, st: _Statement, path: YamlPath, known: dict[str, Tensor], axes: tuple[str, ...]
    ) -> tuple:
        """The factors of `scale=`: numbers, or tensors over some of the result's `axes`."""
        raw = st.kwargs.get("scale", [])
        items = raw if isinstance(raw, list) else [raw]
        if st.trailing_scale is not None:
            items = items + [st.trailing_scale]
        out: list[str | float] = []
        for item in items:
            if isinstance(item, str):
                t = known.get(item)
                if t is None:
                    raise self.fail(
                        path,
                        f"unknown scale tensor '{item}'",
                        "declare it as an input with `axes: []`",
                    )
                if not set(t.axes) <= set(axes):
                    raise self.fail(
                        path,
                        f"scale {item} has axes {list(t.axes)}; expected a scalar or axes of "
                        f"the result {list(axes)}",
                        "per tensor `axes: []`, per row or column `axes: [m]`",
                    )
                out.append(item)
            else:
                out.append(self.number(item, path, "scale"))
        return tuple(out)

    def outputs(self, value: Any, inputs: list[Tensor], ops: list[Op]) -> tuple[str, ...]:
        names = self.name_list(value, ("outputs",), "outputs")
        if not names:
            raise self.fail(("outputs",), "expected at least one output, found none")
        results = {op.out for op in ops}
        input_names = {t.name for t in inputs}
        for i, name in enumerate(names):
            if name in input_names:
                raise self.fail(
                    ("outputs", i),
                    f"output '{name}' is an input; expected a computed result",
                    "outputs are results of ops",
                )
            if name not in results:
                raise self.fail(
                    ("outputs", i),
                    f"output '{name}' is not computed by any "
                    f"operation; results are {_names(results)}",
                    _did_you_mean(name, results) or "add an operation that computes it",
                )
        if len(set(names)) != len(names):
            raise self.fail(("outputs",), f"expected distinct outputs, found {names}")
        return tuple(names)

    def schedule(
        self, value: Any, axes: Mapping[str, int], ops: list[Op], outputs: tuple[str, ...]
    ) -> Schedule:
        value = self.mapping(value, ("schedule",), "schedule keys")
        self.keys(value, ("schedule",), _SCHEDULE_KEYS, ())
        lists = {}
        for key in ("group", "stream"):
            names = self.name_list(value.get(key, []), ("schedule", key), "axes")
            for i, a in enumerate(names):
                self.known_axis(a, axes, ("schedule", key, i))
            lists[key] = tuple(names)
        both = set(lists["group"]) & set(lists["stream"])
        if both:
            raise self.fail(
                ("schedule",),
                f"axis {sorted(both)[0]!r} is both grouped and streamed",
                "an axis is either grouped or streamed",
            )
        tiles = self.mapping(value.get("tiles", {}), ("schedule", "tiles"), "axes to sizes")
        for axis, size in tiles.items():
            path: YamlPath = ("schedule", "tiles", axis)
            self.known_axis(axis, axes, path)
            if isinstance(size, bool) or not isinstance(size, int) or size < 1:
                raise self.fail(path, f"expected a positive whole tile size, found {_shown(size)}")
            if size > axes[axis]:
                raise self.fail(
                    path,
                    f"tile {size} is larger than axis '{axis}' ({axes[axis]})",
                    f"use at most {axes[axis]}",
                )
        mat = self.name_list(
            value.get("materialize", []), ("schedule", "materialize"), "intermediates"
        )
        results = {op.out for op in ops}
        # an output that later ops read may be a kernel break too
        read = {n for op in ops for n in op.inputs}
        breakable = {r for r in results if r not in outputs or r in read}
        for i, name in enumerate(mat):
            if name not in breakable:
                inner = sorted(breakable)
                raise self.fail(
                    ("schedule", "materialize", i),
                    f"'{name}' is not an intermediate result; expected one of {_names(inner)}"
                    if inner
                    else f"'{name}' is not an intermediate result, and this diagram has none",
                    "materialize names intermediates, or outputs that later ops read",
                )
        return Schedule(
            lists["group"], lists["stream"], dict(tiles), tuple(mat), "materialize" in value
        )

    def check_used(self, inputs: list[Tensor], ops: list[Op], outputs: tuple) -> None:
        used = {n for op in ops for n in op.inputs}
        for t in inputs:
            if t.name not in used:
                raise self.fail(
                    ("inputs", t.name),
                    f"input '{t.name}' is never used",
                    "remove it or use it in an operation",
                )
        for op in ops:
            if op.out not in used and op.out not in outputs:
                raise self.fail(
                    ("ops",),
                    f"result '{op.out}' (line {op.line}) is computed but never used",
                    "list it under outputs or remove it",
                )


_EXAMPLES = {
    "reduce": "s = sum(X, over=n)",
    "softmax": "P = softmax(S, over=x)",
    "norm": "Y = layernorm(X, over=n, weight=W, bias=B)",
    "cast": "Y = cast(X, to=fp8_e4m3, scale=s)",
    "mask": "M = causal(S, query=q, key=x)",
    "window": "M = window(S, query=q, key=x, left=4095)",
    "varlen": "M = varlen(S, query=q, key=x, lengths=L)",
    "contract": "C = contract(A, B, over=k)",
}


def _contract_dtype(a: str, b: str, scaled: bool) -> str:
    """Contractions of 8-bit inputs give fp32 unless told (int8 x int8: its exact int32
    accumulator, unless scaled); otherwise the wider input type."""
    if a == b == "int8" and not scaled:
        return "int32"
    if DTYPE_BYTES[a] == 1 and DTYPE_BYTES[b] == 1:
        return "fp32"
    return max((a, b), key=_DTYPE_RANK.__getitem__)


def check_identifier(name: str, what: str, where: str) -> None:
    """Names reach generated C++, so they must be plain identifiers and not reserved."""
    if not _IDENT.match(name):
        raise SpecError(
            f"expected a {what} made of letters, digits and '_' starting with a "
            f"letter, found {_shown(name)}",
            where=where,
            hint="e.g. `Q`, `scores`, `d_head`",
        )
    if len(name) > MAX_NAME_LENGTH:
        raise SpecError(
            f"{what} '{name[:20]}...' is {len(name)} characters; expected at most "
            f"{MAX_NAME_LENGTH}",
            where=where,
        )
    if name in _RESERVED:
        raise SpecError(
            f"{what} '{name}' is reserved in generated C++", where=where, hint=f"e.g. '{name}_'"
        )
    if name.lower().startswith(("ncdc", "cuda")) or "__" in name:
        # Generated code names its own variables ncdc_*; C++ reserves names with '__'.
        raise SpecError(
            f"{what} '{name}' is reserved in generated C++",
            where=where,
            hint="names may not start with ncdc or cuda, nor contain '__'",
        )


# --------------------------------------------------------------------------------------
# The one-line operation syntax:  OUT = fn(arg, arg, key=value, key=[a, b]) [* number]
# `key: value` is read too, as in DESIGN.md's sketch; YAML takes a line with two ': ' as
# malformed unless quoted, so the diagrams use '='.

_TOKEN = re.compile(
    r"\s*(?:(?P<num>[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?)|(?P<name>[A-Za-z_]\w*)"
    r"|(?P<punct>[=(),:\[\]*]))"
)


_TENSOR_KEYWORDS = ("weight", "bias", "scale", "lengths")  # keyword arguments that name tensors


@dataclass(frozen=True)
class _Statement:
    out: str
    fn: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    trailing_scale: float | None
    text: str

    def names(self) -> list[str]:
        """Tensor names this statement reads (not axis or dtype names: `over=m`, `to=bf16`)."""
        if self.fn == "index":
            return []  # its operand is an axis
        found = [a for a in self.args if isinstance(a, str)]
        for key, v in self.kwargs.items():
            if key not in _TENSOR_KEYWORDS:
                continue
            found += (
                [v]
                if isinstance(v, str)
                else [x for x in v if isinstance(x, str)]
                if isinstance(v, list)
                else []
            )
        return found


def parse_op_text(text: str, where: str) -> _Statement:
    """Parse one operation line; errors say what was expected at which character."""
    tokens = _tokenize(text, where)
    pos = 0

    def fail(expected: str) -> SpecError:
        found = f"'{tokens[pos][1]}'" if pos < len(tokens) else "the end"
        return SpecError(
            f"cannot parse '{text.strip()}': expected {expected}, found {found}",
            where=where,
            hint="write e.g. 'C = contract(A, B, over=k)'",
        )

    def take(kind: str, value: str | None = None) -> str:
        nonlocal pos
        if pos < len(tokens) and tokens[pos][0] == kind and value in (None, tokens[pos][1]):
            pos += 1
            return tokens[pos - 1][1]
        raise fail(f"'{value}'" if value else {"name": "a name", "num": "a number"}[kind])

    def peek(value: str) -> bool:
        return pos < len(tokens) and tokens[pos][1] == value

    def value() -> Any:
        nonlocal pos
        if pos < len(tokens) and tokens[pos][0] == "num":
            return _number(take("num"))
        if peek("["):
            take("punct", "[")
            items = [] if peek("]") else [value()]
            while peek(","):
                take("punct", ",")
                items.append(value())
            take("punct", "]")
            return items
        return take("name")

    out = take("name")
    take("punct", "=")
    fn = take("name")
    take("punct", "(")
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    while not peek(")"):
        if args or kwargs:
            take("punct", ",")
        if pos + 1 < len(tokens) and tokens[pos][0] == "name" and tokens[pos + 1][1] in "=:":
            key = take("name")
            take("punct", tokens[pos][1])
            if key in kwargs:
                raise SpecError(f"argument '{key}' given twice in '{text.strip()}'", where=where)
            kwargs[key] = value()
        elif kwargs:
            raise fail("'key=value' (positional operands come first)")
        else:
            args.append(value())
    take("punct", ")")
    trailing = None
    if peek("*"):
        take("punct", "*")
        trailing = _number(take("num"))
    if pos != len(tokens):
        raise fail("the end of the operation")
    # Without its comment the text holds only the tokens read above, folded onto one line:
    # it reaches comments in generated C++, where a line break or a '\\' would end them.
    return _Statement(out, fn, tuple(args), kwargs, trailing, " ".join(_code(text).split()))


def _code(text: str) -> str:
    """An operation's text without its '# comment'."""
    return text.split("#", 1)[0].rstrip()


def _tokenize(text: str, where: str) -> list[tuple[str, str]]:
    tokens = []
    pos = 0
    text = _code(text)
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            pos += len(text[pos:]) - len(text[pos:].lstrip())
            raise SpecError(
                f"unexpected character {text[pos]!r} at column {pos + 1} of "
                f"'{excerpt(text.strip(), 80)}'",
                where=where,
                hint="operations look like 'Y = gelu(X)'",
            )
        kind = m.lastgroup or "punct"
        tokens.append((kind, m.group(kind)))
        pos = m.end()
    return tokens


def _number(text: str) -> float | int:
    return int(text) if re.fullmatch(r"[-+]?\d+", text) else float(text)


# --------------------------------------------------------------------------------------


def _kind(value: Any) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, bool):
        return f"the boolean {value}"
    if isinstance(value, (int, float)):
        return f"the number {value}"
    if isinstance(value, str):
        return f"the text {_shown(value)}"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def _shown(value: Any) -> str:
    """A value as an error quotes it: its repr, one line, cut short (see `excerpt`)."""
    return excerpt(repr(value))


def _names(names: Iterable[str]) -> str:
    return ", ".join(names)


def _did_you_mean(word: str, choices: Iterable[str]) -> str | None:
    match = difflib.get_close_matches(word, list(choices), n=1)
    return f"did you mean '{match[0]}'?" if match else None
