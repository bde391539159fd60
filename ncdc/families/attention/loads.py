"""Q and K computed as their tiles load: the diagram's elementwise ops between the kernel's
inputs and the operands of the first contraction (RoPE: the head rolled by half with a
sign, against cos and sin tables, gathered by position or computed from positions; a
scale; a cast), fused into the mma.sync attention kernels.

For each such operand the kernel defines a lambda (row, head index) -> value
(templates/attention_scores.j2's `loads`), and ncdc_attention.cuh's fill_tile stores its
values, rounded to the operand's type, where a cp.async would have copied the tile: once
per query block for Q (and per split of the keys), once per key tile and query block for
K, which the model prices as the ops recomputed (`recomputed_loads`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ncdc.errors import PlanError
from ncdc.families.codegen import (
    STATUS,
    Pointers,
    Statement,
    indirect_sources,
    needed_ops,
    offset_expr,
    op_statements,
    value_reads,
)
from ncdc.language.diagram import Diagram, Op

if TYPE_CHECKING:
    from ncdc.model.graph import Kernel


LOAD_KINDS = ("map", "binary", "cast", "index", "gather", "slice", "permute")


@dataclass(frozen=True)
class Load:
    """One operand (Q or K) computed as its tile loads."""

    role: str  # "q" or "k": the lambda's name in the kernel
    operand: str  # the contraction's operand the ops compute
    row: str  # the axis along the tile's rows (queries or keys)
    head: str  # the head axis (its size compiled in)
    head_size: int
    statements: tuple[Statement, ...]  # over ncdc_i_<axis>, the kernel's sizes and inputs
    result: str  # C++: the value
    ops: tuple[str, ...]  # the results of the ops it runs
    inputs: tuple[str, ...]  # the kernel inputs it reads
    axes: tuple[str, ...]  # the size parameters its addresses need, but the head
    gathers: bool  # it reads through an index (the status word)


def operand_ops(kernel: Kernel, operands: list[str], skip: set[str]) -> list[Op]:
    """The ops that compute `operands` from the kernel's inputs, but for those in `skip`
    (K and V gathered through a block table, which the kernels page themselves)."""
    wanted = [n for n in operands if n not in kernel.inputs and n not in skip]
    return needed_ops(kernel.ops, wanted, kernel.inputs)


def operand_load(
    kernel: Kernel, diagram: Diagram, role: str, operand: str, allowed: tuple[str, ...],
    row: str, head: str, skip: set[str],
) -> Load | None:  # fmt: skip
    """The load of `operand`, or None where it is an input (or a paged gather); PlanError
    for ops no tile load can run (a reduction, an axis beyond the batch, row and head
    axes `allowed`)."""
    chain = operand_ops(kernel, [operand], skip)
    if not chain:
        return None
    unfused = f"or compute {operand} in a kernel of its own: schedule: {{materialize: [{operand}]}}"
    for op in chain:
        if op.kind not in LOAD_KINDS:
            raise PlanError(
                f"attention kernel {kernel.name}: {op.out} = {op.fn}(...) computes the operand "
                f"{operand}; a tile load runs elementwise ops only",
                hint=unfused,
            )
        extra = [a for a in op.axes if a not in allowed]
        if extra:
            raise PlanError(
                f"attention kernel {kernel.name}: {op.out} = {op.fn}(...) runs over {extra[0]}, "
                f"which the tile of {operand} lacks",
                hint=unfused,
            )

    def index(a: str) -> str:
        return f"ncdc_i_{a}"

    def value(n: str) -> str:
        if n not in kernel.inputs:
            return f"ncdc_e_{n}"
        at = offset_expr(diagram.tensor(n).axes, index)
        return f"ncdc::to_float(ncdc::ld_global({n} + {at}))"

    pointers = Pointers(lambda n: n, STATUS, frozenset(kernel.inputs))
    statements: list[Statement] = []
    for op in chain:
        statements += op_statements(op, value, index, f"ncdc_e_{op.out}", pointers, diagram)
    inputs = tuple(dict.fromkeys([*value_reads(chain, kernel.inputs), *indirect_sources(chain)]))
    axes = tuple(dict.fromkeys(a for n in inputs for a in diagram.tensor(n).axes if a != head))
    return Load(
        role, operand, row, head, diagram.axes[head], tuple(statements), f"ncdc_e_{operand}",
        tuple(op.out for op in chain), inputs, axes, any(op.kind == "gather" for op in chain),
    )  # fmt: skip


def recomputed_loads(loads: tuple[Load | None, ...], times: dict[str, float]
                     ) -> tuple[tuple[str, float], ...]:  # fmt: skip
    """`Candidate.recomputes` of the loads: each op of a load computed `times[role]` for
    each of its values (K's tile once per query block and query head that shares it, Q's
    once per split of the keys), an op both loads run (RoPE's sign) in both, so beyond
    once by the sum less one."""
    count: dict[str, float] = {}
    for ld in loads:
        if ld is not None:
            for name in ld.ops:
                count[name] = count.get(name, 0.0) + times[ld.role]
    return tuple((name, n - 1) for name, n in count.items() if n > 1)
