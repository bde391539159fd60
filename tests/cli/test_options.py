"""ncdc.cli.options: the app the commands register on, and the profile every command loads
with its --hw overrides."""

from __future__ import annotations

import pytest

from ncdc.cli.options import app, load_machine
from ncdc.errors import HardwareError


def test_every_command_is_registered_on_the_one_app() -> None:
    import ncdc.cli.main  # noqa: F401  (registers the commands)

    names = {c.name or c.callback.__name__ for c in app.registered_commands}
    assert {"cost", "compile", "run", "bench", "tune", "calibrate", "includes"} <= names


def test_a_profile_is_loaded_with_its_overrides() -> None:
    hw = load_machine("a100", ["hbm.bandwidth=4e12"])
    assert hw.achieved_bandwidth("hbm") == 4e12
    with pytest.raises(HardwareError, match="unknown level 'l9'"):
        load_machine("a100", ["l9.capacity=4"])
