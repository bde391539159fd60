"""Project defaults: the environment beats `[tool.ncdc]` in the nearest pyproject.toml,
which beats the built-in; each value says where it came from, and a bad table is an
error naming the file."""

from __future__ import annotations

import pytest

from ncdc.errors import UsageError
from ncdc.hardware.defaults import BUILTIN, find_pyproject, profile_defaults


def _project(tmp_path, body: str):
    (tmp_path / "pyproject.toml").write_text(f'[project]\nname = "x"\n\n[tool.ncdc]\n{body}')
    inner = tmp_path / "src" / "deep"
    inner.mkdir(parents=True)
    return inner


def test_the_nearest_pyproject_is_found_walking_up(tmp_path):
    inner = _project(tmp_path, 'hardware = "a100"\n')
    assert find_pyproject(inner) == tmp_path / "pyproject.toml"
    d = profile_defaults(environ={}, cwd=inner)
    assert d["hardware"].value == "a100"
    assert d["hardware"].source == f"{tmp_path / 'pyproject.toml'} [tool.ncdc]"
    assert d["arch"].value is None and d["arch"].source == BUILTIN


def test_the_environment_beats_the_pyproject(tmp_path):
    inner = _project(tmp_path, 'hardware = "a100"\narch = "sm_80"\n')
    d = profile_defaults(environ={"NCDC_HARDWARE": "l40s"}, cwd=inner)
    assert (d["hardware"].value, d["hardware"].source) == ("l40s", "NCDC_HARDWARE")
    assert d["arch"].value == "sm_80"
    assert d["hardware"].describe() == "hardware l40s (from NCDC_HARDWARE)"


def test_a_relative_profile_file_is_read_from_the_pyproject_folder(tmp_path):
    inner = _project(tmp_path, 'hardware = "gpus/mine.yaml"\n')
    d = profile_defaults(environ={}, cwd=inner)
    assert d["hardware"].value == str(tmp_path / "gpus" / "mine.yaml")


def test_no_pyproject_means_built_in(tmp_path):
    d = profile_defaults(environ={}, cwd=tmp_path)
    assert all(v.source == BUILTIN and v.value is None for v in d.values())


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ('hardwre = "a100"\n', "unknown key 'hardwre'"),
        ("hardware = 80\n", "expected a string for hardware"),
        ("hardware = [\n", "cannot read it"),
    ],
)
def test_a_bad_table_names_the_file(tmp_path, body, message):
    inner = _project(tmp_path, body)
    with pytest.raises(UsageError, match=message) as caught:
        profile_defaults(environ={}, cwd=inner)
    assert str(tmp_path / "pyproject.toml") in caught.value.line()
