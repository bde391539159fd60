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
import functools
import importlib.util
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ncdc.errors import CompileError, NcdcError
from ncdc.hardware.arch import WARPGROUP_WARPS, MmaShape

TOOL_TIMEOUT_S = 120
MAX_LOOPS_BYTES = 16 << 20  # a cached entry of main loops: a few KiB of SASS a kernel


LOOP_RULE = 6  # the version of `main_loop`'s choice, in the key of the loops it keeps


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


# HMMA.<m><n><k> and IMMA shapes: m16n8k16, m16n8k8, m16n8k32 (ncdc.hardware.arch)
MMA_FLOPS = {
    f"{s.m}{s.n}{s.k}": s.flops
    for s in (MmaShape(16, 8, 16), MmaShape(16, 8, 8), MmaShape(16, 8, 32))
}


# wgmma (HGMMA, QGMMA, IGMMA): the shape MxNxK is the warpgroup's; each of its 4 warps issues
# the instruction, and together they compute M x N x K (PTX ISA, "Asynchronous Warpgroup
# Level Matrix Multiply-Accumulate Instructions"): a warp's share is a quarter.


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


def mma_shape_name(ins: Instruction) -> str:
    """The shape suffix of an HMMA or IMMA ("16816", "1688", "16832")."""
    return next((s for s in MMA_FLOPS if f".{s}" in ins.op), "16816")


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
    return MMA_FLOPS[mma_shape_name(ins)]


def find_tool(name: str = "cuobjdump") -> str | None:
    """The path of `cuobjdump` or `nvdisasm`: NVIDIA's pip wheel first, then PATH."""
    spec = importlib.util.find_spec("nvidia")
    for root in spec.submodule_search_locations or () if spec else ():
        for candidate in sorted(Path(root).glob(f"cu*/bin/{name}")):
            if os.access(candidate, os.X_OK):
                return str(candidate)
    return shutil.which(name)


@functools.lru_cache(maxsize=16)
def disassemble(cubin: bytes) -> str:
    """The SASS listing of a cubin; CompileError in one line when the tools are missing.
    Kept per cubin: the re-pricing, the .json, the report and the table all read it, and
    cuobjdump takes about a second."""
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
    """The hot loop (`tensor_loops`: the shortest of the innermost backward branches with
    the most tensor FLOPs); without tensor instructions, the longest loop; the whole listing
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
    iteration (`mma_flops`): the one that issues the fewest instructions first (the hot
    loop), then the others in address order. The attention templates run a key chunk
    through one of two copies of their loop: the chunks every row of the block sees whole,
    with no mask code, and the diagonal, window-edge and tail chunks, masked (the
    FlashAttention-3 kernel's masked copy twice, before and after the whole chunks, when a
    mask bounds the keys from below); the unmasked copy is the shorter. The
    FlashAttention-2 kernel with such a mask has only the masked copy; a GEMM has one loop.

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
    copies = [lp[2] for lp in sorted(innermost, key=lambda lp: lp[0]) if lp[3] == most]
    hot = min(copies, key=len, default=None)
    return [hot, *(c for c in copies if c is not hot)] if hot is not None else []


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


def split_functions(text: str) -> dict[str, str]:
    """Each kernel's part of a listing, by the name after `Function :`."""
    parts = re.split(r"^\s*Function : (\S+)\s*$", text, flags=re.M)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts) - 1, 2)}


def main_loops(cubin: bytes) -> dict[str, str]:
    """Kernel name -> the SASS of its main loop (and, as `name + MASKED`, of an attention
    kernel's masked loop, the first other copy in `tensor_loops`), read once per cubin: kept,
    signed, in the compile cache's folder (`<version>/sass/<sha256 of the cubin and
    LOOP_RULE>.json`), so that pricing a compiled plan again does not run cuobjdump again.
    An entry whose HMAC does not verify is read afresh."""
    import hashlib
    import json

    from ncdc.bounded import read_json
    from ncdc.files import write_atomic
    from ncdc.paths import sign, usable_dir, verify
    from ncdc.version import __version__

    folder = usable_dir(__version__, "sass")
    key = hashlib.sha256(cubin + f"main_loop {LOOP_RULE}".encode()).hexdigest()
    path = folder / f"{key}.json" if folder else None
    if path is not None and path.exists():
        try:
            entry = read_json(path, MAX_LOOPS_BYTES)
            body = json.dumps(entry["loops"], sort_keys=True).encode()
            if verify(body, entry["hmac"]):
                return {str(k): str(v) for k, v in entry["loops"].items()}
        except (OSError, NcdcError, ValueError, KeyError, TypeError):
            pass  # missing, planted, damaged: found again below
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


MASKED = " masked"  # key suffix of a kernel's masked loop in `main_loops` (no name has a space)


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
