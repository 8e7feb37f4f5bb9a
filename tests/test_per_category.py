"""Per-category drafters (`train-draft --per-category`, the `drafter` knob): the folder
holds `all` and one member per category; `drafter=<member>` drafts with that member and
`drafter=routed` with each prompt's own category's (losslessly, in the decoder, the
batched decoder and the replay alike); the space tunes the knob only where the method
the folder serves is chosen; exports load the chosen member and name routing a loss;
bad uses are refused in one line."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from tiny import llama_model, one_thread, save_tiny  # noqa: F401

from autotune.cli.main import main
from autotune.common.errors import AutotuneError
from autotune.schema.config import DecodeConfig, config_from_mapping
from autotune.decoding.decoder import SpeculativeDecoder
from autotune.decoding.drafter_choice import pick_drafter
from autotune.models.loading import load_model
from autotune.models.trained import DrafterSet, load_draft

MAX_NEW = 16


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny Llama, a 16-prompt workload in two categories whose prompts differ in
    kind, and a per-category eagle folder trained on its search part."""
    root = tmp_path_factory.mktemp("per_category")
    model = save_tiny(llama_model(seed=3, scale=4.0), root / "llama")
    lines = []
    for i in range(16):
        category = "code" if i % 2 else "chat"
        base = 5 if category == "code" else 35
        words = " ".join(f"t{base + (3 * i + j) % 20}" for j in range(8))
        lines.append(json.dumps({"id": f"p{i}", "category": category, "prompt": words}))
    workload = root / "prompts.jsonl"
    workload.write_text("\n".join(lines) + "\n")
    out = root / "set"
    code = main(["train-draft", "--model", str(model), "--device", "cpu", "--workload",
                 str(workload), "--kind", "eagle", "--minutes", "10", "--max-steps", "40",
                 "--out", str(out), "--max-new-tokens", "16", "--validation", "0.25",
                 "--per-category"])
    assert code == 0
    return model, workload, out


@pytest.fixture(scope="module")
def loaded(trained):
    model, _, out = trained
    target = load_model(str(model), "cpu")
    return target, load_draft(str(out), target)


def test_the_folder_holds_all_and_one_member_per_category(trained, loaded):
    _, _, out = trained
    index = json.loads((out / "drafters.json").read_text())
    assert index["kind"] == "eagle" and set(index["members"]) == {"all", "chat", "code"}
    for member in index["members"].values():
        meta = json.loads((out / member / "drafter.json").read_text())
        assert meta["training"]["steps"] > 0
    chat = json.loads((out / "chat" / "drafter.json").read_text())
    every = json.loads((out / "all" / "drafter.json").read_text())
    assert chat["trained_on"]["categories"] == ["chat"]
    assert every["trained_on"]["categories"] == ["chat", "code"]
    assert chat["trained_on"]["prompts"] < every["trained_on"]["prompts"]
    target, draft = loaded
    assert isinstance(draft, DrafterSet) and draft.kind == "eagle"
    assert draft.drafter_choices() == ("all", "chat", "code", "routed")


def test_each_drafter_value_drafts_with_its_member(loaded):
    target, draft = loaded
    members = draft.members
    assert pick_drafter(draft, "code") is members["code"]
    assert pick_drafter(draft, "all") is members["all"]
    assert pick_drafter(draft, "routed", "chat") is members["chat"]
    assert pick_drafter(draft, "routed", "poetry") is members["all"]
    assert pick_drafter(draft, "routed") is members["all"]
    # The members were trained apart: their weights differ.
    a, b = (members[m].hf_model.fc.weight for m in ("chat", "code"))
    assert not bool((a == b).all())


@pytest.mark.parametrize("drafter", ["all", "chat", "code", "routed"])
@pytest.mark.parametrize("policy", [dict(k=3), dict(exit_policy="adaptive", k=5),
                                    dict(tree_width=2, tree_depth=3, tree_tokens=5)],
                         ids=["fixed", "adaptive", "tree"])
def test_greedy_output_equals_greedy_ar_for_every_drafter(loaded, drafter, policy):
    target, draft = loaded
    config = config_from_mapping({"method": "eagle", "drafter": drafter, **policy})
    ar = SpeculativeDecoder(target, DecodeConfig())
    spec = SpeculativeDecoder(target, config, draft)
    drafted = 0
    for category, prompt in (("chat", [3, 40, 41, 42, 43]), ("code", [3, 9, 10, 11, 12])):
        want = ar.generate(prompt, MAX_NEW, time.perf_counter).tokens
        got = spec.generate(prompt, MAX_NEW, time.perf_counter, category=category)
        assert got.tokens == want
        drafted += sum(r.drafted for r in got.rounds)
    assert drafted > 0


def test_routing_drafts_a_prompt_as_its_category_member_does(loaded):
    target, draft = loaded
    prompt = [3, 9, 10, 11, 12]
    routed = SpeculativeDecoder(target, config_from_mapping(
        {"method": "eagle", "k": 3, "drafter": "routed"}), draft)
    for category in ("code", "chat"):
        own = SpeculativeDecoder(target, config_from_mapping(
            {"method": "eagle", "k": 3, "drafter": category}), draft)
        a = routed.generate(prompt, MAX_NEW, time.perf_counter, category=category)
        b = own.generate(prompt, MAX_NEW, time.perf_counter)
        assert [r.accepted for r in a.rounds] == [r.accepted for r in b.rounds]
    chat = SpeculativeDecoder(target, config_from_mapping(
        {"method": "eagle", "k": 3, "drafter": "chat"}), draft)
    code = SpeculativeDecoder(target, config_from_mapping(
        {"method": "eagle", "k": 3, "drafter": "code"}), draft)
    # The check has teeth: the two members draft this prompt differently somewhere.
    prompts = [[3, 9, 10, 11, 12], [3, 40, 41, 42, 43], [7, 7, 20, 30, 44, 12]]
    assert any([r.accepted for r in chat.generate(p, MAX_NEW, time.perf_counter).rounds]
               != [r.accepted for r in code.generate(p, MAX_NEW, time.perf_counter).rounds]
               for p in prompts)


def test_the_replay_drafts_each_prompt_with_the_decoders_member(loaded, tmp_path):
    from autotune.replay.run import Replayer
    from autotune.workloads.prompts import Prompt

    target, draft = loaded
    prompts = [Prompt("t5 t6 t7 t8 t9", "code", "a"), Prompt("t35 t36 t37 t38", "chat", "b")]
    replayer = Replayer(target, draft, prompts, MAX_NEW, tmp_path / "parts.json",
                        tmp_path / "refs")
    routed = replayer.replay(config_from_mapping({"method": "eagle", "k": 3,
                                                  "drafter": "routed"}))
    for run in routed.runs:
        own = replayer.replay(config_from_mapping({"method": "eagle", "k": 3,
                                                   "drafter": run.category}))
        twin = next(r for r in own.runs if r.prompt_id == run.prompt_id)
        assert ([t.accepted for t in run.candidate.rounds]
                == [t.accepted for t in twin.candidate.rounds])


def test_the_space_tunes_the_drafter_where_its_method_is_chosen(loaded):
    import optuna

    from autotune.space.binding import trained_space_args
    from autotune.space.loading import load_space

    target, draft = loaded
    bound = load_space("joint").bind(target.n_layers, None, "eagle",
                                     **trained_space_args(draft))
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    seen: dict[str, set[str]] = {}
    for _ in range(60):
        trial = study.ask()
        try:
            config = bound.suggest(trial)
        except AutotuneError:
            continue
        seen.setdefault(config.method, set()).add(config.drafter)
        assert ("drafter" in trial.params) == (config.method == "eagle")
    assert seen["eagle"] == {"all", "chat", "code", "routed"}
    assert seen.get("ngram", {"all"}) == {"all"}
    # Without a per-category folder there is no such knob.
    plain = load_space("eagle").bind(target.n_layers, None, "eagle")
    assert "drafter" not in {entry.key for entry in plain._entries}


def test_exports_load_the_chosen_member_and_refuse_routing(trained, loaded):
    from autotune.exports import export
    from autotune.exports._common import member_draft

    _, _, out = trained
    assert member_draft(str(out), "code") == str(out / "code")
    assert member_draft(str(out), "routed") == str(out)
    assert member_draft("/some/model", "all") == "/some/model"
    target, _ = loaded
    doc = {"format": "autotune.frozen/v3",
           "params": config_from_mapping({"method": "eagle", "k": 3,
                                          "drafter": "code"}).to_dict(),
           "model": {"spec": str(trained[0]), "path": str(trained[0]), "id": "tiny"},
           "draft": {"spec": str(out), "path": str(out)}}
    files = export(doc, "vllm").files
    assert f"{out / 'code'}/vllm" in "".join(files.values())
    routed = dict(doc, params=dict(doc["params"], drafter="routed"))
    with pytest.raises(AutotuneError, match="drafter=routed.*one draft per server"):
        export(routed, "vllm")


def test_measure_routes_by_category_losslessly(trained, capsys):
    model, workload, out = trained
    code = main(["measure", "--model", str(model), "--device", "cpu", "--workload",
                 str(workload), "--prompts", "4", "--max-new-tokens", "10", "--json",
                 "--draft", str(out), "--set", "method=eagle", "--set", "drafter=routed"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    summary = json.loads(captured.out)
    assert summary["lossless"] is True and summary["config"]["drafter"] == "routed"


@pytest.mark.parametrize("args, message", [
    (["--set", "method=eagle", "--set", "drafter=poetry"], "drafter=poetry is not in"),
    (["--set", "method=eagle", "--set", "drafter=a b"], "drafter='a b' must be"),
])
def test_bad_drafter_values_are_one_line(trained, capsys, args, message):
    model, workload, out = trained
    code = main(["measure", "--model", str(model), "--device", "cpu", "--workload",
                 str(workload), "--prompts", "2", "--max-new-tokens", "6",
                 "--draft", str(out), *args])
    err = capsys.readouterr().err.strip()
    assert code == 2 and message in err and "\n" not in err


def test_a_member_name_without_a_per_category_folder_is_refused(trained, tmp_path, capsys):
    model, workload, out = trained
    code = main(["measure", "--model", str(model), "--device", "cpu", "--workload",
                 str(workload), "--prompts", "2", "--max-new-tokens", "6",
                 "--draft", str(out / "code"), "--set", "method=eagle",
                 "--set", "drafter=code"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "per-category drafter folder" in err and "\n" not in err


def test_per_category_refuses_a_workload_without_a_big_enough_category(trained, tmp_path,
                                                                       capsys):
    model, _, _ = trained
    lines = [json.dumps({"id": f"p{i}", "category": f"c{i}", "prompt": f"t{i + 3} t9 t10"})
             for i in range(6)]
    workload = tmp_path / "thin.jsonl"
    workload.write_text("\n".join(lines) + "\n")
    code = main(["train-draft", "--model", str(model), "--device", "cpu", "--workload",
                 str(workload), "--kind", "eagle", "--minutes", "0.01", "--out",
                 str(tmp_path / "x"), "--max-new-tokens", "6", "--per-category"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and "--per-category needs a category with at least" in err[-1]
    assert not (tmp_path / "x" / "drafters.json").exists()


def test_a_finished_folder_is_not_overwritten(trained, capsys):
    model, workload, out = trained
    code = main(["train-draft", "--model", str(model), "--device", "cpu", "--workload",
                 str(workload), "--kind", "eagle", "--minutes", "0.01", "--out", str(out),
                 "--per-category"])
    assert code == 2 and "already holds per-category drafters" in capsys.readouterr().err


def test_a_half_written_folder_is_not_a_drafter_set(trained, loaded, tmp_path):
    """Members finish one by one; the index comes last, so a folder without it loads as
    nothing (and its members resume with the same command)."""
    _, _, out = trained
    target, _ = loaded
    partial = tmp_path / "partial"
    partial.mkdir()
    (partial / "drafters.json").write_text(json.dumps(
        {"format": "autotune.drafter-set/v1", "kind": "eagle", "members": {"chat": "chat"}}))
    with pytest.raises(AutotuneError, match="with an 'all' member"):
        load_draft(str(partial), target)


def test_the_report_shows_the_best_drafter_per_category():
    from optuna.distributions import CategoricalDistribution
    from test_report_data import LATENCY, add, baseline, config, new_study

    from autotune.report import panels as P

    study = new_study()
    baseline(study)
    choices = CategoricalDistribution(("all", "chat", "code", "routed"))
    figures = {"all": (10.0, {"chat": 1.2, "code": 1.1}),
               "chat": (11.0, {"chat": 1.5, "code": 0.8}),
               "code": (12.0, {"chat": 0.9, "code": 1.4}),
               "routed": (9.0, {"chat": 1.45, "code": 1.35})}
    for drafter, (latency, by_category) in figures.items():
        add(study, latency, config("eagle", drafter=drafter),
            {"latency_ms_per_token": latency, "speedup_by_category": by_category},
            params={"drafter": drafter}, dists={"drafter": choices})
    # A worse trial of the chat specialist: the panel keeps each value's best trial.
    add(study, 15.0, config("eagle", drafter="chat"),
        {"latency_ms_per_token": 15.0, "speedup_by_category": {"chat": 3.0, "code": 3.0}},
        params={"drafter": "chat"}, dists={"drafter": choices})
    panel = P.drafters.data(study, LATENCY)
    assert panel is not None and panel.winners == {"chat": "chat", "code": "code"}
    chat = panel.frame[(panel.frame["drafter"] == "chat") & (panel.frame["category"] == "chat")]
    assert chat["speedup"].tolist() == [1.5]
    page = P.drafters.render(panel)
    assert 'id="panel-drafters"' in page and "chat: chat, code: code" in page
    # A study that never tuned the knob has no such panel.
    plain = new_study()
    baseline(plain)
    add(plain, 10.0, config("eagle"), {"latency_ms_per_token": 10.0})
    assert P.drafters.data(plain, LATENCY) is None


def test_batched_rows_draft_with_their_own_categorys_exit_adapters(tmp_path):
    """Exit adapters run batched: under `routed` each row drafts with its category's
    member, and every row equals its own greedy AR output."""
    import dataclasses as dc

    from test_trained_exits import ADAPTED, _exits, _peaked
    from tiny import tiny_loaded

    from autotune.decoding.batched import BatchedDecoder
    from autotune.models.trained import TrainedDraft

    target = tiny_loaded(_peaked())
    (tmp_path / "a").mkdir()
    (tmp_path / "c").mkdir()
    members = {"all": _exits(target, 0, tmp_path / "a"),
               "code": _exits(target, 40, tmp_path / "c")}
    general = members["all"]
    values = {f.name: getattr(general, f.name) for f in dc.fields(TrainedDraft)}
    draft = DrafterSet(**values, members=members)
    config = config_from_mapping({"method": "sorted_exit", "exits": ADAPTED,
                                  "thresholds": (0.3, 0.0), "k": 3, "drafter": "routed"})
    prompts = [[1, 2, 3, 4, 1, 2], [7, 8, 9], [30, 31, 32, 33]]
    categories = ["code", "chat", "code"]
    batch = BatchedDecoder(target, config, draft).generate(
        prompts, MAX_NEW, time.perf_counter, categories=categories)
    ar = SpeculativeDecoder(target, DecodeConfig())
    for prompt, category, row in zip(prompts, categories, batch.rows):
        assert row.tokens == ar.generate(prompt, MAX_NEW, time.perf_counter).tokens
        own = SpeculativeDecoder(target, dc.replace(config, drafter="all" if category == "chat"
                                                    else "code"), draft)
        single = own.generate(prompt, MAX_NEW, time.perf_counter)
        assert [r.accepted for r in row.rounds] == [r.accepted for r in single.rounds]
    # The check has teeth: the two members draft some code row differently.
    plain = SpeculativeDecoder(target, dc.replace(config, drafter="all"), draft)
    assert any([r.accepted for r in row.rounds]
               != [r.accepted for r in plain.generate(p, MAX_NEW, time.perf_counter).rounds]
               for p, c, row in zip(prompts, categories, batch.rows) if c == "code")
