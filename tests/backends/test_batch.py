"""Compiling a folder of specs (ncdc.backends.batch): every spec on the pool, a refused one
reported on its line and the others compiled.
"""

from __future__ import annotations

import json
import shutil

from tests.support import ROOT, ncdc

SPECS = ROOT / "diagrams"


def test_folder_compile_goes_past_a_refused_diagram(tmp_path):
    folder = tmp_path / "specs"
    folder.mkdir()
    for name in ("softmax", "fp8_matmul", "rmsnorm"):
        shutil.copy(SPECS / f"{name}.yaml", folder / f"{name}.yaml")
    (folder / "broken.yaml").write_text("ncdc: 1\nname: broken\n")
    out = tmp_path / "out"
    result = ncdc("compile", str(folder), "--arch", "sm_80", "-o", str(out), "--format", "json")
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 2, result.stderr
    assert any("fp8" in e for e in errors) and any("broken" in e for e in errors)
    assert result.returncode == 2
    compiled = json.loads(result.stdout)
    assert sorted(d["name"] for d in compiled) == ["rmsnorm", "softmax"]
    assert sorted(p.name for p in out.iterdir()) == sorted(
        f"{n}{s}" for n in ("rmsnorm", "softmax") for s in (".cu", ".cubin", ".json")
    )
    assert "Traceback" not in result.stderr


def _square(x: int) -> int:
    return x * x


def test_a_stopped_pools_wakeup_races_no_error_out():
    # Ctrl-C stops the compile pool (batch._stop_pool). At exit, concurrent.futures wakes
    # each pool's manager thread through a pipe it checks open and then writes, while the
    # thread may close the pipe in between: on a loaded machine the write failed with "Bad
    # file descriptor", a traceback after "interrupted". The race, forced: the pipe closed
    # under a wake-up that still sees it open.
    from concurrent.futures import ProcessPoolExecutor

    import pytest

    from ncdc.backends.batch import _stop_pool

    pool = ProcessPoolExecutor(max_workers=1)
    assert pool.submit(_square, 3).result() == 9
    wakeup = getattr(pool, "_executor_manager_thread_wakeup", None)
    if wakeup is None or not hasattr(wakeup, "_writer"):
        pytest.skip("this Python's process pool has no wake-up pipe")
    writer = wakeup._writer
    _stop_pool(pool)
    wakeup._closed = False  # the check passed just before the manager thread closed it
    writer.close()
    wakeup.wakeup()  # no error
    with pytest.raises(OSError):  # what the unguarded wake-up does then
        type(wakeup).wakeup(wakeup)
