"""The CPU backend: compile a generated CUDA C++ kernel with the host C++ compiler and run it.

The same `.cu` source that NVRTC compiles for a GPU is compiled with g++ (or `$CXX`) against
the emulation headers in `ncdc/templates/include/` (see docs/cpu-backend.md): the threads of a
block run as fibers with real barriers, warp collectives, `ldmatrix`, `mma.sync` and
`cp.async` follow their PTX semantics. NumPy arrays are the device memory.

    >>> mod = build("tests/emulator_kernels/copy.cu")  # doctest: +SKIP
    >>> args = [src, dst, np.int32(n)]  # doctest: +SKIP
    >>> traffic = mod.launch("copy_f32", grid=4, block=128, args=args)  # doctest: +SKIP
    >>> traffic.bytes_read  # doctest: +SKIP
    2048

Shared libraries are cached under `cache_root()/emu` (see `ncdc.backends.cache`), keyed on the
source, the headers, the compiler version and the flags. A cached object is loaded only when
its HMAC verifies under the cache's key; it is built from a private temporary folder, so
nothing in the cache is ever on the include path, and installed under a lock.
"""

from __future__ import annotations

import atexit
import ctypes
import functools
import hashlib
import itertools
import os
import pickle
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ncdc import paths
from ncdc.backends import cache
from ncdc.backends.sanitizer_reports import asan_failure, tsan_failure
from ncdc.backends.traffic import Counters, Traffic
from ncdc.errors import CompileError, NcdcError, UsageError
from ncdc.files import read_regular, write_atomic

SANITIZERS = (None, "address", "race")
MAX_LIBRARY_BYTES = 256 << 20  # a built kernel library (a sanitized one is a few MiB)
MAX_SOURCE_BYTES = 16 << 20  # a kernel source read from a file (a generated one is far smaller)


_BASE_FLAGS = ("-std=c++17", "-O2", "-fPIC", "-shared", "-pthread", "-fvisibility=hidden")


_SANITIZE_FLAGS = {
    "address": ("-fsanitize=address", "-fno-omit-frame-pointer", "-g"),
    "race": ("-fsanitize=thread", "-g"),
}


@dataclass(frozen=True)
class SanitizerRuntime:
    """The runtime a sanitized launch preloads in its subprocess, and how it is configured."""

    library: str  # as `g++ -print-file-name=` names it
    package: str  # the Debian package that ships it, for the hint
    options_var: str
    options: str


_RUNTIMES = {
    "address": SanitizerRuntime(
        "libasan.so", "libasan8", "ASAN_OPTIONS",
        "detect_leaks=0:halt_on_error=1:allocator_may_return_null=1",
    ),
    # Not ignore_noninstrumented_modules: it also hides the kernel's memcpy (cp.async).
    "race": SanitizerRuntime(
        "libtsan.so", "libtsan2", "TSAN_OPTIONS",
        "halt_on_error=1:report_thread_leaks=0:report_signal_unsafe=0",
    ),
}  # fmt: skip


_ERROR_LINE = re.compile(
    r"^(?P<file>[^:\n]+):(?P<line>\d+):(?:\d+:)? (?:fatal )?error: (?P<msg>.*)$"
)


_SCALAR_DTYPES = {
    "i1": np.int8, "i2": np.int16, "i4": np.int32, "i8": np.int64,
    "u1": np.uint8, "u2": np.uint16, "u4": np.uint32, "u8": np.uint64,
    "f4": np.float32, "f8": np.float64,
}  # fmt: skip


_ERR_LEN = 1024


def include_dir() -> Path:
    """ncdc's device headers, the same folder NVRTC includes (`nvrtc.ncdc_include_dir`)."""
    from ncdc.backends import nvrtc

    return nvrtc.ncdc_include_dir()


def find_compiler() -> str:
    """`$CXX` when set (it must exist), else g++, else c++; a CompileError if there is none."""
    chosen = os.environ.get("CXX")
    if chosen:
        if path := shutil.which(chosen):
            return path
        raise CompileError(
            f"$CXX is '{chosen}', which is not an executable compiler",
            hint="unset CXX to use g++ from PATH, or point it at a C++ compiler",
        )
    for name in ("g++", "c++"):
        if path := shutil.which(name):
            return path
    raise CompileError(
        "no C++ compiler found for the cpu backend",
        hint="install g++ (apt-get install g++) or set $CXX",
    )


@functools.lru_cache(maxsize=8)
def _compiler_version(cxx: str) -> str:
    out = subprocess.run([cxx, "--version"], capture_output=True, text=True, check=False)
    return out.stdout.splitlines()[0] if out.stdout else cxx


def _read_source(source: str | Path) -> tuple[str, Path | None]:
    """The source text and, when it came from a file, that file."""
    if isinstance(source, Path) or ("\n" not in source and Path(source).is_file()):
        path = Path(source)
        try:
            raw = read_regular(path, MAX_SOURCE_BYTES, what="a kernel source")
            return raw.decode("utf-8", errors="replace"), path
        except OSError as e:
            raise NcdcError(
                f"cannot read kernel source: {e.strerror or e}", where=str(path)
            ) from None
    return source, None


def _first_error(stderr: str) -> CompileError:
    for line in stderr.splitlines():
        if m := _ERROR_LINE.match(line.strip()):
            return CompileError(m["msg"], where=f"{m['file']}:{m['line']}")
    tail = stderr.strip().splitlines()
    return CompileError("host compiler failed: " + (tail[-1] if tail else "no output"))


def check_sanitizer(sanitize: str | None) -> None:
    """A UsageError unless `sanitize` is None or one of the sanitizers the emulator has."""
    if sanitize not in SANITIZERS:
        names = " or ".join(s for s in SANITIZERS if s)
        raise UsageError(f"unknown sanitizer {sanitize!r}", where="--sanitize",
                         hint=f"choose {names}")  # fmt: skip


def build(
    source: str | Path,
    *,
    sanitize: str | None = None,
    cache_dir: Path | None = None,
    defines: dict[str, Any] | None = None,
) -> EmulatedModule:
    """Compile a kernel source (text, or a path to a .cu file) for the CPU backend.

    `sanitize="address"` builds with AddressSanitizer; launches then run in a subprocess and
    an out-of-bounds access raises CheckFailed naming the kernel, block and thread.
    `sanitize="race"` builds with ThreadSanitizer: two threads of a block touching the same
    shared byte with no barrier between them (one a write) raise CheckFailed naming both.

        >>> mod = build(Path("gemm.cu"), defines={"BM": 64})  # doctest: +SKIP
    """
    check_sanitizer(sanitize)
    text, path = _read_source(source)
    cxx = find_compiler()
    inc = include_dir()
    flags = [*_BASE_FLAGS, *_SANITIZE_FLAGS.get(sanitize or "", ())]
    flags += [f"-D{k}={v}" for k, v in sorted((defines or {}).items())]
    key_text = "\0".join([text, cache.headers_digest(inc), _compiler_version(cxx), *flags])
    key = hashlib.sha256(key_text.encode()).hexdigest()[:24]
    stem = (path.stem if path else "kernel") + "-" + key
    job = _Job(cxx, tuple(flags), inc, text, path, stem)
    folder = _emu_folder(cache_dir)
    if folder is None:
        return EmulatedModule(_build_uncached(job), sanitize)
    return _build_cached(job, folder / f"{stem}.so", sanitize)


@dataclass(frozen=True)
class _Job:
    """One host compile: the compiler, its flags, the headers and the source."""

    cxx: str
    flags: tuple[str, ...]
    include: Path
    text: str
    path: Path | None  # the user's .cu when the source came from a file
    stem: str


def _emu_folder(cache_dir: Path | None) -> Path | None:
    """Where the objects go: `cache_dir` (checked like the root), else `cache_root()/emu`;
    None when the cache cannot be written (one warning, then uncached builds)."""
    if cache_dir is None:
        return paths.usable_dir("emu")
    cache_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    paths.check_private(cache_dir)
    return cache_dir if paths.usable_dir() is not None else None


def _build_cached(job: _Job, lib: Path, sanitize: str | None) -> EmulatedModule:
    """Load `lib` if its HMAC verifies; else build it once under its lock and sign it."""
    if (hit := _load_verified(lib, sanitize)) is not None:
        return hit
    try:
        with paths.locked(lib.with_suffix(".lock")):
            if (hit := _load_verified(lib, sanitize)) is not None:
                return hit  # another process built it while we waited
            _signature_file(lib).unlink(missing_ok=True)
            _compile(job, lib)
            image = read_regular(lib, MAX_LIBRARY_BYTES, what="a built kernel library")
            write_atomic(_signature_file(lib), paths.sign(image).encode())
    except OSError as e:  # the cache could not be written: build where only we can see
        paths.cache_write_failed(e)
        return EmulatedModule(_build_uncached(job), sanitize)
    return EmulatedModule(lib, sanitize, image)  # the bytes signed, not what lib holds now


def _signature_file(lib: Path) -> Path:
    return lib.with_name(lib.name + ".hmac")


def _load_verified(lib: Path, sanitize: str | None) -> EmulatedModule | None:
    """The cached module, or None when it is missing, unsigned, forged or will not load.
    The bytes verified are the bytes loaded: `lib` is read once, and what runs is a private
    copy of them, so swapping `lib` after the check changes nothing."""
    try:
        mac = read_regular(_signature_file(lib), 1024, what="a signature").decode()
        image = read_regular(lib, MAX_LIBRARY_BYTES, what="a kernel library")
        if not paths.verify(image, mac):
            return None
        return EmulatedModule(lib, sanitize, image)
    except (OSError, NcdcError, UnicodeDecodeError):  # missing, planted, or a damaged
        return None  # object that dlopen refuses


@functools.cache
def _private_folder() -> Path:
    """This process's own folder (0700, made by mkdtemp, checked like the cache root and
    removed at exit): what is loaded is copied here, where no one else can swap it."""
    folder = Path(tempfile.mkdtemp(prefix="ncdc-emu-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    paths.check_private(folder)
    return folder


_COPIES = itertools.count()


def _private_copy(image: bytes, name: str) -> Path:
    """`image` written to a new file of the private folder (never one that exists)."""
    path = _private_folder() / f"{next(_COPIES)}-{name}"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o700)
    with os.fdopen(fd, "wb") as handle:
        handle.write(image)
    return path


def _build_uncached(job: _Job) -> Path:
    """Build into the private folder (removed when the process exits)."""
    lib = _private_folder() / f"{next(_COPIES)}-{job.stem}.so"
    _compile(job, lib)
    return lib


def _compile(job: _Job, lib: Path) -> None:
    """Compile to a temporary object beside `lib`, then rename it into place.

    A source given as text is written into a private temporary folder first: the compiler
    looks for quoted includes beside the source, and that folder holds nothing else.
    """
    fd, tmp = tempfile.mkstemp(dir=lib.parent, prefix=f".{lib.stem}.", suffix=".tmp.so")
    os.close(fd)
    try:
        with tempfile.TemporaryDirectory(prefix="ncdc-src-") as private:
            if job.path is not None:
                src, extra = job.path, ["-I", str(job.path.parent)]
            else:
                src, extra = Path(private) / f"{job.stem}.cu", []
                src.write_text(job.text)
            cmd = [job.cxx, *job.flags, "-I", str(job.include), *extra, "-x", "c++", str(src)]
            out = subprocess.run([*cmd, "-o", tmp], capture_output=True, text=True, check=False)
        if out.returncode != 0:
            raise _first_error(out.stderr)
        os.replace(tmp, lib)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _dim3(v: int | Sequence[int]) -> tuple[int, int, int]:
    t = (int(v),) if isinstance(v, (int, np.integer)) else tuple(int(x) for x in v)
    if not 1 <= len(t) <= 3 or min(t) < 1:
        raise NcdcError(f"a grid or block is 1 to 3 positive sizes, got {v!r}")
    return (t + (1, 1))[:3]  # type: ignore[return-value]


class EmulatedModule:
    """A kernel library built for the CPU backend; `launch` runs one of its kernels.

    `image` is the library's bytes as verified (read from `library` when not given); what
    is loaded, here or by the sanitizer's child process, is a private copy of them."""

    def __init__(self, library: Path, sanitize: str | None = None, image: bytes | None = None):
        self.library = library
        self.sanitize = sanitize
        if image is None:
            image = read_regular(library, MAX_LIBRARY_BYTES, what="a kernel library")
        self._loaded = _private_copy(image, library.name)
        self._dll = None
        if sanitize is None:
            self._dll = ctypes.CDLL(str(self._loaded))
            self._loaded.unlink()  # mapped now: the copy is needed no longer

    def signature(self, kernel: str) -> list[str]:
        """The kernel's parameters: "p" for a pointer, "i4", "f4", "u8"... for scalars."""
        if self._dll is None:
            raise NcdcError("a sanitized library loads only in its own process; launch it")
        return _signature(self._dll, self.library, kernel)

    def launch(
        self,
        kernel: str,
        grid: int | Sequence[int],
        block: int | Sequence[int],
        args: Sequence[Any],
        dynamic_smem: int = 0,
        counters: bool = False,
        entry_registers: int = 0,
    ) -> Traffic:
        """Run `kernel` over `grid` x `block`; arrays are device memory, written in place.

        Arrays must be contiguous; scalars are passed by value with the kernel's parameter
        type (a NumPy scalar must match it exactly; a Python number is converted).
        `counters`: also count sectors and bank conflicts (slower: every access is logged).
        `entry_registers`: the registers a thread starts with, as ptxas gave them, which
        bound the block's setmaxnreg pool (0: the most `__launch_bounds__(threads, 1)` allows).
        """
        g, b = _dim3(grid), _dim3(block)
        _emulator_settings()
        if self._dll is not None:
            values = _check_args(kernel, self.signature(kernel), args)
            dll = self._dll
            return _interruptible(
                lambda: _run(
                    dll, kernel, g, b, int(dynamic_smem), values, counters, entry_registers
                )
            )
        assert self.sanitize is not None  # a plain library is loaded in this process
        arrays = [a for a in args if isinstance(a, np.ndarray) and not _by_value_struct(a)]
        request = (
            str(self._loaded), kernel, g, b, int(dynamic_smem), list(args), counters,
            entry_registers,
        )  # fmt: skip
        outputs, traffic = _run_sanitized(self.sanitize, kernel, request)
        for dst, src in zip(arrays, outputs, strict=True):
            dst[...] = src
        return traffic


def _by_value_struct(a: np.ndarray) -> bool:
    """A 0-d void array is a struct passed by value (a tensor map), not a buffer."""
    return a.ndim == 0 and a.dtype.kind == "V"


# The emulator's settings from the environment (read by ncdc_emu.h, which ignores what it
# cannot parse): each checked here first. A fiber stack under 64 KiB overflows into its
# guard page in an ordinary kernel (1 KiB crashed every launch).
EMULATOR_SETTINGS = {"NCDC_EMU_THREADS": (1, 4096), "NCDC_EMU_STACK_KIB": (64, 1 << 20)}


def _emulator_settings() -> None:
    """Refuse (UsageError, exit 2) an emulator setting that is not a whole number in its
    range (an empty one is unset, as for the emulator); then default the pool to the CPUs
    this process may use (affinity, cgroup quota) rather than every core of the machine,
    unless NCDC_EMU_THREADS says otherwise."""
    for name, (low, high) in EMULATOR_SETTINGS.items():
        text = os.environ.get(name)
        if text and not (re.fullmatch(r"[0-9]+", text) and low <= int(text) <= high):
            raise UsageError(
                f"{name}={text!r} is not a whole number from {low} to {high}",
                where="environment",
                hint=f"unset {name}, or set it within that range",
            )
    if "NCDC_EMU_THREADS" not in os.environ:
        from ncdc.system import default_jobs

        os.environ["NCDC_EMU_THREADS"] = str(default_jobs())


def _interruptible(call: Callable[[], Traffic]) -> Traffic:
    """Run a launch on a helper thread and wait for it in short slices, so that Ctrl-C (or
    SIGTERM) reaches the main thread within a fraction of a second instead of when the
    kernel ends. An interrupted kernel keeps running on its daemon thread until the
    process exits; its buffers must not be used after the interrupt."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = call()
        except BaseException as e:  # handed to the waiting thread
            box["error"] = e

    worker = threading.Thread(target=target, name="ncdc-emu-launch", daemon=True)
    worker.start()
    while worker.is_alive():
        worker.join(0.05)
    if "error" in box:
        raise box["error"]
    return box["value"]


def _signature(dll: ctypes.CDLL, library: Path, kernel: str) -> list[str]:
    try:
        fn = getattr(dll, f"ncdc_signature_{kernel}")
    except AttributeError:
        raise NcdcError(
            f"no kernel {kernel!r} in {library.name}",
            hint="the source must end with NCDC_EXPORT_KERNEL(name)",
        ) from None
    fn.restype = ctypes.c_char_p
    sig = fn().decode()
    return sig.split(",") if sig else []


def _check_args(kernel: str, sig: list[str], args: Sequence[Any]) -> list[Any]:
    if len(sig) != len(args):
        raise NcdcError(
            f"kernel {kernel} takes {len(sig)} arguments ({','.join(sig)}), got {len(args)}"
        )
    values: list[Any] = []
    for i, (code, a) in enumerate(zip(sig, args, strict=True)):
        if code == "p":
            if not isinstance(a, np.ndarray) or not a.flags.c_contiguous:
                raise NcdcError(
                    f"argument {i} of {kernel} is a pointer: pass a C-contiguous NumPy array",
                    hint="np.ascontiguousarray(x)",
                )
            values.append(a.reshape(1) if a.ndim == 0 else a)  # 0-d means "by value" below
        elif code in _SCALAR_DTYPES:
            dtype = np.dtype(_SCALAR_DTYPES[code])
            if isinstance(a, np.generic) and a.dtype != dtype:
                raise NcdcError(f"argument {i} of {kernel} is {dtype}, got a NumPy {a.dtype}")
            if isinstance(a, np.ndarray):
                raise NcdcError(f"argument {i} of {kernel} is a {dtype} scalar, got an array")
            values.append(np.array(a, dtype=dtype))
        elif code.startswith("b") and isinstance(a, np.ndarray) and _by_value_struct(a):
            if a.nbytes != int(code[1:]):  # a struct by value: a tensor map's 128 bytes
                raise NcdcError(f"argument {i} of {kernel} is {code[1:]} bytes, got {a.nbytes}")
            values.append(a)
        else:
            raise NcdcError(
                f"argument {i} of {kernel} has a by-value type the launcher cannot pass ({code})"
            )
    return values


def _run(
    dll: ctypes.CDLL,
    kernel: str,
    grid: tuple[int, int, int],
    block: tuple[int, int, int],
    smem: int,
    values: list[Any],
    counters: bool = False,
    entry_registers: int = 0,
) -> Traffic:
    """Call the library's launch entry; arrays are passed by pointer, 0-d arrays by value."""
    n = len(values)
    ptrs = (ctypes.c_void_p * max(n, 1))()
    slots = (ctypes.c_void_p * max(n, 1))()  # the pointer values the kernel's pointer args read
    ranges = []
    for i, v in enumerate(values):
        if v.ndim == 0:
            ptrs[i] = v.ctypes.data
        else:
            slots[i] = v.ctypes.data
            ptrs[i] = ctypes.addressof(slots) + i * ctypes.sizeof(ctypes.c_void_p)
            ranges += [v.ctypes.data, v.ctypes.data + v.nbytes]
    fn = getattr(dll, f"ncdc_launch_{kernel}")
    fn.restype = ctypes.c_int
    range_arr = (ctypes.c_ulonglong * max(len(ranges), 1))(*ranges)
    traffic = (ctypes.c_ulonglong * 11)(int(counters), int(entry_registers))  # the inputs
    err = ctypes.create_string_buffer(_ERR_LEN)
    rc = fn(
        (ctypes.c_uint * 3)(*grid),
        (ctypes.c_uint * 3)(*block),
        ctypes.c_ulonglong(smem),
        ptrs,
        range_arr,
        ctypes.c_int(len(ranges) // 2),
        traffic,
        err,
        ctypes.c_int(_ERR_LEN),
    )
    if rc != 0:
        raise NcdcError(err.value.decode(errors="replace"))
    return Traffic(int(traffic[0]), int(traffic[1]), Counters(*(int(t) for t in traffic[2:])))


def sanitizer_runtime(sanitize: str) -> str:
    """The path of the compiler's runtime library for `sanitize` ("address" or "race")."""
    rt = _RUNTIMES[sanitize]
    cxx = find_compiler()
    out = subprocess.run([cxx, f"-print-file-name={rt.library}"], capture_output=True, text=True)
    path = out.stdout.strip()
    if not path or not os.path.isabs(path) or not os.path.exists(path):
        raise NcdcError(
            f"sanitizer runtime {rt.library} not found for {cxx}",
            hint=f"apt-get install {rt.package}",
        )
    return os.path.realpath(path)


def _asan_runtime() -> str:
    return sanitizer_runtime("address")


# TSan maps its shadow at fixed addresses; with some kernels' ASLR (large mmap_rnd_bits) a
# library can land there. Rerunning with randomisation off (`setarch -R`) avoids it.
_TSAN_BAD_MAPPING = "ThreadSanitizer: unexpected memory mapping"


# The sanitizer's child: isolated (`-I`: no current folder, script folder, PYTHONPATH or
# user site on its import path), in a private working folder, and given the folder that
# holds this ncdc package last, after the standard library, so nothing there shadows it.
_CHILD = (
    "import sys; sys.path.append(sys.argv[1]); import ncdc.backends.cpu as e; "
    "e._sanitized_child(sys.argv[2], sys.argv[3])"
)


def _package_parent() -> str:
    return str(Path(__file__).resolve().parents[2])


def _run_sanitized(
    sanitize: str, kernel: str, request: tuple[Any, ...]
) -> tuple[list[np.ndarray], Traffic]:
    rt = _RUNTIMES[sanitize]
    with tempfile.TemporaryDirectory(prefix=f"ncdc-{sanitize}-") as tmp:
        req, response = Path(tmp) / "request.pkl", Path(tmp) / "response.pkl"
        req.write_bytes(pickle.dumps(request))
        env = dict(os.environ)
        env["LD_PRELOAD"] = sanitizer_runtime(sanitize)
        env[rt.options_var] = rt.options
        cmd = [sys.executable, "-I", "-c", _CHILD, _package_parent(), str(req), str(response)]
        run = functools.partial(
            subprocess.run, env=env, cwd=tmp, capture_output=True, text=True, check=False
        )
        proc = run(cmd)
        if _TSAN_BAD_MAPPING in proc.stderr and (setarch := shutil.which("setarch")):
            proc = run([setarch, os.uname().machine, "-R", *cmd])
        if proc.returncode != 0 or not response.is_file():
            if sanitize == "race":
                raise tsan_failure(kernel, proc.stderr)
            raise asan_failure(kernel, proc.stderr)
        outputs, traffic, error = pickle.loads(response.read_bytes())
    if error:
        raise NcdcError(error)
    return outputs, traffic


def _sanitized_child(request: str, response: str) -> None:
    """Runs in the subprocess: device buffers are malloc'd inside the library (redzones)."""
    library, kernel, grid, block, smem, args, counters, registers = pickle.loads(
        Path(request).read_bytes()
    )
    dll = ctypes.CDLL(library)
    try:
        values = _check_args(kernel, _signature(dll, Path(library), kernel), args)
    except NcdcError as e:
        Path(response).write_bytes(pickle.dumps(([], Traffic(0, 0), e.line())))
        return
    dll.ncdc_emu_malloc.restype = ctypes.c_void_p
    dll.ncdc_emu_malloc.argtypes = [ctypes.c_ulonglong]
    dll.ncdc_emu_free.argtypes = [ctypes.c_void_p]
    buffers = []
    device = []
    for v in values:
        if v.ndim == 0:
            device.append(v)
            continue
        ptr = dll.ncdc_emu_malloc(v.nbytes)
        ctypes.memmove(ptr, v.ctypes.data, v.nbytes)
        buffers.append((ptr, v))
        array_t = ctypes.c_ubyte * v.nbytes
        device.append(np.frombuffer(array_t.from_address(ptr), dtype=v.dtype).reshape(v.shape))
    error, traffic = "", Traffic(0, 0)
    try:
        traffic = _run(dll, kernel, grid, block, smem, device, counters, registers)
    except NcdcError as e:
        error = e.line()
    outputs = [d.copy() for d in device if d.ndim != 0]
    for ptr, _ in buffers:
        dll.ncdc_emu_free(ptr)
    Path(response).write_bytes(pickle.dumps((outputs, traffic, error)))
