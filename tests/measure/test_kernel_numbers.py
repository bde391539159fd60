"""A kernel's compiled numbers against the static ones (ncdc.measure.kernel_numbers):
each field that moved is named with both values; a missing kernel is a difference; a SASS
mix one side could not read is not."""

from __future__ import annotations

from ncdc.measure.kernel_numbers import differences


def _job(*kernels):
    return {
        "kernels": [
            dict(zip(("kernel", "registers", "spills", "sass"), k, strict=True)) for k in kernels
        ]
    }


def test_differences_name_each_field_that_moved():
    static = {"jobs": [_job(("a", 168, 0, {"tensor": 64}), ("b", 40, 0, {"alu": 10}))]}
    here = [_job(("a", 168, 8, {"tensor": 64}), ("b", 40, 0, {"alu": 12}), ("c", 32, 0, {}))]
    assert differences(here, static) == [
        {"kernel": "a", "spills": {"static": 0, "here": 8}},
        {"kernel": "b", "sass": {"static": {"alu": 10}, "here": {"alu": 12}}},
        {"kernel": "c", "missing": "not in the static numbers"},
    ]


def test_a_sass_mix_missing_on_one_side_is_not_compared():
    static = {"jobs": [_job(("a", 168, 0, {}))]}
    assert differences([_job(("a", 168, 0, {"tensor": 64}))], static) == []
    assert differences([_job(("a", 168, 0, {"tensor": 64}))], {}) == [
        {"kernel": "a", "missing": "not in the static numbers"}
    ]
