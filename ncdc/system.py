"""What this process may use of the machine: CPUs (affinity, cgroup quota).

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
    try:
        quota, period = path.read_text().split()[:2]
        if quota == "max":
            return None
        return max(1, ceil_div(int(quota), int(period)))
    except (OSError, ValueError):
        return None
