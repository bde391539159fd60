"""The commands that describe the installation: `hardware`, `includes`, `cache`, `env`."""

from __future__ import annotations

import json

from ncdc import __version__
from tests.support import ncdc


def test_env_in_text_and_json():
    text = ncdc("env")
    assert text.returncode == 0 and f"ncdc: {__version__}" in text.stdout
    data = json.loads(ncdc("env", "--format", "json").stdout)
    assert data["format"] == "ncdc.env/1" and data["defaults"]["hardware"]["source"]


def test_env_never_fails_on_a_bad_default():
    """A report for a bug must come out even when the defaults are what is wrong."""
    result = ncdc("env", env={"NCDC_HARDWARE": ""})
    assert result.returncode == 0
    data = json.loads(ncdc("env", "--format", "json", env={"NCDC_HARDWARE": "h900"}).stdout)
    assert data["defaults"]["hardware"] == {"value": "h900", "source": "NCDC_HARDWARE"}


def test_hardware_lists_profiles_and_shows_one():
    listed = json.loads(ncdc("hardware", "--format", "json").stdout)
    assert "h200" in {p["name"] for p in listed}
    one = ncdc("hardware", "a100")
    assert one.returncode == 0 and "a100" in one.stdout


def test_env_text_is_not_read_as_markup(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.ncdc]\nhardware = "a100"\n')
    text = ncdc("env", cwd=tmp_path).stdout
    assert f"default hardware: a100 (from {tmp_path / 'pyproject.toml'} [tool.ncdc])" in text
