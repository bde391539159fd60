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
