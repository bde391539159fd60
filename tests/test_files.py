"""Files ncdc writes (ncdc.files): atomically, with the user's umask."""

from __future__ import annotations

from ncdc import files


def test_files_get_the_umask_mode(tmp_path):
    files.write_atomic(tmp_path / "x", b"1")
    assert (tmp_path / "x").stat().st_mode & 0o777 == files.file_mode()
    assert files.file_mode() != 0o600  # not a temporary file's mode
