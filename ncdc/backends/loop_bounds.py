"""Static bounds from a kernel's SASS: what its main loop's instructions allow without a
GPU (issue slots, shared-memory bytes, exponentials, memory latency round trips), as a
fraction of the tensor peak, for `ncdc compile`'s summary and benchmarks/static_speed.py.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ncdc.backends.sass import (
    Instruction,
    _global_bytes,
    _smem_bytes,
    count_classes,
    main_loop,
    mma_flops,
    parse_sass,
    split_functions,
)
from ncdc.hardware.arch import SUB_PARTITIONS
from ncdc.units import ceil_div

MUFU_LANES = 4  # per sub-partition (16 per SM)


SMEM_BYTES_PER_CLOCK = 128  # per SM


@dataclass(frozen=True)
class LoopBound:
    """Cycles of one SM per iteration of the main loop, per resource, and the largest;
    with what one warp's iteration moves and computes (the static bounds' numerators)."""

    mix: Mapping[str, int]
    cycles: Mapping[str, float]
    tensor_flops: int = 0  # per warp and iteration: the HMMAs' FLOPs
    global_bytes: int = 0  # per warp and iteration: LDG, STG and LDGSTS at 32 lanes
    smem_wavefronts: int = 0  # per warp and iteration, conflict-free (128 B each)
    round_trips: int = 0  # serialised global-load round trips per iteration (`round_trips`)
    load_bytes: int = 0  # per warp and iteration: the global loads' share of global_bytes

    @property
    def issue_slots(self) -> int:
        return sum(self.mix.values())

    @property
    def flops_per_issue(self) -> float:
        """Tensor FLOPs per issued instruction: the loop's density of useful work."""
        return self.tensor_flops / self.issue_slots if self.issue_slots else 0.0

    @property
    def bytes_per_issue(self) -> float:
        """Global bytes moved per issued instruction (memory-bound loops)."""
        return self.global_bytes / self.issue_slots if self.issue_slots else 0.0

    @property
    def bound(self) -> str:
        return max(self.cycles, key=lambda k: self.cycles[k]) if self.cycles else "issue"

    @property
    def tensor_share(self) -> float:
        """The tensor pipe's busy share of the iteration: what mma.sync reaches here."""
        slowest = max(self.cycles.values(), default=0.0)
        return self.cycles.get("tensor", 0.0) / slowest if slowest else 0.0


def loop_bound(
    loop: Sequence[Instruction], tensor_flops_per_sm_per_clock: float, mma_share: float = 1.0
) -> LoopBound:
    """Cycles per iteration of one SM with one warp per sub-partition running `loop`:

    - issue: every instruction takes one issue slot of its sub-partition;
    - tensor: each tensor instruction's FLOPs (`mma_flops`) at a quarter of the SM's
      tensor FLOPs per clock, an mma.sync's times `mma_share` where it cannot reach the
      peak (wgmma runs at the peak);
    - mufu: 32 lanes at 4 per clock per sub-partition, 8 cycles each;
    - smem: the bytes of LDSM, LDS and STS of all 4 sub-partitions at 128 B per clock.
    """
    mix = count_classes(loop)
    per_sub = tensor_flops_per_sm_per_clock / SUB_PARTITIONS
    tensor = 0.0
    for ins in loop:
        if ins.kind == "tensor":
            # wgmma runs at the pipe's own rate; mma_share is mma.sync's part of the peak
            share = 1.0 if ins.opcode.endswith("GMMA") else mma_share
            tensor += mma_flops(ins) / (per_sub * share)
    smem = sum(_smem_bytes(i) for i in loop if i.kind in ("smem", "ldmatrix"))
    cycles = {
        "issue": float(len(loop)),
        "tensor": tensor,
        "mufu": mix["mufu"] * 32 / MUFU_LANES,
        "smem": SUB_PARTITIONS * smem / SMEM_BYTES_PER_CLOCK,
    }
    flops = sum(mma_flops(i) for i in loop)
    moved = sum(_global_bytes(i) for i in loop)
    loaded = sum(_global_bytes(i) for i in loop if _is_global_load(i))
    wavefronts = ceil_div(smem, SMEM_BYTES_PER_CLOCK)
    return LoopBound(mix, cycles, flops, moved, wavefronts, round_trips(loop), loaded)


_STORES = ("STG", "ST", "STS", "RED", "ATOM", "ATOMG", "BRA", "EXIT")


def _is_global_load(ins: Instruction) -> bool:
    return ins.opcode in ("LDG", "LD", "LDGSTS")


def _registers(text: str) -> set[int]:
    return {int(r) for r in re.findall(r"\bR(\d+)\b", text)}


def round_trips(path: Sequence[Instruction]) -> int:
    """Global-load round trips one pass over `path` waits for in turn: loads issued before
    any of their results is used share one trip; the first use of a pending result ends it
    (an instruction reading a register a load writes, 4 bytes a register). Loads in flight
    together are what hides memory latency (Little's law).

        >>> text = '''
        ...   /*0000*/  LDG.E.128 R4, desc[UR4][R2.64] ;
        ...   /*0010*/  LDG.E.128 R8, desc[UR4][R2.64+0x200] ;
        ...   /*0020*/  FADD R12, R5, R9 ;
        ...   /*0030*/  LDG.E R13, desc[UR4][R2.64+0x400] ;
        ...   /*0040*/  FADD R12, R12, R13 ;
        ... '''
        >>> round_trips(parse_sass(text))
        2
    """
    pending: set[int] = set()
    trips = 0
    for ins in path:
        operands = ins.args.split(",")
        writes_first = ins.opcode not in _STORES
        sources = _registers(",".join(operands[1:] if writes_first else operands))
        if pending & sources:
            trips, pending = trips + 1, set()
        if ins.opcode in ("LDG", "LD"):
            first = _registers(operands[0])
            if first:
                base = min(first)
                pending |= set(range(base, base + max(1, _global_bytes(ins) // 32 // 4)))
    return trips + (1 if pending else 0)


def stream_path(loop: Sequence[Instruction]) -> list[Instruction]:
    """The path one iteration of a loop with no tensor instruction (row-wise, elementwise)
    most likely runs: its body holds every variant of a row (vector, scalar, two-pass)
    behind uniform branches. Of the paths from the loop's head to its closing branch that
    enter no inner loop (a resident row runs straight through), the one that moves the
    most global bytes, with the fewest (widest) global instructions, and then the most
    instructions (every computation along it: a conservative count).

        >>> text = '''
        ...   /*0000*/              @P0 BRA 0x30 ;
        ...   /*0010*/                  LDG.E.U16 R1, [R2.64] ;
        ...   /*0020*/                  BRA 0x40 ;
        ...   /*0030*/                  LDG.E.128 R4, [R2.64] ;
        ...   /*0040*/             @!P1 BRA 0x0 ;
        ... '''
        >>> [i.op for i in stream_path(parse_sass(text))]
        ['BRA', 'LDG.E.128', 'BRA']
    """
    if not loop:
        return []
    index = {x.addr: i for i, x in enumerate(loop)}
    starts = {0} | {i + 1 for i, x in enumerate(loop) if _ends_block(x)}
    starts |= {index[x.target] for x in loop if x.target in index}
    order = sorted(b for b in starts if b < len(loop))
    bounds = [*order, len(loop)]
    blocks = {b: loop[b : bounds[k + 1]] for k, b in enumerate(order)}
    successors: dict[int, list[int]] = {}
    for b, body in blocks.items():
        last, nxt = body[-1], b + len(body)
        out = [index[last.target]] if last.target in index and last.target > last.addr else []
        if (last.pred or not _ends_block(last)) and nxt in blocks:
            out.append(nxt)  # falls through: not an unconditional jump or exit
        successors[b] = out
    inner = [  # the spans of the inner loops: backward branches before the closing one
        (index[x.target], i)
        for i, x in enumerate(loop[:-1])
        if x.target in index and x.target < x.addr
    ]
    straight = {b for b in blocks if not any(lo <= b <= hi for lo, hi in inner)}
    path = _best_path(blocks, successors, straight)
    if not any(_is_global_load(x) for b in path for x in blocks[b]):
        path = _best_path(blocks, successors, set(blocks))  # a streamed row: its passes loop
    return [x for b in path or sorted(blocks) for x in blocks[b]]


def _ends_block(ins: Instruction) -> bool:
    return ins.opcode in ("BRA", "EXIT", "RET", "BRX", "JMX")


def _best_path(
    blocks: Mapping[int, Sequence[Instruction]],
    successors: Mapping[int, list[int]],
    allowed: set[int],
) -> list[int]:
    """The blocks of the best path (stream_path's order) from the first block to the last
    through `allowed` ones; [] when there is none. Address order is a topological order of
    the forward edges, and a lexicographic order of summed keys is kept by addition."""

    def key(xs: Sequence[Instruction]) -> tuple[int, int, int]:
        moved = [_global_bytes(x) for x in xs]
        return (sum(moved), -sum(m > 0 for m in moved), len(xs))

    first, end = min(blocks), max(blocks)
    score = {first: key(blocks[first])}
    came: dict[int, int] = {}
    for b in sorted(blocks):
        if b not in score:
            continue
        for n in successors[b]:
            if n <= b or n not in allowed:
                continue
            k = key(blocks[n])
            total = (score[b][0] + k[0], score[b][1] + k[1], score[b][2] + k[2])
            if n not in score or total > score[n]:
                score[n], came[n] = total, b
    if end not in score:
        return []
    path = [end]
    while path[-1] != first:
        path.append(came[path[-1]])
    return path[::-1]


def kernel_bound(
    instructions: Sequence[Instruction], tensor_flops_per_sm_per_clock: float,
    mma_share: float = 1.0,
) -> LoopBound:  # fmt: skip
    """`loop_bound` of a kernel's main loop; for a loop with no tensor instruction, of
    its `stream_path` (the row a planned size runs, not every variant it holds)."""
    loop = main_loop(instructions)
    if not any(i.kind == "tensor" for i in loop):
        loop = stream_path(loop)
    return loop_bound(loop, tensor_flops_per_sm_per_clock, mma_share)


def analyse_listing(
    text: str, tensor_flops_per_sm_per_clock: float, mma_share: float = 1.0
) -> dict[str, LoopBound]:
    """Kernel name -> its main loop's mix and bound (`loop_bound`)."""
    return {
        name: kernel_bound(parse_sass(body), tensor_flops_per_sm_per_clock, mma_share)
        for name, body in split_functions(text).items()
    }


def bound_to_dict(bound: LoopBound) -> dict[str, object]:
    """JSON-ready: the main loop's issue slots per class, cycles per resource, the bound."""
    return {
        "main_loop_mix": dict(bound.mix),
        "cycles_per_iteration": dict(bound.cycles),
        "bound": bound.bound,
        "tensor_share": bound.tensor_share,
        "static_bounds": {
            "issue_slots": bound.issue_slots,
            "tensor_flops": bound.tensor_flops,
            "tensor_flops_per_issue": bound.flops_per_issue,
            "smem_wavefronts": bound.smem_wavefronts,
            "mufu_ops": bound.mix.get("mufu", 0),
            "global_bytes": bound.global_bytes,
            "global_bytes_per_issue": bound.bytes_per_issue,
            "global_load_bytes": bound.load_bytes,
            "global_round_trips": bound.round_trips,
        },
    }
