"""A sanitizer's report in one line (ncdc.backends.sanitizer_reports)."""

from __future__ import annotations

from ncdc.backends.sanitizer_reports import asan_failure, failure_tail, tsan_failure
from ncdc.errors import CheckFailed

ASAN = """=================================================================
==123==ERROR: AddressSanitizer: heap-buffer-overflow on address 0x602 at pc 0x7f bp 0x7e
WRITE of size 4 at 0x602000000050 thread T1
NCDC-EMU-WHERE: kernel scale, block (0, 0, 0), thread (3, 0, 0)
"""


def test_an_out_of_bounds_write_is_one_line_naming_the_thread() -> None:
    e = asan_failure("scale", ASAN)
    assert isinstance(e, CheckFailed)
    assert e.line() == (
        "AddressSanitizer: heap-buffer-overflow: WRITE of size 4 in kernel scale, block "
        "(0, 0, 0), thread (3, 0, 0)"
    )


def test_an_unrecognised_report_gives_its_last_line() -> None:
    assert failure_tail("race", "k", "a\nb\n").line() == "race-sanitized run of k failed: b"
    assert "no output" in asan_failure("k", "").line()
    assert tsan_failure("k", "nothing useful").line().endswith("nothing useful")
