"""The SASS in the plan's time: a compiled kernel's main loop counted by instruction class
(`LoopMix`), for the model's issue-slot term in place of the family's estimate, and kept
beside the compile cache so that `ncdc cost` of the same plan finds it.
"""

from __future__ import annotations

import dataclasses
import subprocess
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from ncdc.backends.sass import (
    MASKED,
    Instruction,
    count_classes,
    find_tool,
    full_tile_path,
    main_loop,
    main_loops,
    mma_flops,
    parse_sass,
)
from ncdc.errors import CompileError

if TYPE_CHECKING:
    from ncdc.model.issue import LoopMix
    from ncdc.model.values import Plan


def loop_mix(loop: Sequence[Instruction]) -> LoopMix:
    """The main loop of one warp as the plan's time counts it (ncdc.model.issue): issue slots
    per class and the tensor FLOPs of its MMAs (`mma_flops`: m16n8k16 = 4096), on the path
    a full tile takes (`full_tile_path`).

        >>> text = "/*0100*/ HMMA.16816.F32.BF16 R8, R4, R6, R8 ; /*0110*/ @!P0 BRA 0x100 ;"
        >>> mix = loop_mix(main_loop(parse_sass(text)))
        >>> mix.slots, mix.tensor_flops, mix.source
        (2.0, 4096.0, 'from the SASS')
    """
    from ncdc.model.issue import SASS, LoopMix

    loop = full_tile_path(loop)
    return LoopMix(count_classes(loop), float(sum(mma_flops(i) for i in loop)), SASS)


def cached_mixes(plan: Plan, arch: str = "") -> dict[int, LoopMix]:
    """Kernel index -> its main loop's mix, for every kernel of `plan` whose cubin the
    compile cache holds (put there by `ncdc compile` of this very plan for `arch`, the
    profile's own by default); {} when none is compiled, the SASS tools are missing, or
    the cache cannot be read. Nothing is compiled here."""
    from ncdc.backends.cache import find_cached
    from ncdc.render import render_plan

    hw = plan.graph.hardware
    if not hw.is_gpu or find_tool("cuobjdump") is None or find_tool("nvdisasm") is None:
        return {}
    module = render_plan(plan)
    found = find_cached(module.source, arch or hw.arch, module.cache_name)
    if found is None:
        return {}
    try:
        functions = main_loops(found.cubin)
    except (CompileError, OSError, subprocess.SubprocessError):
        return {}
    return mixes_by_kernel(plan, functions, [launch.kernel for launch in module.launches])


def mixes_by_kernel(
    plan: Plan, functions: Mapping[str, str], launches: Sequence[str]
) -> dict[int, LoopMix]:
    """Kernel index -> the mix of its first launch's function in `functions` (name -> its
    SASS; `launches`: the module's kernel names in launch order), for the kernels whose
    loop does tensor work (the others keep their estimate). An attention kernel's mix is
    its hot loop's and its masked loop's (`main_loops`), weighted by the share of chunk
    iterations the plan's tiles give each (its family's `masked_share`). A loop whose MMAs
    cover padding (FLOPs per iteration above its family's estimate) counts the estimate's."""
    from ncdc.families import get_family

    out: dict[int, LoopMix] = {}
    first = 0
    for i, kp in enumerate(plan.kernels):
        c = kp.candidate
        if c is None or first >= len(launches):
            continue
        name = launches[first]
        first += len(c.launches)
        if name in functions:
            mix = loop_mix(main_loop(parse_sass(functions[name])))
            family = get_family(kp.family.name)
            axes = plan.graph.diagram.axes
            share = family.masked_share(kp, axes) if name + MASKED in functions else 0.0
            if share:
                masked = loop_mix(parse_sass(functions[name + MASKED]))
                if masked.tensor_flops == mix.tensor_flops:
                    mix = blend(mix, masked, share)
            est = kp.instructions
            if mix.tensor_flops and est is not None and 0 < est.tensor_flops < mix.tensor_flops:
                # the loop multiplies padding too (a head of 96 as 128 columns of P V): the
                # iterations are the diagram's FLOPs over the estimate's useful ones
                mix = dataclasses.replace(mix, tensor_flops=est.tensor_flops)
            if mix.tensor_flops:
                out[i] = mix
    return out


def blend(hot: LoopMix, masked: LoopMix, share: float) -> LoopMix:
    """The mix of a loop whose iterations run `hot` and, `share` of them, `masked` (the
    two copies of the attention loop do the same MMAs), per class."""
    from ncdc.model.issue import LoopMix

    classes = {
        k: (1 - share) * hot.classes.get(k, 0) + share * masked.classes.get(k, 0)
        for k in dict.fromkeys([*hot.classes, *masked.classes])
    }
    return LoopMix(classes, hot.tensor_flops, hot.source)
