"""What a sanitizer's report says, in one line: the first out-of-bounds access (address
sanitizer) or data race (thread sanitizer) of an emulated kernel, named by the kernel's
own variables where the report names them.
"""

from __future__ import annotations

import re

from ncdc.errors import CheckFailed, NcdcError


def failure_tail(sanitize: str, kernel: str, stderr: str) -> NcdcError:
    tail = stderr.strip().splitlines()[-1:] or ["no output"]
    return NcdcError(f"{sanitize}-sanitized run of {kernel} failed: {tail[0]}")


def asan_failure(kernel: str, stderr: str) -> NcdcError:
    kind = re.search(r"ERROR: AddressSanitizer: ([\w-]+)", stderr)
    access = re.search(r"^(READ|WRITE) of size (\d+)", stderr, re.M)
    where = re.search(r"^NCDC-EMU-WHERE: (.*)$", stderr, re.M)
    if not kind:
        return failure_tail("address", kernel, stderr)
    text = f"AddressSanitizer: {kind[1]}"
    if access:
        text += f": {access[1]} of size {access[2]}"
    text += f" in {where[1]}" if where else f" in kernel {kernel}"
    return CheckFailed(text)


_TSAN_KIND = re.compile(r"WARNING: ThreadSanitizer: (.+?) \(pid=")


# "  Write of size 4 at 0x7f.. by thread T3:" then "  Previous read of size 4 at ..."
_TSAN_ACCESS = re.compile(
    r"^  (?:Previous )?(?P<atomic>[Aa]tomic )?(?P<op>[Rr]ead|[Ww]rite) of size "
    r"(?P<size>\d+) at \S+ by (?:thread T(?P<tid>\d+)|main thread)",
    re.M,
)


_TSAN_THREAD = re.compile(r"^  Thread T(?P<tid>\d+) '(?P<name>[^']*)'", re.M)


_TSAN_GLOBAL = re.compile(r"^  Location is global '(?P<name>[^']+)'", re.M)


def tsan_failure(kernel: str, stderr: str) -> NcdcError:
    """One line from a TSan report; the fibers are named "block (x,y,z) thread (x,y,z)"."""
    kind = _TSAN_KIND.search(stderr)
    if not kind:
        return failure_tail("race", kernel, stderr)
    text = f"ThreadSanitizer: {kind[1]} in kernel {kernel}"
    names = {m["tid"]: m["name"] for m in _TSAN_THREAD.finditer(stderr)}
    accesses = [_tsan_access(m, names) for m in _TSAN_ACCESS.finditer(stderr)][:2]
    if len(accesses) == 2:
        (who, did, size), (other, other_did, _) = accesses
        block, _, tid = who.partition(" thread ")
        other_block, _, other_tid = other.partition(" thread ")
        if block == other_block and tid and other_tid:
            who, other = f"thread {tid}", f"thread {other_tid}"
            text += " " + block
        unit = "byte" if size == "1" else "bytes"
        text += f": {who} {did} {size} {unit} that {other} {other_did}, with no barrier between"
    if loc := _TSAN_GLOBAL.search(stderr):
        text += f" (on '{loc['name']}')"
    return CheckFailed(text)


def _tsan_access(m: re.Match[str], names: dict[str, str]) -> tuple[str, str, str]:
    """(who, "read"/"wrote", size) of one access in a TSan report."""
    tid = m["tid"]
    who = names.get(tid, f"thread T{tid}") if tid else "the launching thread"
    did = "wrote" if m["op"].lower() == "write" else "read"
    return who, ("atomically " + did if m["atomic"] else did), m["size"]
