"""The one interval type every record's `"ci90"` is read through."""

from __future__ import annotations

import math

from autotune.common.interval import CI_KEY, Interval, speedup_text


def test_an_interval_reads_what_records_write_and_nothing_else():
    ci = Interval.from_json([1.05, 1.2])
    assert ci == Interval(1.05, 1.2) and ci.to_json() == [1.05, 1.2]
    assert Interval.of({CI_KEY: [0.9, 1.1]}) == Interval(0.9, 1.1)
    # Missing, null, malformed or non-finite: no interval (a hand-edited file, one prompt).
    for value in (None, [], [1.0], [1.0, 2.0, 3.0], ["1", 2], [True, 2.0], [1.0, math.nan],
                  "1.0,2.0", {"low": 1}):
        assert Interval.from_json(value) is None, value
    assert Interval.of(None) is None and Interval.of({}) is None


def test_above_and_below_mean_the_whole_interval():
    ci = Interval(1.02, 1.30)
    assert ci.above(1.0) and not ci.above(1.02) and not ci.above(1.1)
    assert ci.below(1.31) and not ci.below(1.30) and not ci.below(1.2)


def test_speedup_text():
    assert speedup_text({"speedup": 1.1181, CI_KEY: [1.0654, 1.1723]}) == "1.118x [1.065, 1.172]"
    assert speedup_text({"speedup": 1.5}) == "1.500x"
    assert speedup_text({"speedup": None}) == "-" == speedup_text(None)
    assert speedup_text({}, missing="no speedup") == "no speedup"
