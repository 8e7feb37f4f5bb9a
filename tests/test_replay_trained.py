"""Replay of trained heads (eagle, medusa) against the real decoder on tiny Llamas.

Claims checked (greedy; heads partly trained, so they draft well but not perfectly):
- the replayed rounds (drafted, accepted, emitted, verified, depth) equal the decoder's
  round by round for an eagle chain (fixed k=3, heuristic, and confidence, whose
  drafted count is claimed only where it read on-path confidences), an eagle static
  tree and a width-1 dynamic tree, Medusa chains (fixed past its head count, confidence,
  adaptive) and Medusa static and dynamic trees, with and without an early EOS;
- the fidelity flags and notes say what each head's replay module says is exact;
- the tables do not depend on how anchors are chunked, and a heuristic exit's growing
  K deepens them;
- a Medusa tree deeper than its heads is refused in one line, as the decoder refuses it;
- the cost model's arithmetic for head passes, and old cost-part files still read;
- `autotune measure --replay` with a trained eagle folder predicts the measured τ.
"""

from __future__ import annotations

import importlib
import json
import time
from pathlib import Path

import pytest
import torch
from test_trained_drafters import _trained
from tiny import llama_model, one_thread, save_tiny, tiny_llama  # noqa: F401 (autouse fixture)

from autotune.cli.main import main
from autotune.common.errors import AutotuneError
from autotune.schema.config import DecodeConfig, config_from_mapping
from autotune.decoding.decoder import SpeculativeDecoder
from autotune.schema.methods import get_method
from autotune.methods.eagle import replay as eagle_replay
from autotune.replay.costs import FORMAT, CostModel, CostParts, HeadParts, LayerParts
from autotune.replay.reference import Reference
from autotune.replay.simulate import ReplayRound, simulate

EOS = 52
MAX_NEW = 24
PROMPTS = [[1, 2, 3, 4, 1, 2, 3, 4, 1, 2], [7, 8, 9], [30, 31, 32, 33, 34, 35, 30, 31],
           [11, 40, 12, 41, 13]]
STATIC = [[0], [1], [0, 0], [0, 1], [1, 0], [0, 0, 0]]
CASES = {
    "eagle_fixed": ("eagle", dict(exit_policy="fixed", k=3)),
    "eagle_heuristic": ("eagle", dict(exit_policy="heuristic", k=2)),
    "eagle_confidence": ("eagle", dict(exit_policy="confidence", k=5, gamma=0.4)),
    "eagle_static": ("eagle", dict(exit_policy="fixed", tree_choices=STATIC)),
    "eagle_dynamic_1": ("eagle", dict(exit_policy="fixed", tree_width=1, tree_depth=4)),
    "medusa_fixed": ("medusa", dict(exit_policy="fixed", k=4)),      # 3 heads: capped
    "medusa_confidence": ("medusa", dict(exit_policy="confidence", k=5, gamma=0.4)),
    "medusa_adaptive": ("medusa", dict(exit_policy="adaptive", k=6, gamma=0.5)),
    "medusa_static": ("medusa", dict(exit_policy="fixed", tree_choices=STATIC)),
    "medusa_dynamic": ("medusa", dict(exit_policy="fixed", tree_width=3, tree_depth=3,
                                      tree_tokens=8)),
}
EXACT = [name for name in CASES if name != "eagle_confidence"]


@pytest.fixture(scope="module", params=[None, EOS], ids=["no-eos", "eos"])
def target(request):
    return tiny_llama(seed=3, layers=4, eos=request.param, scale=4.0)


@pytest.fixture(scope="module")
def drafters(target, tmp_path_factory):
    return {kind: _trained(target, kind, 40, tmp_path_factory.mktemp(kind))
            for kind in ("eagle", "medusa")}


@pytest.fixture(scope="module")
def refs(target) -> list[Reference]:
    """The AR decoder's greedy continuations: what every lossless config emits."""
    decoder = SpeculativeDecoder(target, DecodeConfig())
    return [Reference(f"p{i}", "c", prompt,
                      decoder.generate(prompt, MAX_NEW, time.perf_counter).tokens)
            for i, prompt in enumerate(PROMPTS)]


def _config(name: str) -> DecodeConfig:
    kind, knobs = CASES[name]
    return config_from_mapping({"method": kind, **knobs})


def _decode_and_replay(target, drafters, refs, name):
    config = _config(name)
    draft = drafters[config.method]
    decoder = SpeculativeDecoder(target, config, draft)
    source = get_method(config.method).replay_factory()(target, draft)
    source.prepare(config, refs)
    out = []
    for ref in refs:
        generation = decoder.generate(ref.prompt, MAX_NEW, time.perf_counter)
        assert generation.tokens == ref.tokens          # greedy is lossless
        out.append((generation.rounds, simulate(source.track(config, ref), config, ref,
                                                MAX_NEW)))
    return source, out


def _rows(rounds, real: bool):
    return [(r.drafted, r.accepted, r.emitted, r.verified,
             r.draft_depth if real else r.depth) for r in rounds]


def _exercised(pairs) -> None:
    """Drafts were made, some accepted and some rejected: equal rounds say something."""
    rounds = [r for real, _ in pairs for r in real]
    assert sum(r.drafted for r in rounds) > 0
    assert sum(r.accepted for r in rounds) > 0
    assert any(r.accepted < r.drafted for r in rounds)


@pytest.mark.parametrize("name", EXACT)
def test_replay_equals_the_decoder_round_by_round(target, drafters, refs, name):
    _, pairs = _decode_and_replay(target, drafters, refs, name)
    _exercised(pairs)
    for real, replayed in pairs:
        assert _rows(replayed, False) == _rows(real, True)
    if name == "medusa_fixed":
        # The drafter drafts one token per head, whatever k says.
        assert max(r.drafted for real, _ in pairs for r in real) == 3


def test_eagle_confidence_exit_keeps_what_is_claimed(target, drafters, refs):
    """Accepted and emitted per round are exact; the drafted count is exact wherever
    the decoder stopped at or before its first rejected draft."""
    _, pairs = _decode_and_replay(target, drafters, refs, "eagle_confidence")
    _exercised(pairs)
    stopped_early = 0
    for real, replayed in pairs:
        assert [(r.accepted, r.emitted) for r in replayed] == \
            [(r.accepted, r.emitted) for r in real]
        generated = 1                                   # the prefill's token
        for r, sim in zip(real, replayed):
            if r.drafted <= r.accepted + 1:
                assert sim.drafted == r.drafted
            stopped_early += r.drafted < min(5, MAX_NEW - generated - 1)
            generated += r.emitted
    assert stopped_early > 0            # the confidence rule did cut rounds short


def test_eagle_first_pass_catches_up_on_the_verified_pairs(target, drafters, refs):
    """The cost model's passes: the first round catches up on the whole prompt, each
    later one on 1 + the last round's accepted drafts, then one token per draft."""
    _, pairs = _decode_and_replay(target, drafters, refs, "eagle_fixed")
    for ref, (_, replayed) in zip(refs, pairs):
        drafting = [r for r in replayed if r.drafted]
        assert drafting[0].passes[0] == len(ref.prompt)
        for before, r in zip(drafting, drafting[1:]):
            assert r.passes == [before.accepted + 1] + [1] * (r.drafted - 1)


@pytest.mark.parametrize("name,exact,note", [
    ("eagle_fixed", True, None),
    ("eagle_heuristic", True, None),
    ("eagle_confidence", True, "confidence exit"),
    ("eagle_static", True, None),
    ("eagle_dynamic_1", True, None),
    ("medusa_fixed", True, None),
    ("medusa_confidence", True, None),
    ("medusa_adaptive", True, None),
    ("medusa_static", True, None),
    ("medusa_dynamic", True, None),
])
def test_fidelity_flags_and_notes(target, drafters, name, exact, note):
    config = _config(name)
    source = get_method(config.method).replay_factory()(target, drafters[config.method])
    got, notes = source.fidelity(config)
    assert got is exact
    assert (notes == []) if note is None else any(note in n for n in notes)


def test_eagle_approximations_are_flagged(target, drafters):
    source = get_method("eagle").replay_factory()(target, drafters["eagle"])
    adaptive = DecodeConfig(method="eagle", exit_policy="adaptive", k=6, gamma=0.5)
    exact, notes = source.fidelity(adaptive)
    assert exact is False and any("adaptive exit" in n for n in notes)
    wide = DecodeConfig(method="eagle", tree_width=3, tree_depth=3, tree_tokens=8)
    exact, notes = source.fidelity(wide)
    assert exact is False and any("dynamic tree" in n for n in notes)


def test_tables_do_not_depend_on_the_chunking(target, drafters, refs, monkeypatch):
    ref = max(refs, key=lambda r: len(r.tokens))
    for kind in ("eagle", "medusa"):
        source = get_method(kind).replay_factory()(target, drafters[kind])
        config = DecodeConfig(method=kind, k=3)
        whole = source._tables(config, ref)
        # Each head's replay module chunks its own anchors.
        monkeypatch.setattr(importlib.import_module(f"autotune.methods.{kind}.replay"),
                            "CHUNK", 5)
        source = get_method(kind).replay_factory()(target, drafters[kind])
        chunked = source._tables(config, ref)
        monkeypatch.undo()
        assert torch.equal(whole.ids, chunked.ids) and whole.rows == chunked.rows
        torch.testing.assert_close(whole.logp, chunked.logp, atol=1e-5, rtol=1e-5)


def test_a_growing_heuristic_k_deepens_the_tables(target, drafters, refs, monkeypatch):
    monkeypatch.setattr(eagle_replay, "MIN_DEPTH", 1)
    config = DecodeConfig(method="eagle", exit_policy="heuristic", k=1)
    draft = drafters["eagle"]
    decoder = SpeculativeDecoder(target, config, draft)
    source = get_method("eagle").replay_factory()(target, draft)
    deepest = 0
    for ref in refs:
        real = decoder.generate(ref.prompt, MAX_NEW, time.perf_counter).rounds
        track = source.track(config, ref)
        assert track.tables.depth == 1
        assert _rows(simulate(track, config, ref, MAX_NEW), False) == _rows(real, True)
        deepest = max(deepest, max(r.drafted for r in real))
    assert deepest > 1                   # K grew past the first tables' depth


def test_a_medusa_tree_deeper_than_its_heads_is_refused(target, drafters, refs):
    deep = DecodeConfig(method="medusa", tree_width=2, tree_depth=4)
    source = get_method("medusa").replay_factory()(target, drafters["medusa"])
    with pytest.raises(AutotuneError, match="needs as many Medusa heads") as refused:
        source.prepare(deep, refs)
    assert "\n" not in str(refused.value)
    with pytest.raises(AutotuneError, match="Medusa heads"):
        source.track(deep, refs[0])


# ------------------------------------------------------------------ the cost model

LAYERS = LayerParts(layers=4, base=2.0, attn=0.25, mlp=0.5, kv=0.1, head=1.5, choose=0.2)
LOGITS = [[1, 0.5], [8, 1.2]]


def _parts(head: HeadParts | None, factor: dict[str, float]) -> CostParts:
    return CostParts(FORMAT, {}, [[1, 10.0], [8, 24.0]], 0.5, 0.8, 0.3, 0.05, 0.02, 1.5,
                     LAYERS, None, None, factor, head)


EAGLE_PARTS = HeadParts("eagle", [[1, 1.0], [2, 1.5], [4, 2.5]], LOGITS)
MEDUSA_PARTS = HeadParts("medusa", [], LOGITS, blocks=0.3, n_heads=3)


@pytest.mark.parametrize("head,config,round_,draft_ms", [
    # Catch-up over 2 pairs, then two one-token passes; each + LM head (1 row) + a pick;
    # the in-loop factor 2.
    (EAGLE_PARTS, DecodeConfig(method="eagle", k=3),
     ReplayRound(3, 1, 2, 4, 3, [0.9] * 3, passes=[2, 1, 1]),
     ((1.5 + 0.5 + 0.2) + 2 * (1.0 + 0.5 + 0.2)) * 2.0),
    # A tree: the root pass catches up (1 + 1 pairs, one row scored), a level of 2 nodes
    # (two rows scored), then the per-node bookkeeping (not scaled).
    (EAGLE_PARTS, DecodeConfig(method="eagle", tree_choices=((0,), (1,), (0, 0), (1, 0))),
     ReplayRound(4, 1, 2, 5, 2, [], passes=[1, 2], catch_up=1),
     ((1.5 + 0.5) + (1.5 + 0.6)) * 2.0 + 0.05 * 4),
    # Medusa: one pass (blocks + LM head over 3 rows), a pick per draft.
    (MEDUSA_PARTS, DecodeConfig(method="medusa", k=3),
     ReplayRound(3, 0, 1, 4, 3, [0.5] * 3, passes=[1, 1, 1]), (0.3 + 0.7) * 1.5 + 3 * 0.2 * 1.5),
    (MEDUSA_PARTS, DecodeConfig(method="medusa", tree_width=2, tree_depth=2),
     ReplayRound(6, 1, 2, 7, 2, [], passes=[1, 2], catch_up=0), (0.3 + 0.7) * 1.5 + 0.05 * 6),
])
def test_head_round_costs_are_the_sum_of_their_parts(head, config, round_, draft_ms):
    model = CostModel(_parts(head, {"eagle": 2.0, "medusa": 1.5}), config, n_layers=4)
    assert model.draft_seconds(round_) == pytest.approx(draft_ms / 1000)


def test_head_costs_without_head_parts_are_refused_in_one_line():
    model = CostModel(_parts(None, {}), DecodeConfig(method="eagle", k=3), n_layers=4)
    with pytest.raises(AutotuneError, match="no eagle head passes"):
        model.draft_seconds(ReplayRound(1, 0, 1, 2, 1, [0.5], passes=[1]))


def test_cost_parts_files_without_head_parts_still_read():
    doc = _parts(EAGLE_PARTS, {}).to_json()
    assert CostParts.from_json(doc).head == EAGLE_PARTS
    del doc["head"]                                 # a file written before trained heads
    assert CostParts.from_json(doc).head is None


# ------------------------------------------------------------------ measure --replay

WORKLOAD = "t1 t2 t3 t4 t5 t1 t2 t3 t4 t5 t1 t2\nt7 t8 t9 t7 t8 t9 t7 t8\n"


def _drafter_folder(draft, target, folder: Path) -> Path:
    """What train-draft writes that `--draft DIR` reads: drafter.json and the weights."""
    from safetensors.torch import save_file

    from autotune.models.drafter_folder import DRAFTER_FILE, WEIGHTS_FILE
    from autotune.models.fingerprint import model_fingerprint

    folder.mkdir()
    save_file({k: v.contiguous() for k, v in draft.hf_model.state_dict().items()},
              str(folder / WEIGHTS_FILE))
    meta = {**draft.meta.model_dump(exclude_unset=True), "target": {"name": target.name,
                                     "fingerprint": model_fingerprint(target)}}
    (folder / DRAFTER_FILE).write_text(json.dumps(meta))
    return folder


def test_measure_replay_of_an_eagle_chain(tmp_path, monkeypatch, capsys):
    from autotune.models.loading import load_model

    cache = tmp_path / "cache"
    monkeypatch.setenv("AUTOTUNE_CACHE", str(cache))
    model = save_tiny(llama_model(seed=3, layers=4, scale=4.0), tmp_path / "model")
    (tmp_path / "prompts.txt").write_text(WORKLOAD)
    target = load_model(str(model))
    (tmp_path / "train").mkdir()
    folder = _drafter_folder(_trained(target, "eagle", 40, tmp_path / "train"), target,
                             tmp_path / "eagle")
    args = ["measure", "--model", str(model), "--draft", str(folder), "--workload",
            str(tmp_path / "prompts.txt"), "--max-new-tokens", "16", "--set", "method=eagle",
            "--set", "k=3", "--json"]
    assert main(args) == 0
    measured = json.loads(capsys.readouterr().out)
    assert main(args + ["--replay"]) == 0
    replayed = json.loads(capsys.readouterr().out)
    assert replayed["fidelity"] == "replay"
    assert replayed["replay_exact"] is True and replayed["replay_notes"] == []
    assert measured["acceptance_rate"] < 1.0 and measured["mean_accepted_tokens"] > 1.0
    for key in ("mean_accepted_tokens", "acceptance_rate", "rounds", "tokens_generated",
                "mean_drafted_tokens"):
        assert replayed[key] == measured[key], key
    assert replayed["speedup"] > 0 and replayed["latency_ms_per_token"] > 0
    # The cost parts were measured with the head's passes and its in-loop factor.
    parts = json.loads((cache / "replay" / "replay_costs.json").read_text())
    assert parts["head"]["kind"] == "eagle" and parts["head"]["layer"]
    assert parts["key"]["drafter"] == "eagle" and "eagle" in parts["draft_factor"]
