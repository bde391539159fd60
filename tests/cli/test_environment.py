"""`ncdc env`: every probe answers, whatever is missing, and the text shows each default
with its source."""

from __future__ import annotations

from ncdc.cli import environment
from ncdc.cli.environment import describe_env, env_text
from ncdc.version import __version__


def test_the_report_names_every_piece():
    found = describe_env()
    assert found["ncdc"] == __version__
    keys = {"python", "numpy", "nvrtc", "cupy", "driver", "torch", "cache_root", "defaults"}
    assert keys <= set(found)
    assert set(found["defaults"]) == {"hardware", "arch"}


def test_a_broken_probe_is_reported_not_raised(monkeypatch):
    def broken():
        raise RuntimeError("libnvrtc.so: cannot open shared object file")

    monkeypatch.setattr(environment, "_nvrtc_version", broken)
    found = describe_env()
    assert found["nvrtc"].startswith("unavailable: RuntimeError: libnvrtc.so")


def test_text_shows_defaults_with_their_source(monkeypatch):
    monkeypatch.setenv("NCDC_HARDWARE", "a100")
    text = env_text(describe_env())
    assert "default hardware: a100 (from NCDC_HARDWARE)" in text
    assert f"ncdc: {__version__}" in text.splitlines()
