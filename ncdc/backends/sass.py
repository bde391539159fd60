"""The compiled kernel's own instructions: SASS from a cubin, its main loop, its mix.

`cuobjdump -sass` (with `nvdisasm`, both from NVIDIA's pip wheels `nvidia-cuda-cuobjdump`
and `nvidia-cuda-nvdisasm`, the `nvrtc` extra; no toolkit, no GPU) lists the machine code.
The main loop is the innermost backward branch that does tensor work, of several the one
with the most tensor FLOPs (`main_loop`; the longest loop when none has any). Its
instructions are counted by class, and the counts become cycles per iteration of one SM,
with one warp per sub-partition doing the loop: issue (one instruction per clock per
sub-partition), the tensor pipe, the MUFU (special-function) pipe and shared memory (128 B
per clock per SM). The largest is the loop's bound. A loop with no tensor instruction is
read along `stream_path` (the row a planned size runs), with its global bytes and
serialised load round trips (`round_trips`).

    >>> text = '''
    ...         /*0100*/                   LDSM.16.M88.4 R4, [R2] ;
    ...         /*0110*/                   HMMA.16816.F32.BF16 R8, R4, R6, R8 ;
    ...         /*0120*/                   MUFU.EX2 R1, R1 ;
    ...         /*0130*/              @!P0 BRA 0x100 ;
    ... '''
    >>> loop = main_loop(parse_sass(text))
    >>> count_classes(loop)["tensor"], count_classes(loop)["mufu"]
    (1, 1)
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ncdc.errors import CompileError
from ncdc.hardware.tensor_cores import SUB_PARTITIONS
from ncdc.units import ceil_div

if TYPE_CHECKING:
    from ncdc.model.issue import LoopMix
    from ncdc.model.values import Plan

TOOL_TIMEOUT_S = 120
LOOP_RULE = 5  # the version of `main_loop`'s choice, in the key of the loops it keeps
INSTRUCTION = re.compile(
    r"/\*(?P<addr>[0-9a-f]{4,})\*/\s+(?P<pred>@!?U?P[T\d]+\s+)?(?P<op>[A-Z][A-Z0-9_.]*(?:x\d+[A-Z0-9_.]*)*)"
    r"(?P<args>[^;]*);"
)
# opcode (before the first dot) -> class; anything else is integer and address arithmetic
CLASSES: dict[str, str] = {
    **dict.fromkeys(("HMMA", "IMMA", "HGMMA", "QGMMA", "IGMMA", "QMMA", "OMMA"), "tensor"),
    "LDSM": "ldmatrix",
    **dict.fromkeys(("LDGSTS", "LDGDEPBAR", "UBLKCP", "UTMALDG"), "async_copy"),
    **dict.fromkeys(("LDS", "STS", "LDSM_T"), "smem"),
    **dict.fromkeys(("LDG", "STG", "LD", "ST", "RED", "ATOM", "ATOMG"), "global"),
    **dict.fromkeys(
        ("FADD", "FMUL", "FFMA", "FMNMX", "FSETP", "FSEL", "FCHK", "FSWZADD", "F2F", "F2I"),
        "fp32",
    ),
    **dict.fromkeys(("HADD2", "HMUL2", "HFMA2", "HMNMX2", "HSETP2", "F2FP"), "fp16"),
    "MUFU": "mufu",
    **dict.fromkeys(
        ("BAR", "SYNCS", "WARPSYNC", "DEPBAR", "MEMBAR", "ARRIVES", "WARPGROUP"), "barrier"
    ),
    **dict.fromkeys(("BRA", "EXIT", "BSSY", "BSYNC", "CALL", "RET", "NOP", "YIELD"), "control"),
    "SHFL": "shuffle",
}
CLASS_ORDER = (
    "tensor", "ldmatrix", "async_copy", "smem", "global", "fp32", "fp16", "mufu",
    "shuffle", "integer", "barrier", "control",
)  # fmt: skip
MUFU_LANES = 4  # per sub-partition (16 per SM)
SMEM_BYTES_PER_CLOCK = 128  # per SM
MMA_FLOPS = {"16816": 2 * 16 * 8 * 16, "1688": 2 * 16 * 8 * 8, "16832": 2 * 16 * 8 * 32}
# wgmma (HGMMA, QGMMA, IGMMA): the shape MxNxK is the warpgroup's; each of its 4 warps issues
# the instruction, and together they compute M x N x K (PTX ISA, "Asynchronous Warpgroup
# Level Matrix Multiply-Accumulate Instructions"): a warp's share is a quarter.
WARPGROUP_WARPS = 4
WGMMA_SHAPE = re.compile(r"\.(\d+)x(\d+)x(\d+)\b")


@dataclass(frozen=True)
class Instruction:
    """One SASS instruction: its address, opcode with modifiers, and a branch target."""

    addr: int
    op: str
    args: str
    target: int = -1  # a branch's destination, -1 otherwise
    pred: str = ""  # the guard predicate ("@!P0"), empty when unconditional

    @property
    def opcode(self) -> str:
        return self.op.split(".", 1)[0]

    @property
    def kind(self) -> str:
        return CLASSES.get(self.opcode, "integer")


def mma_flops(ins: Instruction) -> int:
    """The tensor FLOPs one warp's tensor instruction does, from its opcode's shape: an
    HMMA.16816 4096; an HGMMA.64x256x16 (the warpgroup's 64 x 256 x 16) a quarter of
    2 x 64 x 256 x 16, 131072; 0 for any other instruction.

        >>> mma_flops(parse_sass("/*0f00*/ HGMMA.64x256x16.F32.BF16 R24, gdesc[UR16], R24 ;")[0])
        131072
    """
    if ins.kind != "tensor":
        return 0
    if ins.opcode.endswith("GMMA"):
        shape = WGMMA_SHAPE.search(ins.op)
        if shape:
            m, n, k = (int(x) for x in shape.groups())
            return 2 * m * n * k // WARPGROUP_WARPS
    return MMA_FLOPS[_mma_shape(ins)]


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


def find_tool(name: str = "cuobjdump") -> str | None:
    """The path of `cuobjdump` or `nvdisasm`: NVIDIA's pip wheel first, then PATH."""
    spec = importlib.util.find_spec("nvidia")
    for root in spec.submodule_search_locations or () if spec else ():
        for candidate in sorted(Path(root).glob(f"cu*/bin/{name}")):
            if os.access(candidate, os.X_OK):
                return str(candidate)
    return shutil.which(name)


def disassemble(cubin: bytes) -> str:
    """The SASS listing of a cubin; CompileError in one line when the tools are missing."""
    tool, disasm = find_tool("cuobjdump"), find_tool("nvdisasm")
    if tool is None or disasm is None:
        raise CompileError(
            "cannot read SASS: cuobjdump and nvdisasm are not installed",
            hint="pip install 'ncdc[nvrtc]' (the nvidia-cuda-cuobjdump and "
            "nvidia-cuda-nvdisasm wheels)",
        )
    env = {**os.environ, "PATH": f"{Path(disasm).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    with tempfile.TemporaryDirectory(prefix="ncdc-sass-") as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(cubin)
        done = subprocess.run(
            [tool, "-sass", str(path)], capture_output=True, text=True, env=env,
            timeout=TOOL_TIMEOUT_S, check=False,
        )  # fmt: skip
    if done.returncode != 0:
        first = (done.stderr or done.stdout).strip().splitlines()[:1]
        raise CompileError(f"cuobjdump -sass failed: {first[0] if first else done.returncode}")
    return done.stdout


def parse_sass(text: str) -> list[Instruction]:
    """The instructions of a listing, in address order (every function, concatenated)."""
    out = []
    for m in INSTRUCTION.finditer(text):
        op, args = m["op"], m["args"].strip()
        target = -1
        if op.split(".", 1)[0] == "BRA":
            hit = re.search(r"0x([0-9a-f]+)", args)
            target = int(hit[1], 16) if hit else -1
        out.append(Instruction(int(m["addr"], 16), op, args, target, (m["pred"] or "").strip()))
    return out


def main_loop(instructions: Sequence[Instruction]) -> list[Instruction]:
    """The hot loop (`tensor_loops`: the first of the innermost backward branches with the
    most tensor FLOPs); without tensor instructions, the longest loop; the whole listing
    when it has no loop. An outer loop (over tiles, around a k loop) holds the k loop's
    MMAs, a peeled iteration's and its own epilogue: it is never the main loop where an
    inner one does tensor work.

        >>> text = '''
        ...   /*0000*/                  HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], R24 ;
        ...   /*0010*/                  HGMMA.64x128x16.F32.BF16 R24, gdesc[UR8], R24 ;
        ...   /*0020*/                  IADD3 R1, R1, 0x1, RZ ;
        ...   /*0030*/              @P0 BRA 0x10 ;
        ...   /*0040*/                  STG.E [R2.64], R24 ;
        ...   /*0050*/              @P1 BRA 0x0 ;
        ... '''
        >>> [i.addr for i in main_loop(parse_sass(text))]
        [16, 32, 48]
    """
    loops = _loops(instructions)
    hot = tensor_loops(instructions)
    if hot:
        return hot[0]
    if loops:
        return max(loops, key=lambda lp: len(lp[2]))[2]
    return list(instructions)


def tensor_loops(instructions: Sequence[Instruction]) -> list[list[Instruction]]:
    """The bodies of the innermost backward branches that do the most tensor FLOPs per
    iteration (`mma_flops`), in address order. The attention template runs a key chunk
    through one of two copies of its loop (ncdc_attention.cuh, attention_forward): first
    the chunks every row of the block sees whole, with no mask code, then the diagonal and
    tail chunks, masked; ptxas lays them out in that order, so the first is the loop most
    chunks take (the hot one) and the second the masked one. A kernel whose masks bound
    the keys from below has only the masked copy; a GEMM has one loop.

        >>> text = '''
        ...   /*0000*/                  HMMA.16816.F32.BF16 R8, R4, R6, R8 ;
        ...   /*0010*/              @P0 BRA 0x0 ;
        ...   /*0020*/                  HMMA.16816.F32.BF16 R8, R4, R6, R8 ;
        ...   /*0030*/                  FSEL R1, R1, -INF, P1 ;
        ...   /*0040*/              @P2 BRA 0x20 ;
        ... '''
        >>> [[i.addr for i in lp] for lp in tensor_loops(parse_sass(text))]
        [[0, 16], [32, 48, 64]]
    """
    tensor = [lp for lp in _loops(instructions) if lp[3]]
    innermost = [
        lp
        for lp in tensor
        if not any(o is not lp and lp[0] <= o[0] and o[1] <= lp[1] for o in tensor)
    ]
    most = max((lp[3] for lp in innermost), default=0)
    return [lp[2] for lp in sorted(innermost, key=lambda lp: lp[0]) if lp[3] == most]


def _loops(
    instructions: Sequence[Instruction],
) -> list[tuple[int, int, list[Instruction], int]]:
    """(start, end, body, tensor FLOPs) of every backward branch. One whose body holds an
    EXIT is the jump back from an out-of-line stub (an mbarrier try-wait's retry, placed
    after the kernel's exits), not a loop."""
    loops = []
    for i, ins in enumerate(instructions):
        if 0 <= ins.target < ins.addr:
            body = [x for x in instructions[: i + 1] if x.addr >= ins.target]
            if not any(x.op == "EXIT" for x in body):
                loops.append((ins.target, ins.addr, body, sum(mma_flops(x) for x in body)))
    return loops


def count_classes(instructions: Sequence[Instruction]) -> dict[str, int]:
    """Issue slots per class (one per instruction), every class present, in CLASS_ORDER."""
    mix = dict.fromkeys(CLASS_ORDER, 0)
    for ins in instructions:
        mix[ins.kind] += 1
    return mix


def _global_bytes(ins: Instruction) -> int:
    """Bytes one warp's global load, store or cp.async moves (32 lanes at its width)."""
    if ins.kind not in ("global", "async_copy") or ins.opcode == "LDGDEPBAR":
        return 0
    width = re.search(r"\.(U8|S8|U16|S16|32|64|128)\b", ins.op)
    per_lane = {"U8": 1, "S8": 1, "U16": 2, "S16": 2, "32": 4, "64": 8, "128": 16}
    return 32 * (per_lane[width[1]] if width else 4)


def _smem_bytes(ins: Instruction) -> int:
    """Bytes one warp's shared-memory instruction moves."""
    if ins.opcode == "LDSM":
        return 128 * (4 if ".4" in ins.op else 2 if ".2" in ins.op else 1)
    width = re.search(r"\.(32|64|128)\b", ins.op)
    return 32 * (int(width[1]) // 8 if width else 4)


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


def _mma_shape(ins: Instruction) -> str:
    return next((s for s in MMA_FLOPS if f".{s}" in ins.op), "16816")


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


def split_functions(text: str) -> dict[str, str]:
    """Each kernel's part of a listing, by the name after `Function :`."""
    parts = re.split(r"^\s*Function : (\S+)\s*$", text, flags=re.M)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts) - 1, 2)}


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


# ------------------------------------------------------------ the SASS in the plan's time


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


def main_loops(cubin: bytes) -> dict[str, str]:
    """Kernel name -> the SASS of its main loop (and, as `name + MASKED`, of an attention
    kernel's masked loop, the second of `tensor_loops`), read once per cubin: kept,
    signed, in the compile cache's folder (`<version>/sass/<sha256 of the cubin and
    LOOP_RULE>.json`), so that pricing a compiled plan again does not run cuobjdump again.
    An entry whose HMAC does not verify is read afresh."""
    import hashlib
    import json

    from ncdc.files import write_atomic
    from ncdc.paths import sign, usable_dir, verify
    from ncdc.version import __version__

    folder = usable_dir(__version__, "sass")
    key = hashlib.sha256(cubin + f"main_loop {LOOP_RULE}".encode()).hexdigest()
    path = folder / f"{key}.json" if folder else None
    if path is not None and path.exists():
        try:
            entry = json.loads(path.read_text(encoding="utf-8"))
            body = json.dumps(entry["loops"], sort_keys=True).encode()
            if verify(body, entry["hmac"]):
                return {str(k): str(v) for k, v in entry["loops"].items()}
        except (OSError, ValueError, KeyError, TypeError):
            pass
    loops = {}
    for name, text in split_functions(disassemble(cubin)).items():
        instructions = parse_sass(text)
        copies = tensor_loops(instructions)
        kept = {name: main_loop(instructions)}
        if len(copies) > 1:  # an attention kernel's masked loop beside its hot one
            kept[name + MASKED] = copies[1]
        for key, loop in kept.items():
            loops[key] = "\n".join(f"/*{i.addr:04x}*/ {i.op} {i.args};" for i in loop)
    if path is not None:
        body = json.dumps(loops, sort_keys=True).encode()
        with contextlib.suppress(OSError):  # unwritten: the next run reads the SASS again
            write_atomic(path, json.dumps({"loops": loops, "hmac": sign(body)}).encode())
    return loops


def mixes_by_kernel(
    plan: Plan, functions: Mapping[str, str], launches: Sequence[str]
) -> dict[int, LoopMix]:
    """Kernel index -> the mix of its first launch's function in `functions` (name -> its
    SASS; `launches`: the module's kernel names in launch order), for the kernels whose
    loop does tensor work (the others keep their estimate). An attention kernel's mix is
    its hot loop's and its masked loop's (`main_loops`), weighted by the share of chunk
    iterations the plan's tiles give each (its family's `masked_share`)."""
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
            if mix.tensor_flops:
                out[i] = mix
    return out


MASKED = " masked"  # key suffix of a kernel's masked loop in `main_loops` (no name has a space)


def blend(hot: LoopMix, masked: LoopMix, share: float) -> LoopMix:
    """The mix of a loop whose iterations run `hot` and, `share` of them, `masked` (the
    two copies of the attention loop do the same MMAs), per class."""
    from ncdc.model.issue import LoopMix

    classes = {
        k: (1 - share) * hot.classes.get(k, 0) + share * masked.classes.get(k, 0)
        for k in dict.fromkeys([*hot.classes, *masked.classes])
    }
    return LoopMix(classes, hot.tensor_flops, hot.source)


def full_tile_path(loop: Sequence[Instruction]) -> list[Instruction]:
    """The instructions of `loop` a full tile executes: a region that a forward branch
    inside the loop jumps over and that loads from global memory one element at a time
    (LDG, no cp.async, no MMA) is the guarded tail path, which a full tile skips."""
    if not loop:
        return []
    end = loop[-1].addr
    skipped: set[int] = set()
    for i, ins in enumerate(loop):
        if not ins.addr < ins.target <= end:
            continue
        region = [x for x in loop[i + 1 :] if x.addr < ins.target]
        kinds = {x.kind for x in region}
        if "global" in kinds and not kinds & {"tensor", "async_copy"}:
            skipped |= {x.addr for x in region}
    return [x for x in loop if x.addr not in skipped]
