"""Compile CUDA C++ to cubin with NVRTC from pip wheels, and read the resource report.

No CUDA toolkit and no GPU are needed: `cuda-bindings` gives `cuda.bindings.nvrtc`,
`nvidia-cuda-nvrtc` the compiler itself and `nvidia-cuda-runtime` the headers
(`cuda_bf16.h`, `cuda_fp16.h`, `cuda_fp8.h`). We call NVRTC directly rather than through
CuPy, which asks the driver for a device first and targets sm_90 instead of sm_90a.

    >>> mod = compile_cuda('extern "C" __global__ void k(float* x) { x[0] = 1; }', "sm_90a")
    >>> mod.resources["k"].registers, mod.resources["k"].spill_stores_bytes
    (8, 0)
"""

from __future__ import annotations

import functools
import importlib
import importlib.resources
import os
import re
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ncdc.errors import CompileError, UsageError

# The architectures ncdc generates code for. The "a" variants enable arch-specific
# instructions (wgmma, setmaxnreg) and exist only as cubin, never as portable PTX.
ARCHES = ("sm_80", "sm_86", "sm_89", "sm_90", "sm_90a", "sm_100a")

INSTALL_HINT = "pip install 'ncdc[nvrtc]'"
DEBUG_HINT = "run with --debug for the full NVRTC log"

# Always passed. `--ptxas-options=-v` makes ptxas write registers, shared memory and
# spills per kernel into the program log; `-lineinfo` keeps source lines for profilers.
BASE_OPTIONS = ("-std=c++17", "--ptxas-options=-v", "-default-device", "-lineinfo")
# NVRTC 12.9 and later keep a cache of their own where a CUDA driver is installed; a hit
# there skips ptxas, so the log carries no resource report for the kernels it served (seen
# on an H200 with NVRTC 13.0: a module compiled twice came back without its report). ncdc
# caches cubins itself (ncdc.backends.cache), so NVRTC's cache is turned off.
NO_CACHE_SINCE = (12, 9)
NO_CACHE_OPTION = "--no-cache"


class NvrtcError(CompileError):
    """A compile that failed; `log` holds the full NVRTC program log (shown with --debug)."""

    def __init__(
        self, message: str, *, log: str, where: str | None = None, hint: str | None = None
    ):
        super().__init__(message, where=where, hint=hint)
        self.log = log


@dataclass(frozen=True)
class KernelResources:
    """What ptxas reports for one kernel (per thread or per block, as named)."""

    name: str  # the entry point as ptxas names it: plain for extern "C", mangled otherwise
    registers: int  # per thread
    spill_stores_bytes: int  # per thread, written to local memory because registers ran out
    spill_loads_bytes: int  # per thread, read back from local memory
    static_smem_bytes: int  # per block, `__shared__` arrays (dynamic smem is not included)
    stack_bytes: int  # per thread stack frame: local arrays and spills live here
    barriers: int  # named barriers used (bar.sync ids)
    cmem_bytes: int  # constant banks summed: cmem[0] holds kernel parameters on sm_80/sm_89


@dataclass(frozen=True)
class CompiledModule:
    """One compiled translation unit: the cubin and what the compiler said about it."""

    cubin: bytes
    arch: str
    log: str  # full NVRTC program log
    resources: dict[str, KernelResources]
    nvrtc_version: str  # e.g. "13.0"


def _nvrtc() -> Any:
    """The `cuda.bindings.nvrtc` module, or a CompileError saying how to install it."""
    try:
        nvrtc = importlib.import_module("cuda.bindings.nvrtc")
        _check(nvrtc, nvrtc.nvrtcVersion())
    except (ImportError, OSError, RuntimeError) as err:
        raise CompileError(
            f"NVRTC is not installed or cannot be loaded ({err})", hint=INSTALL_HINT
        ) from err
    return nvrtc


def available() -> bool:
    """Whether NVRTC is installed and loads (kernels can be compiled here)."""
    try:
        _nvrtc()
    except CompileError:
        return False
    return True


def _check(nvrtc: Any, result: tuple[Any, ...]) -> tuple[Any, ...]:
    """Unwrap a `(status, *values)` tuple from cuda.bindings, raising on a bad status."""
    status, *values = result
    if status != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        _, text = nvrtc.nvrtcGetErrorString(status)
        raise CompileError(f"NVRTC call failed: {text.decode()}", hint=INSTALL_HINT)
    return tuple(values)


@functools.lru_cache(maxsize=1)
def nvrtc_version() -> str:
    """The installed NVRTC version as "major.minor", e.g. "13.0"."""
    major, minor = _version_tuple()
    return f"{major}.{minor}"


@functools.lru_cache(maxsize=1)
def _version_tuple() -> tuple[int, int]:
    nvrtc = _nvrtc()
    major, minor = _check(nvrtc, nvrtc.nvrtcVersion())
    return int(major), int(minor)


@functools.lru_cache(maxsize=1)
def supported_arches() -> tuple[str, ...]:
    """The entries of ARCHES that the installed NVRTC can compile for."""
    nvrtc = _nvrtc()
    (numbers,) = _check(nvrtc, nvrtc.nvrtcGetSupportedArchs())
    return tuple(a for a in ARCHES if int(a[3:].rstrip("a")) in set(numbers))


def check_arch(arch: str) -> str:
    """Return `arch` if NVRTC can compile for it; otherwise an error listing the choices."""
    if arch not in ARCHES:
        raise UsageError(
            f"unknown architecture {arch!r}", hint=f"choose one of {', '.join(ARCHES)}"
        )
    if arch not in supported_arches():
        raise CompileError(
            f"NVRTC {nvrtc_version()} cannot compile for {arch}",
            hint=f"choose one of {', '.join(supported_arches())} or upgrade the nvrtc wheels",
        )
    return arch


def cuda_include_dir() -> Path | None:
    """The CUDA headers (`cuda_bf16.h`, `cuda_fp16.h`, `cuda_fp8.h`): from the runtime wheel
    (`nvidia/cu13/include`, or `nvidia/cuda_runtime/include` for cu12 wheels), else from a
    toolkit (`$CUDA_HOME/include`, `$CUDA_PATH/include`, `/usr/local/cuda/include`)."""
    return _wheel_include_dir() or _toolkit_include_dir()


def _wheel_include_dir() -> Path | None:
    try:
        import nvidia
    except ImportError:
        return None
    for root in map(Path, nvidia.__path__):
        for candidate in (root / "cu13" / "include", root / "cuda_runtime" / "include"):
            if (candidate / "cuda_bf16.h").is_file():
                return candidate
    return None


TOOLKIT_ENV = ("CUDA_HOME", "CUDA_PATH")
TOOLKIT_DEFAULT = Path("/usr/local/cuda")


def _toolkit_include_dir() -> Path | None:
    """A CUDA toolkit's include folder, where the wheels carry no headers (a GPU machine
    with nvcc but without the nvidia-cuda-runtime wheel)."""
    roots = [Path(v) for v in map(os.environ.get, TOOLKIT_ENV) if v] + [TOOLKIT_DEFAULT]
    for root in roots:
        candidate = root / "include"
        if (candidate / "cuda_bf16.h").is_file():
            return candidate
    return None


def ncdc_include_dir() -> Path:
    """ncdc's own device headers (`ncdc/templates/include/`, package `ncdc.templates.include`)."""
    try:
        found = importlib.resources.files("ncdc.templates.include")
        if isinstance(found, Path) and found.is_dir():
            return found
    except ModuleNotFoundError:
        pass
    return Path(__file__).resolve().parents[1] / "templates" / "include"


def include_dirs() -> list[Path]:
    """The `-I` folders: the CUDA headers from the runtime wheel, then ncdc's headers."""
    cuda = cuda_include_dir()
    return [p for p in (cuda, ncdc_include_dir()) if p is not None]


def compile_options(arch: str, options: Sequence[str] = ()) -> list[str]:
    """The full NVRTC option list for `arch`, with the caller's extra `options` last.

    >>> compile_options("sm_90a", ["--use_fast_math"])[0]
    '--gpu-architecture=sm_90a'
    """
    includes = [f"-I{d}" for d in include_dirs()]
    no_cache = [NO_CACHE_OPTION] if _version_tuple() >= NO_CACHE_SINCE else []
    return [f"--gpu-architecture={arch}", *BASE_OPTIONS, *no_cache, *includes, *options]


def compile_cuda(
    source: str,
    arch: str,
    *,
    name: str = "kernel.cu",
    options: Sequence[str] = (),
    line_origin: Callable[[int], str | None] | None = None,
) -> CompiledModule:
    """Compile `source` to a cubin for `arch` and parse the per-kernel resource report.

    `name` is the file name errors point at; `options` are extra NVRTC options such as
    `--use_fast_math` or `-DTILE_M=128`; `line_origin(lineno)` names the template line that
    produced a source line ("gemm.cu.j2:57") so an error can point there too.

        >>> module = compile_cuda(src, "sm_80", name="gemm_bf16.cu")  # doctest: +SKIP
        >>> module.resources["gemm_bf16"].registers  # doctest: +SKIP
        128
    """
    check_arch(arch)
    nvrtc = _nvrtc()
    opts = [o.encode() for o in compile_options(arch, options)]
    (prog,) = _check(nvrtc, nvrtc.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], []))
    try:
        (status,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        log = _program_log(nvrtc, prog)
        if status != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise _compile_error(log, name, line_origin)
        (size,) = _check(nvrtc, nvrtc.nvrtcGetCUBINSize(prog))
        # NVRTC writes into the buffer: a bytearray, never a bytes object (CPython shares
        # short ones, b"\0" * 1 among them, across the whole process)
        buffer = bytearray(size)
        _check(nvrtc, nvrtc.nvrtcGetCUBIN(prog, buffer))
        cubin = bytes(buffer)
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    resources = parse_resources(log)
    if unreported := sorted(cubin_kernels(cubin) - set(resources)):
        raise CompileError(
            f"NVRTC {nvrtc_version()} built {', '.join(unreported)} but reported no "
            f"registers or spills for {'it' if len(unreported) == 1 else 'them'}",
            hint="set CUDA_CACHE_DISABLE=1 (NVRTC's own cache skips the report) and report "
            "this with the output of `ncdc env`",
        )
    return CompiledModule(
        cubin=cubin,
        arch=arch,
        log=log,
        resources=resources,
        nvrtc_version=nvrtc_version(),
    )


def cubin_kernels(cubin: bytes) -> set[str]:
    """The names of the kernels in `cubin`: the function symbols of its ELF symbol table
    marked as entries (STO_CUDA_ENTRY, 0x10 in `st_other`); device functions are not.

    >>> sorted(cubin_kernels(compile_cuda('extern "C" __global__ void k() {}', "sm_80").cubin))
    ['k']
    """
    try:
        (table,) = struct.unpack_from("<Q", cubin, 0x28)
        entry_size, count, _ = struct.unpack_from("<HHH", cubin, 0x3A)
        # (name, type, flags, addr, offset, size, link, info, align, entsize) per section
        sections = [struct.unpack_from("<II4QIIQQ", cubin, table + i * entry_size)
                    for i in range(count)]  # fmt: skip
        found = set()
        for section in sections:
            if section[1] != _SHT_SYMTAB:
                continue
            strings = sections[section[6]][4]
            for at in range(section[4], section[4] + section[5], _SYMBOL_BYTES):
                name, info, other = struct.unpack_from("<IBB", cubin, at)
                if info & 0xF == _STT_FUNC and other & _STO_CUDA_ENTRY:
                    start = strings + name
                    found.add(cubin[start : cubin.index(b"\0", start)].decode())
    except (struct.error, ValueError, IndexError, UnicodeDecodeError):
        return set()  # not the ELF file expected: nothing to compare
    return found


_SHT_SYMTAB, _SYMBOL_BYTES, _STT_FUNC, _STO_CUDA_ENTRY = 2, 24, 2, 0x10


def _program_log(nvrtc: Any, prog: Any) -> str:
    (size,) = _check(nvrtc, nvrtc.nvrtcGetProgramLogSize(prog))
    buf = bytearray(size)  # written by NVRTC: see compile_cuda
    _check(nvrtc, nvrtc.nvrtcGetProgramLog(prog, buf))
    return bytes(buf).rstrip(b"\0").decode(errors="replace").rstrip()


# "gemm_bf16.cu(57): error: identifier "y" is undefined" (also "catastrophic error").
_SOURCE_ERROR = re.compile(
    r"^(?P<file>.+?)\((?P<line>\d+)\): (?:catastrophic )?error: (?P<msg>.*)$"
)


def _compile_error(
    log: str, name: str, line_origin: Callable[[int], str | None] | None
) -> NvrtcError:
    """One line for the first error in `log`, pointing at the template line when known."""
    for text in log.splitlines():
        found = _SOURCE_ERROR.match(text.strip())
        if found is None:
            continue
        where = f"{found['file']}({found['line']})"
        origin = line_origin(int(found["line"])) if line_origin and found["file"] == name else None
        if origin:
            where = f"{where} from {origin}"
        return NvrtcError(found["msg"], where=where, log=log, hint=DEBUG_HINT)
    # ptxas ("ptxas application ptx input, line 25; error : ...") and option errors.
    first = next((t.strip() for t in log.splitlines() if "error" in t.lower()), "")
    return NvrtcError(first or "NVRTC failed with no message", where=name, log=log, hint=DEBUG_HINT)


# ptxas -v, per entry function:
#   ptxas info    : Compiling entry function 'k' for 'sm_80'
#   ptxas info    : Function properties for k
#   ptxas         .     816 bytes stack frame, 740 bytes spill stores, 880 bytes spill loads
#   ptxas info    : Used 32 registers, used 1 barriers, 1024 bytes smem, 368 bytes cmem[0]
_ENTRY = re.compile(r"Compiling entry function '(?P<name>[^']+)'")
_PROPERTIES = re.compile(r"Function properties for (?P<name>\S+)")
_FIELDS = {
    "stack_bytes": re.compile(r"(\d+) bytes stack frame"),
    "spill_stores_bytes": re.compile(r"(\d+) bytes spill stores"),
    "spill_loads_bytes": re.compile(r"(\d+) bytes spill loads"),
    "registers": re.compile(r"Used (\d+) registers"),
    "barriers": re.compile(r"used (\d+) barriers"),
    "static_smem_bytes": re.compile(r"(\d+) bytes smem"),
}
_CMEM = re.compile(r"(\d+) bytes cmem\[\d+\]")


def parse_resources(log: str) -> dict[str, KernelResources]:
    """Per-kernel resources from a `--ptxas-options=-v` log; fields not reported are 0.

    `Function properties` blocks of non-entry (noinline device) functions are skipped: only
    the lines between an entry's `Compiling entry function` and the next one count.
    """
    found: dict[str, dict[str, int]] = {}
    entry: str | None = None
    in_entry_properties = False
    for text in log.splitlines():
        if m := _ENTRY.search(text):
            entry = m["name"]
            found[entry] = dict.fromkeys([*_FIELDS, "cmem_bytes"], 0)
            in_entry_properties = False
            continue
        if m := _PROPERTIES.search(text):
            in_entry_properties = m["name"] == entry
            continue
        if entry is None:
            continue
        fields = found[entry]
        is_used_line = "Used" in text
        if not (is_used_line or in_entry_properties):
            continue
        for field, pattern in _FIELDS.items():
            if m := pattern.search(text):
                fields[field] = int(m[1])
        if is_used_line:
            fields["cmem_bytes"] = sum(int(b) for b in _CMEM.findall(text))
            in_entry_properties = False
    return {name: KernelResources(name=name, **fields) for name, fields in found.items()}
