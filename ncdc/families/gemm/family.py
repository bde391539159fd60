"""The gemm family: C = epilogue(scale * A B) for one contraction and the maps after it.

Its kernels: the cp.async GEMM on mma.sync (or fp32 FMAs on CUDA cores) in
ncdc.families.gemm.core, the split-K form for grids too small for the GPU (splitk), and the
TMA + wgmma kernel on sm_90a (wgmma). The model picks among their candidates.

    >>> from ncdc.language.load import load_diagram
    >>> from ncdc.hardware.load import load_hardware
    >>> from ncdc.plan.search import plan_diagram
    >>> plan = plan_diagram(load_diagram("diagrams/matmul.yaml"), load_hardware("h100"),
    ...                     tiles={"m": 64, "n": 64, "k": 32})
    >>> FAMILY.render(plan.kernels[0], plan).launches[0].kernel  # doctest: +ELLIPSIS
    'matmul_gemm_bf16_m64_n64_k32_w..._s..._ak_bn'
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from ncdc.errors import PlanError
from ncdc.families.base import KernelSource, no_masked_loop
from ncdc.families.gemm import splitk as gemm_splitk
from ncdc.families.gemm import wgmma as gemm_wgmma
from ncdc.families.gemm.core import (
    TILES,
    block_sum,
    contraction,
    epilogue_context,
    mma_candidates,
    reaches,
    read_operands,
    render,
    row_gather,
    tiles_of,
    within_block_level,
)
from ncdc.families.gemm.mix import gemm_mix, wgmma_mix
from ncdc.hardware.arch import MMA_SYNC_MIN_SM
from ncdc.model.launch import Candidate, Family

if TYPE_CHECKING:
    from ncdc.hardware.machine import Hardware
    from ncdc.language.diagram import Diagram
    from ncdc.model.graph import Kernel
    from ncdc.model.issue import LoopMix
    from ncdc.model.structure import KernelModel
    from ncdc.model.values import KernelPlan, Plan


class GemmFamily:
    """One contraction of two tensors, then elementwise ops on its result (an epilogue)."""

    name = "gemm"
    tiles: Mapping[str, tuple[int, ...]] = TILES
    baseline = "gemm"

    def classify(self, diagram: Diagram, kernel: Kernel) -> Family | None:
        contracts = [op for op in kernel.ops if op.kind == "contract"]
        # the contraction first, or after the gather of its first operand's rows
        first = kernel.ops[0]
        gathers = (
            first.kind == "gather" and len(kernel.ops) > 1 and kernel.ops[1].kind == "contract"
        )
        if len(contracts) != 1 or kernel.ops[int(gathers)] is not contracts[0]:
            return None
        if gathers:
            try:
                row_gather(diagram, kernel)
            except PlanError:
                return None  # the kernel-break search saves the gathered rows
        mm = contracts[0]
        operands = tuple(o for o in mm.operands if isinstance(o, str))
        if len(operands) != 2:
            return None
        chain = {mm.out}
        after = kernel.ops[kernel.ops.index(mm) + 1 :]
        blocks = block_sum(diagram, mm, after[0]) if after else ()
        if blocks:
            chain.add(after[0].out)
            after = after[1:]
        for op in after:
            # a causal mask masks C by its row and column (a backward pass recomputing P)
            if op.kind not in ("map", "binary", "cast") and op.fn != "causal":
                return None
            # An epilogue keeps the tile of the result: other operands broadcast into it. An
            # op may read only such side operands (silu(G) of a saved gate G, for SwiGLU):
            # it is computed per output element like the rest.
            for name in op.inputs:
                if name not in chain and not set(diagram.tensor(name).axes) <= set(mm.axes):
                    return None
            chain.add(op.out)
        if kernel.ops[-1].out != mm.out and not reaches(kernel.ops, mm.out):
            return None
        a, b = (diagram.tensor(n).axes for n in operands)
        out = mm.axes
        roles = {
            "batch": tuple(x for x in out if x in a and x in b and x not in blocks),
            "m": tuple(x for x in out if x in a and x not in b),
            "n": tuple(x for x in out if x in b and x not in a),
            "k": mm.over,
            "blocks": blocks,
        }
        if not roles["m"] or not roles["n"] or not roles["k"]:
            return None
        return Family(self.name, roles, TILES)

    def candidates(
        self,
        model: KernelModel,
        family: Family,
        hw: Hardware,
        streams: tuple[str, ...],
        fixed: Mapping[str, int],
    ) -> list[Candidate]:
        ops = read_operands(family, model.kernel, model.diagram)
        # refuses an epilogue the template cannot run, now
        epilogue_context(model.kernel, model.diagram, ops)
        # sm_90a: the TMA + wgmma variant competes with these (ncdc/families/gemm/wgmma.py)
        hopper = gemm_wgmma.candidates(model, family, hw, streams, fixed, ops)
        if ops.blocks:
            # only the wgmma kernel adds each block's partial sum into a total
            if not hopper:
                raise PlanError(
                    f"{model.kernel.name} sums a contraction's blocks ({ops.blocks}) as it "
                    f"goes: {gemm_wgmma.block_needs(ops)}",
                    hint=f"save {contraction(model.kernel).out} (the break search does)",
                )
            return hopper
        out = mma_candidates(model, family, ops, streams, fixed)
        # a grid too small for the GPU: k split across blocks (ncdc/families/gemm/splitk.py)
        kept = within_block_level(model, hw, out)
        split = gemm_splitk.candidates(model, hw, fixed, ops, kept)
        return kept + hopper + split

    def render(self, kp: KernelPlan, plan: Plan) -> KernelSource:
        if kp.candidate is not None and gemm_splitk.is_splitk(kp.candidate):
            ops = read_operands(kp.family, kp.kernel, plan.graph.diagram)
            epilogue = epilogue_context(kp.kernel, plan.graph.diagram, ops)
            return gemm_splitk.render(kp, plan, ops, epilogue, tiles_of(kp.candidate))
        if kp.candidate is not None and gemm_wgmma.is_wgmma(kp.candidate):
            ops = read_operands(kp.family, kp.kernel, plan.graph.diagram)
            epilogue = epilogue_context(kp.kernel, plan.graph.diagram, ops)
            return gemm_wgmma.render(kp, plan, ops, epilogue)
        return render(kp, plan)

    def tile_axes(self, family: Family) -> list[tuple[str, tuple[int, ...]]]:
        return [(family.axes("m")[-1], TILES["g_m"]), (family.axes("n")[-1], TILES["g_n"])]

    def loop_mix(
        self, model: KernelModel, family: Family, c: Candidate, hw: Hardware
    ) -> LoopMix | None:
        """The Hopper GEMM's consumer k tile (`wgmma_mix`), the mma.sync one (`gemm_mix`),
        none for the fp32 kernel on CUDA cores."""
        if gemm_wgmma.is_wgmma(c):
            return wgmma_mix(c, model.tensor_dtype)
        if not dict(c.params).get("simt", 1):
            return gemm_mix(family, c, model.tensor_dtype, hw, model)
        return None

    masked_share = staticmethod(no_masked_loop)

    def arch_problem(self, diagram: Diagram, kp: KernelPlan, sm: int) -> str:
        if kp.candidate is not None and gemm_wgmma.is_wgmma(kp.candidate):
            return gemm_wgmma.arch_problem(kp.kernel.name, sm)
        mm = contraction(kp.kernel)
        for dtype in sorted({diagram.tensor(n).dtype for n in mm.inputs}):
            least = MMA_SYNC_MIN_SM.get(dtype, 0)
            if sm < least and dtype == "int8":
                return (
                    f"{kp.kernel.name} multiplies int8 on tensor cores with the m16n8k32 "
                    f"shape, which sm_{sm} lacks (it needs sm_{least} or newer)"
                )
            if sm < least:
                return (
                    f"{kp.kernel.name} multiplies {dtype} on tensor cores, which sm_{sm} "
                    f"lacks (fp8 mma.sync needs sm_{least} or newer)"
                )
        return ""


FAMILY = GemmFamily()
