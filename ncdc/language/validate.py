"""Validation: one YAML document walked into a `Diagram`, failing at the first problem with
the file, the line, the YAML path, what was expected and what was found."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ncdc.language.checks import Checks
from ncdc.language.diagram import FORMAT_VERSION, MAX_AXIS_SIZE, Diagram, Op, Schedule, Tensor
from ncdc.language.infer import infer_ops
from ncdc.language.parse import parse_op_text
from ncdc.language.text import describe, did_you_mean, listing, shown
from ncdc.language.yamlsrc import YamlPath

_TOP_KEYS = {"ncdc", "name", "doc", "axes", "inputs", "ops", "outputs", "schedule"}
_REQUIRED_TOP = ("ncdc", "name", "axes", "inputs", "ops", "outputs")
_INPUT_KEYS = {"axes", "dtype", "doc", "expected"}
_SCHEDULE_KEYS = {"group", "stream", "tiles", "materialize", "deterministic"}


class Validator(Checks):
    """Walks one YAML document and builds the Diagram, section by section."""

    def diagram(self) -> Diagram:
        data = self.doc.data
        if not isinstance(data, dict):
            raise self.fail(
                (),
                f"expected a mapping of diagram keys, found {describe(data)}",
                "start with `ncdc: 1` and `name:`",
            )
        self.keys(data, (), _TOP_KEYS, _REQUIRED_TOP)
        if data["ncdc"] != FORMAT_VERSION or isinstance(data["ncdc"], bool):
            raise self.fail(
                ("ncdc",),
                f"expected format version {FORMAT_VERSION}, found {shown(data['ncdc'])}",
                "write `ncdc: 1`",
            )
        name = self.name(data["name"], ("name",), "diagram name")
        doc = data.get("doc", "")
        if not isinstance(doc, str):
            raise self.fail(("doc",), f"expected text, found {describe(doc)}")
        axes = self.axes(data["axes"])
        inputs = self.inputs(data["inputs"], axes)
        ops = self.ops(data["ops"], axes, {t.name: t for t in inputs})
        outputs = self.outputs(data["outputs"], inputs, ops)
        schedule = self.schedule(data.get("schedule", {}), axes, ops, outputs)
        self.check_used(inputs, ops, outputs)
        diagram = Diagram(
            name, doc.strip(), axes, tuple(inputs), tuple(ops), outputs, schedule, self.doc.source
        )
        problem = expected_problem(diagram)
        if problem:
            raise self.fail(("inputs", problem[0], "expected"), problem[1], problem[2])
        return diagram

    # -- small checks ----------------------------------------------------------------

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
                    f"expected a whole number as the size of '{axis}', found {describe(size)}",
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
                f"expected a list of whole numbers from 0 to {MAX_AXIS_SIZE}, found {shown(value)}",
                "e.g. expected: [512, 1024, 0, 1]: one value per value of the tensor, row-major",
            )
        return tuple(value)

    def ops(self, value: Any, axes: Mapping[str, int], inputs: dict[str, Tensor]) -> list[Op]:
        if not isinstance(value, list) or not value:
            raise self.fail(
                ("ops",),
                f"expected a list of operations, found {describe(value)}",
                "e.g. `- C = contract(A, B, over=k)`",
            )
        statements = []
        for i, text in enumerate(value):
            if isinstance(text, dict) and len(text) == 1:
                text = self.doc.raw(("ops", i))  # 'Y = f(X, over=a)' read as a mapping
            if not isinstance(text, str):
                raise self.fail(
                    ("ops", i),
                    f"expected an operation like 'Y = exp(X)', found {describe(text)}",
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
            defined[st.out] = Tensor(st.out, (), "fp32")  # shape filled in by the inference
        return infer_ops(self, statements, axes, inputs, defined)

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
                    f"operation; results are {listing(results)}",
                    did_you_mean(name, results) or "add an operation that computes it",
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
                raise self.fail(path, f"expected a positive whole tile size, found {shown(size)}")
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
                    f"'{name}' is not an intermediate result; expected one of {listing(inner)}"
                    if inner
                    else f"'{name}' is not an intermediate result, and this diagram has none",
                    "materialize names intermediates, or outputs that later ops read",
                )
        deterministic = value.get("deterministic", False)
        if not isinstance(deterministic, bool):
            raise self.fail(
                ("schedule", "deterministic"),
                f"expected true or false, found {shown(deterministic)}",
                "deterministic: true asks for sums in one order, the same bits every run",
            )
        return Schedule(
            lists["group"], lists["stream"], dict(tiles), tuple(mat), "materialize" in value,
            deterministic,
        )  # fmt: skip

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


def expected_problem(diagram: Diagram) -> tuple[str, str, str] | None:
    """(input, what is wrong, what to write) for expected values that do not fit the
    diagram's sizes: one per value of the tensor, lengths a varlen mask can hold (packed
    sequences within the query and key axes, padded ones at most the key axis), and a
    grouped contraction's offsets (in order, within its rows)."""
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
            if op.grouped and op.params["offsets"] == t.name:
                problem = offsets_problem(t.expected, op.params["rows"], diagram)
                if problem:
                    return (t.name, f"expected offsets of {t.name} {problem[1]}", problem[2])
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


def offsets_problem(
    ends: Sequence[float], rows: str, diagram: Diagram
) -> tuple[int, str, str] | None:
    """(the first bad entry, what is wrong with it, what to write) for a grouped
    contraction's offsets out of order or outside the rows they split, or None."""
    limit = diagram.axes[rows]
    before = 0.0
    for e, end in enumerate(ends):
        if end < before:
            return (
                e,
                f"go down at group {e} ({before:g} then {end:g})",
                "list each group's end at or after the one before, the first at least 0 "
                "(a running sum of the groups' rows)",
            )
        if end > limit:
            return (
                e,
                f"reach {end:g} at group {e}, past {rows} = {limit}",
                f"keep them at most {limit}, or raise the axis: --set {rows}={end:g}",
            )
        before = end
    return None
