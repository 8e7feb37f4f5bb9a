"""`autotune search --target all` (the default) on a tiny random-weight model: one run
answers for every engine whose rules autotune reproduces. Each engine's space is screened
by replay under its rules, its best config and documented default race with autotune's
finalists against one AR baseline, each engine is judged among its own, and best.json,
the exports, the summary and `export --format` follow each engine's answer."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest
from tiny import llama_model, one_thread, save_tiny  # noqa: F401  (autouse fixture)

from autotune.cli.main import main
from autotune.schema.engines import rules_for
from autotune.frozen.checks import load_frozen, problems
from autotune.frozen.engines import engine_answers
from autotune.search import finalists, racing
from autotune.search.storage import JOURNAL_NAME, storage_from_url
from autotune.search.targets import ANSWERED

# Repetitive prompts: the n-gram drafters of every engine find matches in them.
LINES = [{"category": "rep", "prompt": f"a{i} b{i} c{i} d{i} a{i} b{i} c{i} d{i} a{i} b{i}"}
         for i in range(8)]
LINES += [{"category": "mix", "prompt": f"x{i} y{i} z{i} x{i} y{i} z{i} x{i} y{i}"}
          for i in range(8)]
# What the tiny model answers for (llama-server needs a GGUF file: not this one).
TINY_ENGINES = ["hf", "sglang", "trtllm", "vllm"]


@pytest.fixture(scope="module")
def all_run(tmp_path_factory) -> tuple[Path, str, int]:
    """One `--target all` search (the default target: no --target given)."""
    folder = tmp_path_factory.mktemp("all")
    save_tiny(llama_model(seed=5, layers=4, scale=4.0), folder / "model")
    (folder / "prompts.jsonl").write_text("".join(json.dumps(x) + "\n" for x in LINES))
    run = folder / "run"
    args = ["search", "--model", str(folder / "model"), "--workload",
            str(folder / "prompts.jsonl"), "--space", "ngram", "--trials", "3",
            "--screen", "16", "--max-new-tokens", "16", "--prompts", "4",
            "--validation", "0.5", "--validation-prompts", "4", "--validation-pool", "6",
            "--finalists", "1", "--out", str(run), "--study", "all", "--no-prune"]
    import contextlib
    import io
    out = io.StringIO()
    # The engines that run here race in themselves (conftest leaves that out elsewhere).
    with contextlib.redirect_stdout(out), pytest.MonkeyPatch.context() as patch:
        patch.setenv("AUTOTUNE_ENGINE_RACES", "1")
        # A cache of its own: the engines' profiles of this tiny model stay out of the
        # machine's cache (they were written there, one per pytest folder).
        patch.setenv("AUTOTUNE_CACHE", str(folder / "cache"))
        code = main(args)
    return run, out.getvalue(), code


def _record(run: Path) -> finalists.ValidationRecord:
    study = optuna.load_study(study_name="all",
                              storage=storage_from_url(str(run / JOURNAL_NAME)))
    record = finalists.current_record(study)
    assert record is not None
    return record


def test_every_engine_gets_its_own_screened_raced_and_judged_answer(all_run):
    run, _, code = all_run
    assert code == 0
    record = _record(run)
    assert finalists.engine_names(record) == TINY_ENGINES
    for engine in TINY_ENGINES:
        entries = record.engine_finalists[engine]
        assert entries, engine
        # Each engine's finalists were drafted under its own rules...
        # (vLLM's on this CPU: its Model Runner V1's, `rules_for`)
        assert all(e.engine == engine and e.params.get("engine") == rules_for(engine, "cpu")
                   for e in entries)
        # ...measured in the same race (a held-out figure each, or dropped after a look)
        assert all(e.speedup is not None for e in entries)
        # ...and judged among themselves by the one rule.
        judged = record.engines[engine]
        decision, winner, _ = finalists.judge(entries, record.min_gain)
        assert (judged.decision, judged.winner) == (decision, winner)
    # autotune's own part reads as a single-engine record always did.
    written = record.to_json()
    assert all("engine" not in f for f in written["finalists"])
    own = finalists.engine_record(record, finalists.OWN_ENGINE)
    assert own is not None and not own.engines and own.finalists == record.finalists
    assert "engines" not in own.to_json() and own.to_json()["finalists"] == written["finalists"]


def test_best_json_holds_each_engine_answer_and_validates(all_run):
    run, _, _ = all_run
    best = load_frozen(run / "best.json")
    assert best["schema"] == "autotune.frozen/v6" and problems(best) == []
    answers = engine_answers(best)
    assert sorted(answers) == TINY_ENGINES
    record = _record(run)
    for engine, doc in answers.items():
        # HF runs here: its answer is its race in HF itself (below); the others', their
        # part of the race in our decoder under their rules.
        part = finalists.engine_record(record, engine)
        assert part is not None
        assert doc["validation"]["decision"] == part.decision
        if part.decision == finalists.SPECULATE:
            won = part.winning_entry()
            assert won is not None
            assert doc["params"]["engine"] == rules_for(engine, "cpu")
            assert doc["validation"]["speedup"] == won.speedup
        else:
            assert doc["params"]["method"] == "none"
        assert ("decoder_prediction" in doc["validation"]) == (engine == "hf")
        # What each figure is (issue 59): HF's measured in HF; the others predicted by
        # our decoder, each with why (a GPU engine here: SGLang, TensorRT-LLM).
        basis = doc["validation"]["basis"]
        if engine == "hf":
            assert (basis["kind"], basis["measured_in"]) == ("measured", "hf")
        else:
            assert (basis["kind"], basis["measured_in"]) == ("predicted", "autotune")
            assert basis["why"] in ("gpu_engine", "not_installed", "unsupported_input")
            assert engine not in ("sglang", "trtllm") or basis["why"] == "gpu_engine"
    assert best["validation"]["basis"] == {"kind": "measured", "measured_in": "autotune"}


def test_an_engine_that_runs_here_answers_from_a_race_in_itself(all_run):
    """HF runs on this machine: after the main race, its finalists race again in HF's own
    generate() against HF without speculation; that race is its answer (best.json, the
    exports, the summary), our decoder's figures for the same configs the prediction
    beside it. vLLM, left out of the suite's searches (conftest), stays predicted."""
    run, printed, _ = all_run
    record = _record(run)
    assert sorted(record.engine_races) == ["hf"]
    raced = record.engine_races["hf"]
    assert raced.measured_by == "hf" and not raced.engines
    predicted = record.predicted_for("hf")
    assert predicted is not None and predicted.measured_by == "autotune"
    # The same finalists, the same held-out sample, each measured in HF.
    assert [f.trial for f in raced.finalists] == [f.trial for f in predicted.finalists]
    assert raced.sample_sha256 == record.sample_sha256
    assert all(f.speedup is not None for f in raced.finalists)
    assert finalists.engine_record(record, "hf") == raced
    doc = engine_answers(load_frozen(run / "best.json"))["hf"]
    validation = doc["validation"]
    assert validation["measured_by"] == "hf"
    guess = validation["decoder_prediction"]
    shown = (raced.winning_entry() if raced.decision == finalists.SPECULATE
             else max(raced.finalists, key=lambda f: f.speedup or 0.0))
    assert guess["trial"] == shown.trial
    assert guess["speedup"] == predicted.entry(shown.trial).speedup
    # The table (summary and exports/README.txt) says where each answer was measured.
    for text in (printed, (run / "exports" / "README.txt").read_text()):
        assert "measured in" in text and "decoder predicted [90%]" in text
        assert "hf itself" in text and "autotune's decoder" in text
    folder = run / "exports" / "hf"
    notes = next(folder / name for name in ("launch.md", "README.txt")
                 if (folder / name).is_file()).read_text()
    assert "itself, against its own decoding without speculation" in notes
    if raced.decision == finalists.SPECULATE:
        assert "Predicted by autotune's decoder" in notes
    # The report's engine panel shows the prediction beside the measurement.
    html = (run / "report.html").read_text()
    assert "predicted by autotune&#x27;s decoder" in html or "predicted by autotune's decoder" in html
    assert "autotune&#x27;s decoder predicted" in html or "autotune's decoder predicted" in html
    # A rerun on the same sample keeps the race (test_a_rerun_remeasures_nothing).


def test_exports_hold_a_folder_per_engine_and_the_summary_opens_with_the_table(all_run):
    run, printed, _ = all_run
    exports = run / "exports"
    readme = (exports / "README.txt").read_text()
    best = load_frozen(run / "best.json")
    for engine, doc in engine_answers(best).items():
        folder = exports / engine
        assert folder.is_dir(), engine
        assert engine in readme and engine in printed
        decision = doc["validation"]["decision"]
        if decision == finalists.SPECULATE:
            text = (folder / "launch.md").read_text()
            assert "Held-out speedup" in text and "Drafting rules reproduced" in text
        else:
            text = (folder / "README.txt").read_text()
            assert "without speculative decoding" in text
        # vLLM runs on this CPU too: its figure (our decoder's) is labelled a prediction
        # and the command that measures it in vLLM itself is given.
        if engine == "vllm":
            assert "is a prediction" in text and "measure --in vllm" in text
        elif engine in ("sglang", "trtllm"):
            assert "serves on a GPU" in text
    # The summary opens with the per-engine table, then the detail, then time by stage.
    head = printed.index("the answer for every engine")
    assert head < printed.index("autotune's own search, in detail")
    assert "autotune (ceiling)" in printed and "time by stage:" in printed


def test_a_rerun_remeasures_nothing(all_run, tmp_path):
    run, _, _ = all_run
    before = json.dumps(_record(run).to_json(), sort_keys=True)
    import contextlib
    import io
    model = run.parent / "model"
    args = ["search", "--model", str(model), "--workload", str(run.parent / "prompts.jsonl"),
            "--space", "ngram", "--trials", "3", "--screen", "16", "--max-new-tokens", "16",
            "--prompts", "4", "--validation", "0.5", "--validation-prompts", "4",
            "--validation-pool", "6", "--finalists", "1", "--out", str(run), "--study",
            "all", "--no-prune"]
    with contextlib.redirect_stdout(io.StringIO()), pytest.MonkeyPatch.context() as patch:
        patch.setenv("AUTOTUNE_ENGINE_RACES", "1")     # the engine races are kept too
        patch.setenv("AUTOTUNE_CACHE", str(run.parent / "cache"))
        assert main(args) == 0
    assert json.dumps(_record(run).to_json(), sort_keys=True) == before
    # The typed record writes back exactly what the study stores (keys and order).
    study = optuna.load_study(study_name="all", storage=storage_from_url(str(run / JOURNAL_NAME)))
    stored = study.user_attrs[finalists.VALIDATION_ATTR]
    assert json.dumps(finalists.ValidationRecord.from_json(stored).to_json()) == json.dumps(stored)


def test_grouped_looks_drop_only_within_a_group():
    intervals = {"trial1": (1.30, 1.40), "trial2": (1.00, 1.10),
                 "vllm.trial3": (1.00, 1.10), "vllm.trial4": (0.80, 0.90)}
    groups = {"trial1": "autotune", "trial2": "autotune", "vllm.trial3": "vllm",
              "vllm.trial4": "vllm"}
    look = racing.next_look_by_group(intervals, groups, last=False, min_gain=0.05)
    # trial2 is behind autotune's leader; vllm.trial3 is vllm's leader, kept although
    # behind autotune's; vllm.trial4 is behind vllm's leader. autotune's group, one
    # finalist above 1 left, is decided: settled, measured no more.
    assert look.dropped == ["trial2", "vllm.trial4"]
    assert look.keep == ["vllm.trial3"] and look.stop is None
    # Ungrouped, the same figures drop vllm's leader too.
    assert "vllm.trial3" in racing.next_look(intervals, False, 0.05).dropped
    decided = racing.next_look_by_group({"trial1": (1.3, 1.4), "vllm.trial3": (1.2, 1.3)},
                                        groups, last=False, min_gain=0.05)
    assert decided.stop == "decided"
    # A group decided at a look is settled (measured no more, not dropped) while an
    # undecided one races on.
    partly = racing.next_look_by_group(
        {"trial1": (1.3, 1.4), "vllm.trial3": (0.9, 1.2), "vllm.trial4": (0.95, 1.25)},
        groups, last=False, min_gain=0.05)
    assert partly.keep == ["vllm.trial3", "vllm.trial4"] and partly.dropped == []
    assert partly.stop is None
    # One group alone behaves as `next_look`.
    alone = {"trial1": (1.3, 1.4)}
    assert racing.next_look_by_group(alone, groups, False, 0.05) == racing.next_look(
        alone, False, 0.05)


def test_answered_engines_are_the_reproduced_ones():
    assert ANSWERED == ("vllm", "sglang", "trtllm", "hf", "llama_server")


def test_the_screens_rank_on_more_search_prompts_never_held_out_ones(tmp_path):
    from autotune.workloads.split import split_prompts
    workload = tmp_path / "prompts.jsonl"
    workload.write_text("".join(json.dumps(x) + "\n" for x in LINES))
    split = split_prompts(str(workload), None, "0.25", 0, prompts=2, held_out=2, screen=6)
    ids = [p.prompt_id for p in split.screened]
    # The measured search prompts first, then more of the search part...
    assert ids[:2] == [p.prompt_id for p in split.search] and len(ids) == 6
    # ...never a prompt of the held-out pool.
    assert not set(ids) & {p.prompt_id for p in split.pool}
    # Without `screen`, the screens rank on the search prompts alone.
    plain = split_prompts(str(workload), None, "0.25", 0, prompts=2, held_out=2)
    assert plain.screened == plain.search


def test_an_engine_finalist_replay_predicts_far_behind_its_engines_best_is_not_raced():
    from autotune.measure.paired import PromptPair
    from autotune.search.engine_screens import PREDICTED_MARGIN, predicted_behind
    from autotune.search.finalists import Finalist

    def finalist(trial: int, engine: str) -> Finalist:
        return Finalist(trial, f"c{trial}", "r", None, {"method": "ngram"}, {}, engine)

    def pairs(speedup: float) -> list[PromptPair]:
        return [PromptPair(f"p{i}", "c", 1.0, 10, 1.0 / speedup, 10) for i in range(3)]

    own, vbest, vnear, vfar, hf = (finalist(1, "autotune"), finalist(2, "vllm"),
                                   finalist(3, "vllm"), finalist(4, "vllm"), finalist(5, "hf"))
    worst = 0.5 * (1 - PREDICTED_MARGIN)
    predicted = {own.arm: pairs(0.1), vbest.arm: pairs(1.2), vnear.arm: pairs(1.15),
                 vfar.arm: pairs(1.2 * (1 - PREDICTED_MARGIN) - 0.01), hf.arm: pairs(worst)}
    # Only vLLM's far one: autotune's own are never left out, each engine keeps its best
    # (hf's only finalist however slow), and one within the margin races.
    assert predicted_behind([own, vbest, vnear, vfar, hf], predicted) == [vfar]
    # Without predictions, nothing is left out.
    assert predicted_behind([own, vbest, vfar], {}) == []
