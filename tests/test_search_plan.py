"""The search plan (no model loads): its defaults are the `search` flags' own, it
resolves every default that depends on another input, and the workload split serves
`train-draft` (all held-out prompts) with no argparse namespace."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from autotune.cli.main import build_parser
from autotune.common.errors import AutotuneError
from autotune.pipeline.plan import DEFAULT_TRIALS, SearchRequest, plan_search
from autotune.workloads.prompts import round_robin, split_workload, load_workload
from autotune.workloads.split import split_prompts

LINES = [{"category": c, "prompt": f"{c} prompt {i}"} for c in ("a", "b", "c") for i in range(8)]


@pytest.fixture
def workload(tmp_path) -> str:
    path = tmp_path / "prompts.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in LINES))
    return str(path)


def test_the_request_defaults_are_the_search_flags_defaults():
    args = vars(build_parser().parse_args(["search"]))
    for field in dataclasses.fields(SearchRequest):
        assert field.name in args, field.name
        assert args[field.name] == field.default, field.name
    # The namespace converts in one call; the subcommand table's own keys are left out.
    assert SearchRequest.from_mapping(args) == SearchRequest()


def test_the_plan_resolves_every_default(workload, tmp_path):
    plan = plan_search(SearchRequest(workload=workload, validation="0.5", prompts=6,
                                     validation_prompts=4, max_new_tokens=8,
                                     out=str(tmp_path / "run"), space="ngram",
                                     fidelity="measure"))
    assert plan.trials == DEFAULT_TRIALS["measure"] and plan.fidelity == "measure"
    assert plan.run_dir == tmp_path / "run" and plan.storage == str(tmp_path / "run" /
                                                                     "study.journal")
    assert plan.study_name == "default-ngram-speedup"
    assert len(plan.prompts) == 6 and len(plan.held_out) == 4
    assert {p.prompt_id for p in plan.prompts}.isdisjoint(p.prompt_id for p in plan.held_out)
    assert plan.batch_sizes == () and plan.schedule_ks is None and not plan.in_engine
    scheduled = plan_search(SearchRequest(workload=workload, prompts=6, space="ngram",
                                          batch_sizes="4,1", schedule_k="2,1",
                                          out=str(tmp_path / "run")))
    assert scheduled.batch_sizes == (1, 4) and scheduled.schedule_ks == (1, 2)
    assert scheduled.fidelity == "multi" and scheduled.trials == DEFAULT_TRIALS["multi"]
    assert scheduled.replays and not plan.replays


@pytest.mark.parametrize("given,message", [
    ({"schedule_k": "2"}, "--schedule-k needs --batch-sizes"),
    ({"batch_sizes": "1,64", "prompts": 6}, "needs at least 64 search prompts"),
    ({"trials": 0}, "--trials must be at least 1"),
    ({"fidelity": "fast"}, "--fidelity must be one of"),
])
def test_the_plan_refuses_before_any_model_loads(given, message, workload):
    with pytest.raises(AutotuneError, match=message):
        plan_search(SearchRequest(workload=workload, space="ngram", **given))


def test_train_draft_split_holds_out_every_held_out_prompt(workload, tmp_path):
    # What `search` holds out at any --validation-prompts is among them, and the search
    # part is the same as the search's.
    everything = split_prompts(workload, None, "0.4", 0)
    search = split_prompts(workload, None, "0.4", 0, prompts=100, held_out=4, pool=6)
    _, part = split_workload(load_workload(workload), 0.4, 0)
    assert everything.pool == round_robin(part, len(part))
    assert {p.prompt_id for p in everything.held_out} == {p.prompt_id for p in part}
    assert {p.prompt_id for p in search.held_out} <= {p.prompt_id for p in search.pool}
    assert {p.prompt_id for p in search.pool} <= {p.prompt_id for p in everything.pool}
    assert everything.search == search.search
    # The measured prompts are a random permutation's prefix: more of them extend fewer.
    more = split_prompts(workload, None, "0.4", 0, prompts=100, held_out=5, pool=6)
    assert more.held_out[:4] == search.held_out
    # A file: every prompt of it.
    held = Path(tmp_path / "held.jsonl")
    held.write_text("".join(json.dumps(x) + "\n" for x in LINES[:5]))
    from_file = split_prompts(workload, None, str(held), 0)
    assert sorted(p.text for p in from_file.held_out) == sorted(x["prompt"] for x in LINES[:5])
    assert len(from_file.search) == len(LINES) - 5


def test_the_measured_sample_is_random_and_balanced_by_category() -> None:
    """Every prefix of the measured order holds each category in proportion to the pool
    (within one prompt); different seeds give different orders."""
    from autotune.workloads.prompts import Prompt
    from autotune.workloads.split import _sample

    pool = [Prompt(f"t{i}", "big" if i < 60 else ("mid" if i < 90 else "small"), f"p{i}")
            for i in range(100)]
    shares = {"big": 0.6, "mid": 0.3, "small": 0.1}
    for seed in range(5):
        order = _sample(pool, None, seed)
        assert sorted(p.prompt_id for p in order) == sorted(p.prompt_id for p in pool)
        for n in (4, 10, 16, 33):
            counts = {c: sum(p.category == c for p in order[:n]) for c in shares}
            assert all(abs(counts[c] - n * share) < 1 + 1e-9 for c, share in shares.items())
    assert _sample(pool, 16, 0) != _sample(pool, 16, 1)



@pytest.mark.parametrize("out,message", [
    ("/proc/autotune-run", r"--out /proc/autotune-run cannot be written"),
    ("{file}/run", r"is not a folder"),
])
def test_an_unwritable_out_folder_is_one_line_before_the_model_loads(out, message, workload,
                                                                    tmp_path):
    # issue 59 item 5: `--out /proc/x` loaded the model for 17 s, then a traceback.
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    with pytest.raises(AutotuneError, match=message):
        plan_search(SearchRequest(workload=workload, space="ngram",
                                  out=out.format(file=a_file)))


def test_the_out_folder_check_leaves_nothing_behind(workload, tmp_path):
    # A run stopped before its first file leaves no folder: the check only probes.
    plan = plan_search(SearchRequest(workload=workload, space="ngram",
                                     out=str(tmp_path / "new" / "run")))
    assert plan.run_dir == tmp_path / "new" / "run"
    assert not (tmp_path / "new").exists()
