"""What the machine allows this process (ncdc.system)."""

from __future__ import annotations

from ncdc import system


def test_cgroup_limits_are_read_and_unlimited_is_none(tmp_path) -> None:
    (tmp_path / "cpu.max").write_text("250000 100000\n")
    assert system.cgroup_cpus(tmp_path / "cpu.max") == 3
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert system.cgroup_cpus(tmp_path / "cpu.max") is None
    assert system.cgroup_cpus(tmp_path / "missing") is None
    (tmp_path / "memory.max").write_text("1000\n")
    (tmp_path / "memory.current").write_text("400\n")
    assert system.cgroup_memory_left(tmp_path) == 600
    (tmp_path / "memory.max").write_text("max\n")
    assert system.cgroup_memory_left(tmp_path) is None
    assert system.available_memory() > 0 and system.default_jobs() >= 1
