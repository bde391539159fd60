"""The attention family: fused forward attention over a query axis longer than a decode
step, in FlashAttention-2 order on mma.sync (ncdc.families.attention.fa2), with its keys
split across blocks for grids too small for the GPU (splitk), and in FlashAttention-3 order
on sm_90a (wgmma). The model picks among their candidates; the kernel's reading (roles,
score path, masks) is shared with the decode family (ncdc.families.attention.core).

    >>> from ncdc.language.load import load_diagram
    >>> from ncdc.hardware.load import load_hardware
    >>> from ncdc.plan.search import plan_diagram
    >>> plan = plan_diagram(load_diagram("diagrams/attention.yaml"), load_hardware("h200"))
    >>> FAMILY.render(plan.kernels[0], plan).launches[0].kernel.endswith("sm90a")
    True
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from ncdc.errors import PlanError
from ncdc.families.attention import fa2
from ncdc.families.attention import splitk as attention_splitk
from ncdc.families.attention import wgmma as attention_wgmma
from ncdc.families.attention.core import (
    DECODE_MAX_QUERIES,
    TILES,
    attention_group,
    attention_roles,
    batch_count,
    read_attention,
    require_streamed,
)
from ncdc.families.attention.mix import attention_mix, fa3_mix, plan_masked_share
from ncdc.families.base import KernelSource, no_arch_problem
from ncdc.model.launch import Candidate, Family

if TYPE_CHECKING:
    from ncdc.hardware.machine import Hardware
    from ncdc.language.diagram import Diagram
    from ncdc.model.graph import Kernel
    from ncdc.model.issue import LoopMix
    from ncdc.model.structure import KernelModel
    from ncdc.model.values import KernelPlan, Plan


class AttentionFamily:
    """Fused forward attention over a query axis longer than a decode step."""

    name = "attention"
    tiles: Mapping[str, tuple[int, ...]] = TILES
    baseline = "attention"

    def classify(self, diagram: Diagram, kernel: Kernel) -> Family | None:
        roles = attention_roles(diagram, kernel)
        if roles is None or diagram.axes[roles["q"][0]] <= DECODE_MAX_QUERIES:
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
        require_streamed(model, family, streams)
        at = read_attention(family, model.kernel, model.diagram, attention_wgmma.offered(hw))
        batch = batch_count(at, model.diagram.axes)
        if at.v_dtype:  # fp8 Q and K: the sm_90a kernel alone runs them
            group = attention_group(model, family, attention_wgmma.BQ, fixed)
            hopper = attention_wgmma.candidates(model, family, hw, streams, fixed, at, batch, group)
            if not hopper:
                stored = f"{at.q}, {at.k} and {at.v}" if at.o_dtype else f"{at.q} and {at.k}"
                raise PlanError(
                    f"attention kernel {model.kernel.name}: fp8 Q and K run only in the "
                    f"sm_90a kernel, which needs 128 queries a block, heads in multiples of "
                    f"32 bytes up to 256 values (d_v of 16), Q, K, V and O as [batch..., rows, "
                    f"head], and for fp8 V key tiles of 128, d_v 128 and no tensor the score "
                    f"path reads along the keys (a consumer's registers)",
                    hint=f"store {stored} as {at.out_dtype}, or fix the tiles "
                    f"at q: 128 and x: {'128' if at.o_dtype else '64 or 128'}",
                )
            return hopper
        out = fa2.candidates(model, family, at, streams, fixed, batch)
        # a grid too small for the GPU: keys split across blocks (attention_splitk.py)
        split = attention_splitk.candidates(model, hw, at, out)
        # sm_90a: the FlashAttention-3 variant competes with these (attention_wgmma.py)
        group = attention_group(model, family, attention_wgmma.BQ, fixed)
        hopper = attention_wgmma.candidates(model, family, hw, streams, fixed, at, batch, group)
        return out + split + hopper

    def render(self, kp: KernelPlan, plan: Plan) -> KernelSource:
        diagram = plan.graph.diagram
        c = kp.candidate
        assert c is not None, "a GPU plan carries its candidate"
        at = read_attention(kp.family, kp.kernel, diagram, fp8=attention_wgmma.is_wgmma(c))
        if attention_wgmma.is_wgmma(c):
            return attention_wgmma.render(kp, plan, at)
        return fa2.render(kp, plan, at)

    def tile_axes(self, family: Family) -> list[tuple[str, tuple[int, ...]]]:
        return [(family.axes("q")[-1], TILES["g_q"]), (family.axes("x")[0], TILES["s_x"])]

    def loop_mix(
        self, model: KernelModel, family: Family, c: Candidate, hw: Hardware
    ) -> LoopMix | None:
        """The FlashAttention-3 consumer's key tile (`fa3_mix`) or the FlashAttention-2
        order's key chunk (`attention_mix`)."""
        if attention_wgmma.is_wgmma(c):
            return fa3_mix(family, c, model.sizes, model.tensor_dtype, model)
        return attention_mix(family, c, model.sizes, model)

    masked_share = staticmethod(plan_masked_share)

    def arch_problem(self, diagram: Diagram, kp: KernelPlan, sm: int) -> str:
        if kp.candidate is not None and attention_wgmma.is_wgmma(kp.candidate):
            return attention_wgmma.arch_problem(kp.kernel.name, sm)
        return no_arch_problem(diagram, kp, sm)


FAMILY = AttentionFamily()
