"""What this process may use of the machine: CPUs (affinity, cgroup quota) and memory
(what is available, capped by a cgroup limit).

>>> default_jobs() >= 1
True
"""

from __future__ import annotations

import os
from pathlib import Path

from ncdc.units import ceil_div


def default_jobs() -> int:
    """The CPUs this process may use: its affinity, capped by a cgroup CPU quota."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    quota = cgroup_cpus()
    return max(1, min(cpus, quota) if quota else cpus)


def cgroup_cpus(path: Path = Path("/sys/fs/cgroup/cpu.max")) -> int | None:
    """`cpu.max` ("quota period", or "max period") as whole CPUs, rounded up; None if
    unlimited or unreadable.

        >>> import tempfile; f = Path(tempfile.mkdtemp()) / "cpu.max"
        >>> _ = f.write_text("150000 100000"); cgroup_cpus(f)
        2
    """
    fields = _cgroup_fields(path)
    if not fields or fields[0] == "max" or len(fields) < 2:
        return None
    try:
        return max(1, ceil_div(int(fields[0]), int(fields[1])))
    except ValueError:
        return None


def available_memory() -> int:
    """Bytes this process can still use: MemAvailable, capped by a cgroup memory limit."""
    free = _meminfo_available()
    limit = cgroup_memory_left()
    return min(free, limit) if limit is not None else free


def _meminfo_available() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")


def cgroup_memory_left(root: Path = Path("/sys/fs/cgroup")) -> int | None:
    """`memory.max` less `memory.current` in bytes; None if unlimited or unreadable."""
    limit, current = _cgroup_fields(root / "memory.max"), _cgroup_fields(root / "memory.current")
    if not limit or limit[0] == "max" or not current:
        return None
    try:
        return max(0, int(limit[0]) - int(current[0]))
    except ValueError:
        return None


def _cgroup_fields(path: Path) -> list[str]:
    """The whitespace-separated fields of a cgroup file, or [] when it cannot be read."""
    try:
        return path.read_text().split()
    except OSError:
        return []
