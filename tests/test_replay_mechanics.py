"""The replay tier's machinery on tiny random-weight models (no timing assertions):
the cost model's arithmetic and curve fitting, the reference and cost-part caches
(corruption detected and rebuilt, reuse only for the same key), `measure --replay`,
`search --fidelity multi|replay` and a multi-fidelity search resumed after kill -9."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pandas as pd
import pytest
import torch
from optuna.trial import TrialState
from test_search_cli import _journal_trials, _parked
from tiny import llama_model, one_thread, save_tiny, tiny_llama  # noqa: F401  (autouse fixture)

import autotune.decoding.reference as decoding_reference
import autotune.models.loading as loading
import autotune.search.evaluation as evaluation
from autotune.cli.main import main
from autotune.schema.config import DecodeConfig
from autotune.decoding.decoder import SpeculativeDecoder
from autotune.schema.methods import get_method
from autotune.replay import parts as part_timing
from autotune.replay.costs import FORMAT, CostModel, CostParts, LayerParts, interpolate
from autotune.replay.parts import isotonic, load_or_measure_parts, pass_curve
from autotune.replay.reference import Reference, reference_set
from autotune.replay.simulate import ReplayRound, simulate
from autotune.search.study import counted_trials
from autotune.workloads.prompts import Prompt, encode_prompt

# Repetitive prompts so n-gram drafts get accepted on a random model too.
WORKLOAD = "t1 t2 t3 t4 t5 t1 t2 t3 t4 t5 t1 t2\nt7 t8 t9 t7 t8 t9 t7 t8\n"
SCREEN_SUFFIX = ".screen"


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("tiny-replay")
    save_tiny(llama_model(seed=5, layers=4, scale=4.0), folder / "model")
    (folder / "prompts.txt").write_text(WORKLOAD)
    return folder


# ------------------------------------------------------------------ a. the cost model

class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class FakeCache:
    def __init__(self) -> None:
        self.length = 0

    def crop(self, length: int) -> None:
        self.length = length


class FakeForward:
    """A forward whose pass over n new tokens advances the clock by cost(n) seconds, plus
    `spike` on the 2nd and 4th timed pass of every size (a busy machine)."""

    vocab_size = 50

    def __init__(self, clock: FakeClock, cost, spike: float, warmed: set[int]) -> None:
        self.clock, self.cost, self.spike = clock, cost, spike
        self.warmed = warmed                  # the sizes `pass_curve` warms up on
        self.calls: dict[int, int] = {}
        self.sizes: list[int] = []

    def new_cache(self, batch: int, length: int) -> FakeCache:
        return FakeCache()

    def decode_cache(self, length: int, role: str = "target") -> FakeCache:
        return self.new_cache(1, length)

    def forward(self, ids, cache, start=None, last_only=False, **kwargs):
        n = ids.shape[1]
        if start is None:                     # the context's prefill: not timed
            return None
        self.sizes.append(n)
        seen = self.calls.get(n, 0)
        self.calls[n] = seen + 1
        self.clock.now += self.cost(n)
        # Timed passes per size: the warm-up (first and largest size only) comes first,
        # so with 5 repeats exactly two of each size's five timed passes are spiked.
        timed = seen - 1 if n in self.warmed else seen
        if timed in (1, 3):
            self.clock.now += self.spike
        return None


class FakeModel:
    def __init__(self, forward: FakeForward) -> None:
        self.forward = forward
        self.device = torch.device("cpu")


SIZES = (1, 2, 3, 4, 8, 16)


def _linear(n: int) -> float:
    return 0.002 + 0.0005 * n


def test_pass_curve_recovers_a_synthetic_cost_through_noise():
    clock = FakeClock()
    forward = FakeForward(clock, _linear, 0.05, {SIZES[0], SIZES[-1]})
    curve = pass_curve(FakeModel(forward), SIZES, 100, False, clock, repeats=5)
    assert [n for n, _ in curve] == list(SIZES)
    assert [ms for _, ms in curve] == pytest.approx([1000 * _linear(n) for n in SIZES],
                                                    rel=1e-9)
    # Every size was timed `repeats` times (after the warm-up of the first and largest).
    assert forward.calls == {n: 5 + (n in forward.warmed) for n in SIZES}


def test_pass_curve_makes_a_persistent_dip_monotone():
    """A dip the median keeps (n=3 always as cheap as n=1) is pooled by isotonic
    regression: the curve never decreases, and the other sizes keep their cost."""
    def dipped(n: int) -> float:
        return _linear(1) if n == 3 else _linear(n)

    clock = FakeClock()
    forward = FakeForward(clock, dipped, 0.05, {SIZES[0], SIZES[-1]})
    curve = pass_curve(FakeModel(forward), SIZES, 100, True, clock, repeats=5)
    medians = [1000 * dipped(n) for n in SIZES]
    values = [ms for _, ms in curve]
    assert values == pytest.approx(isotonic(medians), rel=1e-9)
    assert all(b >= a for a, b in zip(values, values[1:]))
    pooled = (medians[1] + medians[2]) / 2
    assert values[1] == pytest.approx(pooled) and values[2] == pytest.approx(pooled)
    assert values[0] == pytest.approx(medians[0]) and values[3:] == pytest.approx(medians[3:])


@pytest.mark.parametrize("values,expected", [
    ([], []),
    ([1.0, 2.0, 3.0], [1.0, 2.0, 3.0]),
    ([1.0, 3.0, 2.0, 4.0], [1.0, 2.5, 2.5, 4.0]),
    ([5.0, 4.0, 3.0], [4.0, 4.0, 4.0]),
    ([1.0, 4.0, 2.0, 0.0, 6.0], [1.0, 2.0, 2.0, 2.0, 6.0]),
])
def test_isotonic(values, expected):
    assert isotonic(values) == pytest.approx(expected)


def test_interpolate_inside_at_points_and_past_both_ends():
    curve = [[4, 16.0], [1, 10.0], [8, 32.0]]             # any order
    assert interpolate(curve, 1) == pytest.approx(10.0)
    assert interpolate(curve, 2) == pytest.approx(12.0)     # on (1,10)-(4,16)
    assert interpolate(curve, 4) == pytest.approx(16.0)
    assert interpolate(curve, 6) == pytest.approx(24.0)     # on (4,16)-(8,32)
    assert interpolate(curve, 0) == pytest.approx(8.0)      # the first segment, extended
    assert interpolate(curve, 10) == pytest.approx(40.0)    # the last segment, extended
    assert interpolate([[2, 10.0]], 3) == pytest.approx(15.0)   # one point: proportional


LAYERS = LayerParts(layers=8, base=2.0, attn=0.25, mlp=0.5, kv=0.1, head=1.5, choose=0.2)


def test_layer_parts_arithmetic():
    # base + unskipped attention and MLP sublayers + picking the token
    assert LAYERS.skip_pass(0, 0) == pytest.approx(2.0 + 8 * 0.75 + 0.2)
    assert LAYERS.skip_pass(2, 1) == pytest.approx(2.0 + 6 * 0.25 + 7 * 0.5 + 0.2)
    # embedding (base - head) + layers to the exit + a head and a pick per exit reached
    # + the k/v filled from the exit to the depth
    assert LAYERS.exit_pass(2, 1, 8) == pytest.approx(0.5 + 2 * 0.75 + 1 * 1.7 + 6 * 0.1)
    assert LAYERS.exit_pass(8, 3, 8) == pytest.approx(0.5 + 8 * 0.75 + 3 * 1.7)


def _parts() -> CostParts:
    return CostParts(
        format=FORMAT, key={}, target_curve=[[1, 10.0], [2, 12.0], [4, 16.0], [8, 24.0]],
        ar_other=0.5, spec_other=0.8, ngram_lookup=0.3, tree_node=0.05, tree_other=0.02,
        tree_verify_factor=1.5, target_layers=LAYERS, draft_curve=[[1, 3.0], [2, 4.0], [4, 6.0]],
        draft_layers=None, draft_factor={"draft_model": 2.0, "layer_skip": 1.5})


@pytest.mark.parametrize("config,round_,expected_ms", [
    # The AR baseline: the target's one-token pass and the loop's AR overhead.
    (DecodeConfig(), ReplayRound(0, 0, 1, 1, 0, []), (0.0, 10.0, 0.5)),
    # n-gram: one lookup, a 4-token verify pass, a speculative round's bookkeeping.
    (DecodeConfig(method="ngram", k=3), ReplayRound(3, 2, 3, 4, 3, [1.0] * 3, passes=[1, 1, 1]),
     (0.3, 16.0, 0.8)),
    # draft_model: the draft's passes over the tokens fed (3 caught up, then 1, 1), scaled
    # by its in-loop factor.
    (DecodeConfig(method="draft_model", k=3),
     ReplayRound(3, 0, 1, 4, 3, [0.5] * 3, passes=[3, 1, 1]), ((5.0 + 3.0 + 3.0) * 2.0, 16.0, 0.8)),
    # layer_skip: one skipping pass per draft token, scaled by its factor; 3-token verify.
    (DecodeConfig(method="layer_skip", k=2, attn_skip=(1, 2), mlp_skip=(3,)),
     ReplayRound(2, 1, 2, 3, 2, [0.9, 0.4], passes=[1, 1]),
     (2 * (2.0 + 6 * 0.25 + 7 * 0.5 + 0.2) * 1.5, 14.0, 0.8)),
    # sorted_exit: each draft token to its exit (no factor measured: 1), never below the
    # target's one-token pass (10) scaled to the layers it runs (base 2 + 0.75 a layer of
    # 8 in all): the exit at 2 is priced at that floor, (2 + 2 * 0.75) / 8 * 10.
    (DecodeConfig(method="sorted_exit", k=2, exits=(2, 4, 8), thresholds=(0.9, 0.6)),
     ReplayRound(2, 2, 3, 3, 2, [0.95, 0.3], passes=[1, 1], exits=[2, 8]),
     ((2 + 2 * 0.75) / 8 * 10 + (0.5 + 8 * 0.75 + 3 * 1.7), 14.0, 0.8)),
    # A static tree over a draft model: the root pass catches up 2 tokens, one level pass,
    # per-node bookkeeping; the tree-masked verify pass and per-node verify overhead.
    (DecodeConfig(method="draft_model", tree_choices=((0,), (1,), (0, 0))),
     ReplayRound(3, 1, 2, 4, 2, [], passes=[1, 1], catch_up=2),
     ((5.0 + 3.0) * 2.0 + 0.05 * 3, 16.0 * 1.5, 0.8 + 0.02 * 3)),
])
def test_round_seconds_is_the_sum_of_its_parts(config, round_, expected_ms):
    model = CostModel(_parts(), config, n_layers=8)
    assert model.round_seconds(round_) == pytest.approx(tuple(x / 1000 for x in expected_ms))


def test_ar_round_and_prefill_seconds():
    model = CostModel(_parts(), DecodeConfig(), n_layers=8)
    assert model.ar_round_seconds() == pytest.approx((0.010, 0.0005))
    assert model.prefill_seconds(6) == pytest.approx(0.020)      # on (4,16)-(8,24)


# ------------------------------------------------------------------ b. the reference cache

PROMPTS = [Prompt("t1 t2 t3 t1 t2 t3 t1", "rep", "p0"), Prompt("t7 t8 t9 t7 t8", "mix", "p1"),
           Prompt("t4 t5 t6 t4", "other", "p2")]
MAX_NEW = 12


@pytest.fixture(scope="module")
def tiny():
    return tiny_llama(seed=5, layers=4, scale=4.0)


def _flip_a_token(text: str) -> str:
    doc = json.loads(text)
    tokens = doc["entries"][1]["tokens"]
    tokens[3] = (tokens[3] + 1) % 64
    return json.dumps(doc)


def _other_key(text: str) -> str:
    doc = json.loads(text)                 # entries and their checksum intact
    doc["key"]["max_new_tokens"] = 99
    return json.dumps(doc)


CORRUPTIONS = {
    "a flipped token": lambda good: _flip_a_token(good).encode(),
    "truncated": lambda good: good.encode()[: len(good) // 2],
    "garbage": lambda good: b"\x00\xff\xfe{not json at all",
    "another key": lambda good: _other_key(good).encode(),
    "empty": lambda good: b"",
    "a list": lambda good: b"[1, 2, 3]\n",
}


def _no_decoding(*args, **kwargs):
    raise AssertionError("the references were decoded again")


def test_references_are_the_ar_decoders_output(tiny, tmp_path, capsys):
    refs = reference_set(tiny, PROMPTS, MAX_NEW, directory=tmp_path)
    decoder = SpeculativeDecoder(tiny, DecodeConfig())
    for prompt, ref in zip(PROMPTS, refs):
        assert (ref.prompt_id, ref.category) == (prompt.prompt_id, prompt.category)
        assert decoder.generate(ref.prompt, MAX_NEW, time.perf_counter).tokens == ref.tokens
        assert len(ref.tokens) == MAX_NEW                   # no EOS in the tiny model
    assert capsys.readouterr().err == ""


def test_references_decoded_in_batches_are_each_prompts_own_decode(tiny):
    """Chunks of 2 rows (the last one alone), one batch, one by one: the same tokens."""
    ids = [encode_prompt(tiny.tokenizer, p) for p in PROMPTS]
    assert len({len(i) for i in ids}) == len(ids)         # rows of different lengths
    one_by_one = decoding_reference.reference_continuations(tiny, ids, MAX_NEW, batch_rows=1)
    for rows in (2, 16):
        assert decoding_reference.reference_continuations(tiny, ids, MAX_NEW,
                                                          batch_rows=rows) == one_by_one


@pytest.mark.parametrize("damage", list(CORRUPTIONS))
def test_a_corrupted_reference_cache_is_reported_once_and_rebuilt(tiny, tmp_path, capsys,
                                                                monkeypatch, damage):
    refs = reference_set(tiny, PROMPTS, MAX_NEW, directory=tmp_path)
    [path] = list(tmp_path.iterdir())
    good = path.read_text()
    capsys.readouterr()

    path.write_bytes(CORRUPTIONS[damage](good))
    rebuilt = reference_set(tiny, PROMPTS, MAX_NEW, directory=tmp_path)
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("autotune: warning: reference cache") and path.name in err[0]
    assert "rebuilding" in err[0]
    assert rebuilt == refs
    # The file is valid again: read back without a warning and without decoding.
    assert json.loads(path.read_text()) == json.loads(good)
    monkeypatch.setattr(decoding_reference, "reference_continuations", _no_decoding)
    assert reference_set(tiny, PROMPTS, MAX_NEW, directory=tmp_path) == refs
    assert capsys.readouterr().err == ""
    assert [p.name for p in tmp_path.iterdir()] == [path.name]      # no temporary left


def test_other_lengths_or_prompts_use_other_files(tiny, tmp_path, capsys, monkeypatch):
    refs = reference_set(tiny, PROMPTS, MAX_NEW, directory=tmp_path)
    [first] = list(tmp_path.iterdir())
    stamp = first.read_text()
    shorter = reference_set(tiny, PROMPTS, 8, directory=tmp_path)
    fewer = reference_set(tiny, PROMPTS[:2], MAX_NEW, directory=tmp_path)
    other = reference_set(tiny, [PROMPTS[2], PROMPTS[0]], MAX_NEW, directory=tmp_path)
    assert len(list(tmp_path.iterdir())) == 4
    assert first.read_text() == stamp                    # untouched
    assert capsys.readouterr().err == ""                 # another file is no corruption
    # Greedy: a shorter continuation is the longer one's start.
    assert [r.tokens for r in shorter] == [r.tokens[:8] for r in refs]
    assert fewer == refs[:2]
    assert other == [refs[2], refs[0]]
    # Each is read back from its own file.
    monkeypatch.setattr(decoding_reference, "reference_continuations", _no_decoding)
    assert reference_set(tiny, PROMPTS, 8, directory=tmp_path) == shorter
    assert reference_set(tiny, PROMPTS[:2], MAX_NEW, directory=tmp_path) == fewer
    assert reference_set(tiny, PROMPTS, MAX_NEW, directory=tmp_path) == refs
    assert capsys.readouterr().err == ""


def test_the_reference_cache_folder_follows_autotune_cache(tiny, cache, monkeypatch):
    refs = reference_set(tiny, PROMPTS, MAX_NEW)
    files = list((cache / "replay").iterdir())
    assert len(files) == 1 and files[0].suffix == ".json"
    monkeypatch.setattr(decoding_reference, "reference_continuations", _no_decoding)
    assert reference_set(tiny, PROMPTS, MAX_NEW) == refs


# ------------------------------------------------------------------ c. the cost parts file

REFS = [Reference("p0", "rep", [1, 2, 3, 4, 5], [6, 7, 8, 9]),
        Reference("p1", "mix", [1, 2, 3], [4, 5, 6, 7])]


@pytest.fixture
def measured(monkeypatch):
    """`measure_parts` replaced by a counter returning made-up parts under its key."""
    calls: list[dict] = []

    def fake(target, draft, refs, max_new, key, effort=None):
        calls.append(key)
        parts = _parts()
        parts.key = key
        parts.ar_other = float(len(calls))          # tells the measurements apart
        return parts

    monkeypatch.setattr(part_timing, "measure_parts", fake)
    return calls


def test_cost_parts_are_stored_and_reused_for_the_same_key(tiny, tmp_path, measured, capsys):
    path = tmp_path / "replay_costs.json"
    first = load_or_measure_parts(path, tiny, None, REFS, 8)
    assert len(measured) == 1 and path.is_file()
    assert "measuring the replay cost model's parts" in capsys.readouterr().err
    assert first.key == measured[0] and first.key["max_new_tokens"] == 8
    assert CostParts.from_json(json.loads(path.read_text())) == first

    again = load_or_measure_parts(path, tiny, None, REFS, 8)
    assert len(measured) == 1                        # read, not measured again
    assert again == first
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("change", ["max_new_tokens", "target", "draft", "context"])
def test_cost_parts_are_measured_again_for_another_key(tiny, tmp_path, measured, capsys,
                                                       change):
    path = tmp_path / "replay_costs.json"
    load_or_measure_parts(path, tiny, None, REFS, 8)
    capsys.readouterr()
    target, draft, refs, max_new = tiny, None, REFS, 8
    if change == "max_new_tokens":
        max_new = 16
    elif change == "target":
        target = tiny_llama(seed=6, layers=4, scale=4.0)
    elif change == "draft":
        draft = tiny_llama(seed=7, layers=2, scale=4.0)
    else:
        refs = [Reference(r.prompt_id, r.category, r.prompt * 4, r.tokens) for r in REFS]
    parts = load_or_measure_parts(path, target, draft, refs, max_new)
    assert len(measured) == 2 and parts.ar_other == 2.0
    assert "measuring the replay cost model's parts" in capsys.readouterr().err
    # The file now holds the new key's parts, and they are reused.
    assert json.loads(path.read_text())["key"] == measured[1]
    assert load_or_measure_parts(path, target, draft, refs, max_new) == parts
    assert len(measured) == 2


@pytest.mark.parametrize("damage", [
    "garbage", "truncated", "old format",
    "not a mapping"])
def test_a_damaged_cost_parts_file_is_measured_again(tiny, tmp_path, measured, capsys, damage):
    path = tmp_path / "replay_costs.json"
    load_or_measure_parts(path, tiny, None, REFS, 8)
    good = path.read_text()
    capsys.readouterr()
    if damage == "garbage":
        path.write_bytes(b"\x00\xff garbage")
    elif damage == "truncated":
        path.write_text(good[: len(good) // 2])
    elif damage == "old format":
        path.write_text(json.dumps({**json.loads(good), "format": "autotune.replay-costs/v1"}))
    else:
        path.write_text("[1, 2, 3]\n")
    parts = load_or_measure_parts(path, tiny, None, REFS, 8)
    assert len(measured) == 2 and parts.ar_other == 2.0
    err = capsys.readouterr().err
    assert "Traceback" not in err and path.name in err
    assert CostParts.from_json(json.loads(path.read_text())) == parts


# ------------------------------------------------------------------ d. measure --replay

def _measure_args(tiny_dir: Path, *extra: str) -> list[str]:
    return ["measure", "--model", str(tiny_dir / "model"), "--workload",
            str(tiny_dir / "prompts.txt"), "--max-new-tokens", "16", "--set", "method=ngram",
            "--set", "k=3", "--json", *extra]


def test_measure_replay_prints_a_measurements_keys_marked_replay(tiny_dir, cache, capsys):
    assert main(_measure_args(tiny_dir)) == 0
    measured = json.loads(capsys.readouterr().out)
    assert main(_measure_args(tiny_dir, "--replay")) == 0
    printed = capsys.readouterr()
    replayed = json.loads(printed.out)
    assert set(replayed) == set(measured) | {"fidelity", "replay_exact", "replay_notes"}
    assert replayed["fidelity"] == "replay"
    assert replayed["replay_exact"] is True and replayed["replay_notes"] == []
    assert replayed["config"] == measured["config"]
    # n-gram replay is exact: the same rounds, hence the same τ and acceptance.
    for key in ("mean_accepted_tokens", "acceptance_rate", "rounds", "tokens_generated",
                "mean_drafted_tokens", "pos_acc"):
        assert replayed[key] == measured[key], key
    assert replayed["speedup"] > 0 and replayed["latency_ms_per_token"] > 0
    # The references and the cost parts are kept in the cache folder.
    assert {p.suffix for p in (cache / "replay").iterdir()} == {".json"}
    assert (cache / "replay" / "replay_costs.json").is_file()

    # A second replay reuses both: nothing is measured again.
    assert main(_measure_args(tiny_dir, "--replay")) == 0
    assert "measuring" not in capsys.readouterr().err


def test_measure_replay_refuses_a_sampling_config_in_one_line(tiny_dir, cache, capsys):
    code = main(_measure_args(tiny_dir, "--replay", "--set", "temperature=0.7"))
    assert code != 0
    captured = capsys.readouterr()
    errors = [line for line in captured.err.splitlines() if line.startswith("autotune: error:")]
    assert len(errors) == 1 and "greedy" in errors[0], captured.err
    assert "Traceback" not in captured.err and captured.out == ""


# ------------------------------------------------------------------ e. search fidelities

def _sampling_objective(folder: Path) -> Path:
    path = folder / "sampled.yaml"
    path.write_text("description: speedup when sampling\nmetrics: [speedup]\n"
                    "constraints: []\nrepeats: 1\nworkload:\n  prompts: 2\n"
                    "  max_new_tokens: 8\n  temperature: 0.7\n  top_p: 0.9\n")
    return path


def _search_args(tiny_dir: Path, run: Path, *extra: str) -> list[str]:
    return ["search", "--model", str(tiny_dir / "model"), "--workload",
            str(tiny_dir / "prompts.txt"), "--max-new-tokens", "16", "--prompts", "2",
            "--validation", "0", "--out", str(run), "--study", "m", *extra]


@pytest.fixture
def no_loading(monkeypatch):
    def spy(*args, **kwargs):
        raise AssertionError(f"load_model reached with {args}")
    monkeypatch.setattr(loading, "load_model", spy)


def test_bad_screen_size_is_one_line_before_loading(tiny_dir, tmp_path, capsys, no_loading):
    assert main(_search_args(tiny_dir, tmp_path / "r", "--screen", "0")) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("autotune: error:") and "\n" not in err and "--screen" in err
    assert not (tmp_path / "r").exists()


def test_replay_search_refuses_a_sampling_objective_in_one_line(tiny_dir, tmp_path, cache,
                                                                capsys):
    run = tmp_path / "run"
    code = main(_search_args(tiny_dir, run, "--fidelity", "replay", "--objective",
                             str(_sampling_objective(tmp_path))))
    assert code == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("autotune: error:")]
    assert len(errors) == 1 and "--fidelity replay" in errors[0] and "greedy" in errors[0]
    assert "Traceback" not in err
    assert not run.exists()


def test_replay_search_refuses_a_sampling_objective_before_loading(tiny_dir, tmp_path,
                                                                  capsys, no_loading):
    code = main(_search_args(tiny_dir, tmp_path / "r", "--fidelity", "replay", "--objective",
                             str(_sampling_objective(tmp_path))))
    assert code == 2
    assert "--fidelity replay" in capsys.readouterr().err


def test_multi_search_with_a_sampling_objective_measures_every_trial(tiny_dir, tmp_path,
                                                                   cache, capsys):
    run = tmp_path / "run"
    assert main(_search_args(tiny_dir, run, "--space", "ngram", "--trials", "2", "--no-prune",
                             "--objective", str(_sampling_objective(tmp_path)))) == 0
    err = capsys.readouterr().err
    assert "no replay screen (it samples); every trial is measured" in err
    assert "screening" not in err
    assert not (run / "screen.csv").exists()
    trials = _journal_trials(run / "study.journal", "m")
    assert len(counted_trials(trials)) == 2
    with pytest.raises(KeyError):
        _journal_trials(run / "study.journal", "m" + SCREEN_SUFFIX)
    frame = pd.read_csv(run / "trials.csv")
    assert set(frame.fidelity) == {"measure"}


def test_multi_search_screens_then_measures_the_best_and_resumes(tiny_dir, tmp_path, cache,
                                                                 capsys):
    run = tmp_path / "run"
    args = _search_args(tiny_dir, run, "--screen", "12", "--trials", "3")
    assert main(args) == 0
    err = capsys.readouterr().err
    assert "screening 12 configs by replay" in err
    journal = run / "study.journal"
    screen = _journal_trials(journal, "m" + SCREEN_SUFFIX)
    screened = {t.number: t for t in screen if t.state == TrialState.COMPLETE}
    assert len(counted_trials(screen)) == 12 and len(screened) == 12
    assert all(t.user_attrs["metrics"]["fidelity"] == "replay" for t in screened.values())

    frame = pd.read_csv(run / "screen.csv")
    assert len(frame) == 12 and set(frame.fidelity) == {"replay"}
    assert sorted(frame.number) == sorted(screened)

    # The measured study: the AR baseline, then screened configs carrying their prediction.
    measured = _journal_trials(journal, "m")
    assert len(counted_trials(measured)) == 3
    assert measured[0].user_attrs.get("preset") == "baseline"
    for trial in measured[1:]:
        attrs = trial.user_attrs["screen"]
        source = screened[attrs["trial"]]
        assert trial.params == source.params
        assert attrs["predicted"]["speedup"] == source.user_attrs["metrics"]["speedup"]
        assert trial.user_attrs["metrics"]["fidelity"] == "measure"
    configs = [json.dumps(t.user_attrs["config"], sort_keys=True) for t in measured[1:]]
    assert len(set(configs)) == len(configs)             # distinct configs

    trials_csv = pd.read_csv(run / "trials.csv")
    assert "fidelity" in trials_csv.columns and set(trials_csv.fidelity) == {"measure"}
    assert "predicted.speedup" in trials_csv.columns
    assert trials_csv["predicted.speedup"].notna().sum() == len(measured) - 1

    # The same command again: nothing is screened or measured again.
    screen_count, measured_count = len(screen), len(measured)
    assert main(args) == 0
    assert "screening" not in capsys.readouterr().err
    assert len(_journal_trials(journal, "m" + SCREEN_SUFFIX)) == screen_count
    assert len(_journal_trials(journal, "m")) == measured_count


# ------------------------------------------------------------------ f. kill -9 while screening

SCREEN = 30
DONE_BEFORE_KILL = 8


def test_a_screen_killed_mid_way_resumes_without_replaying_finished_configs(
        tiny_dir, tmp_path, cache, capsys, monkeypatch):
    run = tmp_path / "run"
    args = _search_args(tiny_dir, run, "--space", "ngram", "--screen", str(SCREEN),
                        "--trials", "2", "--study", "k9")
    # Parked inside the screen's (DONE_BEFORE_KILL + 1)-th evaluation: that many finished.
    proc = _parked("trial", DONE_BEFORE_KILL + 1, args, tmp_path / "in-screen")
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate()
    journal = run / "study.journal"
    name = "k9" + SCREEN_SUFFIX
    killed_trials = _journal_trials(journal, name)
    before = {t.number: (t.state, t.values, t.params, t.user_attrs.get("metrics"))
              for t in killed_trials if t.state.is_finished()}
    assert len(counted_trials(killed_trials)) == DONE_BEFORE_KILL
    running = [t for t in killed_trials if t.state == TrialState.RUNNING]
    assert len(running) == 1
    # The measured study is opened before the screen (so a refused run screens nothing)
    # but holds no trial until the screen has finished.
    assert _journal_trials(journal, "k9") == []

    # The rerun, in this process, counting what it evaluates at each fidelity.
    evaluated: list[str] = []
    original = evaluation.evaluate

    def counting(objective, ctx, config, report=None):
        evaluated.append(ctx.fidelity)
        return original(objective, ctx, config, report)

    monkeypatch.setattr(evaluation, "evaluate", counting)
    assert main(args) == 0
    err = capsys.readouterr().err
    assert f"screening {SCREEN} configs by replay ({DONE_BEFORE_KILL} done)" in err
    assert "measuring the replay cost model's parts" not in err      # kept in the run folder

    trials = _journal_trials(journal, name)
    after = {t.number: (t.state, t.values, t.params, t.user_attrs.get("metrics"))
             for t in trials}
    for number, record in before.items():
        assert after[number] == record               # nothing finished was lost or changed
    assert len(counted_trials(trials)) == SCREEN
    # Only the missing configs were replayed: none of the finished ones again.
    assert evaluated.count("replay") == SCREEN - DONE_BEFORE_KILL
    assert evaluated.count("measure") == 2
    killed = next(t for t in trials if t.number == running[0].number)
    assert killed.state == TrialState.FAIL and killed.user_attrs["interrupted"]
    retry = [t for t in trials if t.user_attrs.get("retry_of") == killed.number]
    assert len(retry) == 1 and retry[0].params == killed.params
    assert retry[0].state == TrialState.COMPLETE
    assert len(counted_trials(_journal_trials(journal, "k9"))) == 2

    # And a third run finds everything done.
    evaluated.clear()
    assert main(args) == 0
    assert evaluated == []


# ------------------------------------------------------------------ refusals and edges

def test_a_refused_multi_search_screens_and_writes_nothing(tiny_dir, tmp_path, cache, capsys):
    run = tmp_path / "run"
    common = _search_args(tiny_dir, run, "--trials", "2", "--no-prune")
    assert main([*common, "--space", "ngram", "--fidelity", "measure"]) == 0
    before = sorted(p.name for p in run.iterdir())
    capsys.readouterr()
    assert main([*common, "--space", "layer_skip", "--screen", "6"]) == 2
    assert "was made with space" in capsys.readouterr().err
    assert sorted(p.name for p in run.iterdir()) == before
    with pytest.raises(KeyError):
        _journal_trials(run / "study.journal", "m" + SCREEN_SUFFIX)


def test_a_draft_model_chain_replays_exactly_up_to_an_early_eos():
    target = tiny_llama(seed=5, layers=4, scale=4.0, eos=34)
    prompt = Prompt("t5 t6 t7 t5 t6", "rep", "p5")
    [ref] = _references_in_memory(target, [prompt], 20)
    assert ref.tokens[-1] == 34 and len(ref.tokens) < 20        # the EOS came early
    config = DecodeConfig(method="draft_model", k=4)
    # The target as its own draft: every draft is accepted, past the EOS too.
    decoded = SpeculativeDecoder(target, config, target).generate(ref.prompt, 20,
                                                                  time.perf_counter)
    assert decoded.tokens == ref.tokens
    source = get_method("draft_model").replay_factory()(target, target)
    replayed = simulate(source.track(config, ref), config, ref, 20)
    assert [(r.drafted, r.accepted, r.emitted) for r in replayed] == \
        [(r.drafted, r.accepted, r.emitted) for r in decoded.rounds]


def _references_in_memory(target, prompts, max_new):
    import tempfile
    with tempfile.TemporaryDirectory() as folder:
        return reference_set(target, prompts, max_new, directory=Path(folder))
