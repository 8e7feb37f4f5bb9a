"""K per batch size: ranges from choices, the choice rule (never slower than AR on the
prompts it was chosen on; off where the held-out prompts do not confirm it), the replay
screen, input refusals, the real batched measurement behind it, and the search wiring."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tiny import llama_model, one_thread, save_tiny, tiny_llama  # noqa: F401  (autouse fixture)

from autotune.cli.main import main
from autotune.common.errors import AutotuneError
from autotune.schema.config import DecodeConfig
from autotune.search import schedule
from autotune.search.schedule import candidate_ks, parse_batch_sizes, parse_ks


def ranges(chosen: dict[int, int]) -> list[dict[str, int]]:
    """`schedule.ranges` as best.json writes them."""
    return [r.to_json() for r in schedule.ranges(chosen)]


def tune(*args, **kwargs) -> dict:
    """`schedule.tune`'s section as best.json writes it."""
    return schedule.tune(*args, **kwargs).to_json()


def test_ranges_cover_from_one_and_merge_equal_neighbours():
    assert ranges({1: 4, 2: 3, 4: 0, 8: 0}) == [
        {"start": 1, "end": 1, "k": 4}, {"start": 2, "end": 3, "k": 3},
        {"start": 4, "end": 8, "k": 0}]
    # The smallest tuned size's K covers the sizes below it.
    assert ranges({4: 2, 16: 1}) == [{"start": 1, "end": 15, "k": 2},
                                     {"start": 16, "end": 16, "k": 1}]
    assert ranges({1: 3, 2: 3}) == [{"start": 1, "end": 2, "k": 3}]


@pytest.mark.parametrize("text, message", [
    ("1,x", "not a comma-separated list"), ("0,2", "at least 1"), ("2,2", "twice"),
    ("", "at least 1")])
def test_bad_batch_sizes(text, message):
    with pytest.raises(AutotuneError, match=message):
        parse_batch_sizes(text)


def test_batch_sizes_sorted_and_ks_parsed():
    assert parse_batch_sizes("8, 1,4") == (1, 4, 8)
    assert parse_ks("4,1,2,2") == (1, 2, 4)
    with pytest.raises(AutotuneError, match="at least 1"):
        parse_ks("0,2")
    assert candidate_ks(DecodeConfig(method="ngram", k=5), 4) == (1, 2, 3, 4, 5)
    assert candidate_ks(DecodeConfig(method="ngram", k=2), None, (6,)) == (2, 6)


def _fake(table: dict[tuple[str, int, int], float]):
    """A measure function reading speedups from {(split, B, K): speedup}; the split is
    told by which prompt list is passed."""
    calls = []

    def measure(config, prompts, size):
        split = prompts[0]
        calls.append((split, size, config.k))
        speedup = table[(split, size, config.k)]
        return {"speedup": speedup, "speedup_ci90": [speedup - 0.1, speedup + 0.1],
                "tokens_per_s": 100 * speedup, "ar_tokens_per_s": 100.0,
                "mean_accepted_tokens": 2.0, "lossless": True}
    return measure, calls


def test_tune_picks_the_fastest_k_per_batch_size_and_turns_off_where_none_pays():
    table = {("s", 1, 1): 1.2, ("s", 1, 3): 1.5, ("s", 4, 1): 1.1, ("s", 4, 3): 0.9,
             ("s", 8, 1): 0.8, ("s", 8, 3): 0.6,
             ("h", 1, 3): 1.4, ("h", 4, 1): 1.05}
    measure, calls = _fake(table)
    search, held = ["s"] * 8, ["h"] * 8
    out = tune(DecodeConfig(method="ngram", k=3), (1, 4, 8), (1, 3), search, held, measure)
    assert out["ranges"] == [{"start": 1, "end": 3, "k": 3}, {"start": 4, "end": 7, "k": 1},
                             {"start": 8, "end": 8, "k": 0}]
    # Every (B, K) measured on the search prompts; only chosen K > 0 on the held-out ones.
    assert sorted(c for c in calls if c[0] == "s") == sorted(
        ("s", b, k) for b in (1, 4, 8) for k in (1, 3))
    assert [c for c in calls if c[0] == "h"] == [("h", 1, 3), ("h", 4, 1)]
    chosen = {(p["batch_size"], p["split"]): p["k"] for p in out["points"] if p["chosen"]}
    assert chosen == {(1, "search"): 3, (4, "search"): 1, (8, "search"): 0,
                      (1, "held_out"): 3, (4, "held_out"): 1}
    assert out["method"] == "ngram" and out["batch_sizes"] == [1, 4, 8]


def test_a_k_the_held_out_prompts_do_not_confirm_is_turned_off():
    table = {("s", 1, 2): 1.3, ("s", 2, 2): 1.2, ("h", 1, 2): 1.25, ("h", 2, 2): 0.97}
    measure, _ = _fake(table)
    out = tune(DecodeConfig(method="ngram", k=2), (1, 2), (2,), ["s"] * 4, ["h"] * 4, measure)
    assert out["ranges"] == [{"start": 1, "end": 1, "k": 2}, {"start": 2, "end": 2, "k": 0}]
    assert any("B=2: K=2 was not faster" in note for note in out["notes"])


def test_a_lossy_k_is_never_chosen():
    def measure(config, prompts, size):
        return {"speedup": 2.0, "lossless": False, "tokens_per_s": 1.0, "ar_tokens_per_s": 0.5}
    out = tune(DecodeConfig(method="ngram", k=2), (1,), (2,), ["s"], [], measure)
    assert out["ranges"] == [{"start": 1, "end": 1, "k": 0}]


def test_the_replay_screen_measures_the_best_predicted_and_the_config_own_k():
    measured = []

    def measure(config, prompts, size):
        measured.append((size, config.k))
        return {"speedup": 1.0 + config.k / 100, "lossless": True}

    def predict(config, size):
        return {1: 1.1, 2: 1.4, 3: 1.3, 4: 1.2, 6: 0.9, 8: 0.5}[config.k]

    tune(DecodeConfig(method="ngram", k=8), (1,), (1, 2, 3, 4, 6, 8), ["s"], [], measure,
         predict)
    assert sorted(measured) == [(1, 2), (1, 3), (1, 4), (1, 8)]


def test_too_few_search_prompts_for_the_largest_batch():
    with pytest.raises(AutotuneError, match="--batch-sizes 4 needs at least 4 search prompts"):
        tune(DecodeConfig(method="ngram"), (1, 4), (1,), ["s"] * 3, [], lambda *a: {})


def test_tune_over_real_batched_measurements_is_consistent():
    """The rule over real `measure_batched` summaries of a tiny model: a point per
    (B, K), each lossless, and a chosen K > 0 only where its measured speedup is > 1."""
    from autotune.measure.batched import measure_batched
    from autotune.workloads.prompts import Prompt

    target = tiny_llama(seed=5, layers=4, scale=4.0)
    prompts = [Prompt(f"p{i}", "c", " ".join(f"t{(i + j) % 7 + 1}" for j in range(9)))
               for i in range(4)]

    def measure(config, chosen_prompts, size):
        return measure_batched(target, config, chosen_prompts, size, 12).summary()

    out = tune(DecodeConfig(method="ngram", k=2, ngram_min=1, ngram_max=2), (1, 2), (1, 2),
               prompts, [], measure)
    search = [p for p in out["points"] if p["split"] == "search"]
    assert sorted((p["batch_size"], p["k"]) for p in search) == [
        (1, 0), (1, 1), (1, 2), (2, 0), (2, 1), (2, 2)]
    assert all(p.get("lossless", True) for p in search)
    for size in (1, 2):
        chosen = [p for p in search if p["batch_size"] == size and p["chosen"]]
        assert len(chosen) == 1
        if chosen[0]["k"]:
            assert chosen[0]["speedup"] > 1.0
        else:
            assert all(p["speedup"] <= 1.0 for p in search if p["batch_size"] == size and p["k"])


@pytest.mark.parametrize("extra, message", [
    (["--batch-sizes", "1,0"], "at least 1"),
    (["--batch-sizes", "1,8"], "--batch-sizes 8 needs at least 8 search prompts"),
    (["--schedule-k", "2"], "--schedule-k needs --batch-sizes"),
])
def test_search_refuses_bad_schedule_flags_before_loading(tmp_path, capsys, extra, message,
                                                            monkeypatch):
    from autotune.models import loading

    monkeypatch.setattr(loading, "load_model", lambda *a, **k: pytest.fail("loaded"))
    workload = tmp_path / "p.txt"
    workload.write_text("t1 t2 t3\nt4 t5 t6\n")
    assert main(["search", "--workload", str(workload), "--validation", "0",
                 "--out", str(tmp_path / "r"), *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


def test_search_with_batch_sizes_writes_a_schedule_and_a_rerun_measures_nothing_again(
        tmp_path, capsys):
    model = save_tiny(llama_model(seed=5, layers=4, scale=4.0), tmp_path / "model")
    workload = tmp_path / "prompts.txt"
    workload.write_text("t1 t2 t3 t4 t5 t1 t2 t3 t4 t5 t1 t2\nt7 t8 t9 t7 t8 t9 t7 t8\n" * 2)
    out = tmp_path / "run"
    args = ["search", "--model", str(model), "--workload", str(workload), "--space", "ngram",
            "--trials", "3", "--max-new-tokens", "12", "--validation", "0",
            "--fidelity", "measure", "--no-prune", "--out", str(out),
            "--batch-sizes", "1,2", "--schedule-k", "1,2"]
    assert main(args) == 0
    first = capsys.readouterr().err
    schedule = json.loads((out / "best.json").read_text())["schedule"]
    assert schedule["batch_sizes"] == [1, 2]
    assert schedule["ranges"][0]["start"] == 1 and schedule["ranges"][-1]["end"] == 2
    if schedule["method"] == "none":          # the search's best is the AR baseline
        assert schedule["points"] == [] and "not to speculate" in schedule["notes"][0]
    else:
        assert "tuning K per batch size 1,2" in first
        measured = {(p["batch_size"], p["k"]) for p in schedule["points"]}
        assert {(1, 0), (2, 0), (1, 1), (2, 1), (1, 2), (2, 2)} <= measured
    assert "batch-size" in (out / "report.html").read_text()
    assert main(args) == 0
    assert "tuning K per batch size" not in capsys.readouterr().err
    assert json.loads((out / "best.json").read_text())["schedule"] == schedule


def test_near_ties_go_to_the_smaller_k():
    table = {("s", 1, 2): 1.40, ("s", 1, 4): 1.41, ("s", 1, 8): 1.30}
    measure, _ = _fake(table)
    out = tune(DecodeConfig(method="ngram", k=4), (1,), (2, 4, 8), ["s"], [], measure)
    assert out["ranges"] == [{"start": 1, "end": 1, "k": 2}]
