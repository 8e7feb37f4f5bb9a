"""Peak RSS per stage (autotune.common.memory) and its record in run.json (issue 51)."""

from __future__ import annotations

import json

import pytest

from autotune.common.memory import StagePeaks, current_rss_bytes, gb, peak_rss_bytes
from autotune.pipeline.record import record_stages


def test_a_stage_that_held_memory_peaks_above_the_next():
    peaks = StagePeaks()
    if not peaks.per_stage:
        pytest.skip("this OS cannot restart the high-water mark (/proc/self/clear_refs)")
    block = bytearray(300 * 2**20)          # 300 MiB, touched so that it is resident
    block[:: 4096] = b"x" * len(block[:: 4096])
    del block                               # freed inside the stage: its peak keeps it
    held = peaks.lap()
    after = peaks.lap()
    assert held >= 300 * 2**20
    assert after < held - 200 * 2**20
    assert peak_rss_bytes() >= (current_rss_bytes() or 0)


def test_stages_and_their_peaks_are_added_to_run_json(tmp_path):
    (tmp_path / "run.json").write_text(json.dumps({"study": "s"}))
    record_stages(tmp_path, (("loading", 3.04), ("screening", 10.0)), (2 * 10**9, 3 * 10**9))
    doc = json.loads((tmp_path / "run.json").read_text())
    assert doc["study"] == "s"
    assert doc["stages"] == [
        {"stage": "loading", "seconds": 3.0, "peak_rss_bytes": 2 * 10**9},
        {"stage": "screening", "seconds": 10.0, "peak_rss_bytes": 3 * 10**9}]
    assert doc["peak_rss_bytes"] == 3 * 10**9
    assert gb(doc["peak_rss_bytes"]) == "3.00 GB"


def test_no_run_json_is_left_alone(tmp_path):
    record_stages(tmp_path, (("loading", 1.0),), (10**9,))
    assert not (tmp_path / "run.json").exists()


def test_the_process_tree_peak_counts_an_engine_child(tmp_path):
    """Issue 59: vLLM's engines and llama-server are children; the run's peak counts
    them beside its own (their PSS, sampled)."""
    import subprocess
    import sys
    import time

    from autotune.common.memory import TreePeaks, descendants, tree_bytes

    peaks = TreePeaks(every_s=0.05)
    if not peaks.available:
        pytest.skip("no /proc/self/smaps_rollup here")
    peaks.lap()
    ready = tmp_path / "ready"
    child = subprocess.Popen([sys.executable, "-c",
                              "import pathlib, time\n"
                              "held = bytearray(300 * 2**20)\n"
                              "held[::4096] = b'x' * len(held[::4096])\n"
                              f"pathlib.Path({str(ready)!r}).write_text('')\n"
                              "time.sleep(30)\n"])
    try:
        while not ready.exists():
            # A child that died before it was ready fails the test, not hangs it.
            assert child.poll() is None, "the child holding memory exited early"
            time.sleep(0.05)
        assert child.pid in descendants(__import__("os").getpid())
        assert tree_bytes(child.pid) > 250 * 2**20
        time.sleep(0.2)
        own = current_rss_bytes() or 0
        assert peaks.lap() >= own + 250 * 2**20
    finally:
        child.kill()
        child.wait()
        peaks.close()
    # With the child gone (and the sampling stopped), a stage's peak is this process's
    # alone again.
    peaks.lap()
    assert peaks.lap() < (current_rss_bytes() or 0) + 250 * 2**20


def test_run_json_keeps_the_process_tree_peak_beside_its_own(tmp_path):
    (tmp_path / "run.json").write_text(json.dumps({"study": "s"}))
    record_stages(tmp_path, (("loading", 1.0), ("racing", 2.0)), (10**9, 2 * 10**9),
                  (10**9, 5 * 10**9))
    doc = json.loads((tmp_path / "run.json").read_text())
    assert [s["peak_tree_bytes"] for s in doc["stages"]] == [10**9, 5 * 10**9]
    assert doc["peak_tree_bytes"] == 5 * 10**9 and doc["peak_rss_bytes"] == 2 * 10**9
