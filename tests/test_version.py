"""The version (ncdc.version)."""

from __future__ import annotations

from ncdc import version


def test_the_version_is_the_package_version() -> None:
    import ncdc

    major, minor, patch = (int(x) for x in version.__version__.split("."))
    assert ncdc.__version__ == version.__version__ and major >= 0 <= minor and patch >= 0
