"""The replay tier against the real decoder on the real default model: where the replay
docstrings (simulate.py, tables.py, sources.py) claim exactness, the simulated rounds
equal the decoder's round by round, hence τ.

Claims checked (greedy, float32):
- `ngram`: exact for every exit policy (fixed, adaptive, heuristic, confidence);
- `suffix`: exact, the prompts served in order through one cache (earlier outputs);
- `sa` (TensorRT-LLM's suffix automaton): exact;
- `sglang_ngram` (SGLang's shared trie, whole trees): exact, the prompts in order;
- a separate `draft_model`: exact chains under fixed and heuristic exits; under a
  confidence exit the accepted and emitted tokens are exact, the drafted count only where
  the decoder stopped drafting at or before its first rejected draft; a static tree
  (`tree_choices`) is exact (accepted path, nodes, depth);
- `layer_skip` and `sorted_exit` (target stack): the first draft token of a round is
  exact, so a fixed k=1 chain replays exactly (this checks the teacher-forced pass over
  the target's keys/values, and the exit each row takes);
- `Replayer.summary`: its τ and acceptance equal the decoder's, it says fidelity replay,
  and a dynamic tree of width 2 says it is approximate.

The references are built once into a temporary folder; every decoder run is shared by
the tests through module-scoped fixtures. The cache itself is not redirected: the real
default model needs its converted copy in the normal cache.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import pytest
from conftest import real_prompts

from autotune.schema.config import DecodeConfig
from autotune.decoding.decoder import Generation, SpeculativeDecoder
from autotune.schema.methods import get_method
from autotune.models.loading import LoadedModel
from autotune.replay.costs import CostParts, LayerParts
from autotune.replay.reference import Reference, reference_set
from autotune.replay.simulate import ReplayRound, simulate
from autotune.workloads.prompts import encode_prompt

pytestmark = pytest.mark.slow

MAX_NEW = 20
N_PROMPTS = 5            # five categories: real_prompts goes round-robin over them

NGRAM = dict(method="ngram", ngram_min=1, ngram_max=3)
STATIC_CHOICES = ((0,), (1,), (0, 0), (0, 1), (0, 0, 0))
CASES: dict[str, dict] = {
    "ngram_fixed": dict(**NGRAM, exit_policy="fixed", k=4),
    "ngram_adaptive": dict(**NGRAM, exit_policy="adaptive", k=8, gamma=0.6),
    "ngram_heuristic": dict(**NGRAM, exit_policy="heuristic", k=3),
    "ngram_confidence": dict(**NGRAM, exit_policy="confidence", k=6, gamma=0.5),
    # vLLM's default runner: every draft padded to k with the last token, k drafted up to
    # the last step (past the budget).
    "ngram_vllm": dict(**NGRAM, exit_policy="fixed", k=4, engine="vllm"),
    # Suffix decoding: one decoder and one replay pass serve the prompts in order, so
    # each prompt drafts from the earlier prompts' outputs too (the cache, exact).
    "suffix_fixed": dict(method="suffix", exit_policy="fixed", k=8),
    "suffix_vllm": dict(method="suffix", exit_policy="fixed", k=24, engine="vllm"),
    # TensorRT-LLM's suffix automaton: k drafts verified every round (padded).
    "sa_trtllm": dict(method="sa", exit_policy="fixed", k=4, engine="trtllm"),
    # SGLang's NGRAM: one trie over the prompts served in order, a whole tree of k nodes
    # verified every round (its defaults; PROB with a shallower, narrower trie).
    "sglang_ngram_bfs": dict(method="sglang_ngram", exit_policy="fixed", k=11,
                             engine="sglang"),
    "sglang_ngram_prob": dict(method="sglang_ngram", exit_policy="fixed", k=6,
                              engine="sglang", sglang_ngram_match_type="PROB",
                              sglang_ngram_max_trie_depth=8,
                              sglang_ngram_max_bfs_breadth=3),
    "draft_fixed": dict(method="draft_model", exit_policy="fixed", k=4),
    "draft_heuristic": dict(method="draft_model", exit_policy="heuristic", k=3),
    "draft_confidence": dict(method="draft_model", exit_policy="confidence", k=6, gamma=0.5),
    "draft_static_tree": dict(method="draft_model", tree_choices=STATIC_CHOICES),
    "layer_skip_k1": dict(method="layer_skip", exit_policy="fixed", k=1,
                          attn_skip=(3, 8, 13, 19, 24), mlp_skip=(5, 20)),
    "sorted_exit_k1": dict(method="sorted_exit", exit_policy="fixed", k=1,
                           exits=(8, 16, 24), thresholds=(0.9, 0.6)),
}
USES_DRAFT = {"draft_fixed", "draft_heuristic", "draft_confidence", "draft_static_tree"}
# The cases `Replayer.summary` is compared on (ngram_fixed, draft_fixed) run every
# prompt; the others every other prompt (prompts 0, 2, 4 or 1, 3), which halves this
# module's decoding. Each offset is one where the case accepts drafts on this model
# (`_exercised`): n-gram and suffix drafts are accepted on the math and coding prompts
# (3, 4), the SGLang trie's on 1..4 (BFS) and 2 (PROB).
EVERY_OTHER = {"ngram_adaptive": 1, "ngram_heuristic": 0, "ngram_confidence": 1,
               "ngram_vllm": 1, "suffix_fixed": 1, "suffix_vllm": 0, "sa_trtllm": 1,
               "sglang_ngram_bfs": 1, "sglang_ngram_prob": 0, "draft_heuristic": 1,
               "draft_confidence": 0, "draft_static_tree": 1, "layer_skip_k1": 0,
               "sorted_exit_k1": 1}


@dataclass
class Case:
    config: DecodeConfig
    decoded: list[Generation]            # per reference, the real decoder's generation
    replayed: list[list[ReplayRound]]    # per reference, the simulated rounds


@pytest.fixture(scope="module")
def reference_folder(tmp_path_factory):
    return tmp_path_factory.mktemp("references")


@pytest.fixture(scope="module")
def refs(default_model: LoadedModel, reference_folder) -> list[Reference]:
    prompts = real_prompts(N_PROMPTS)
    assert len({p.category for p in prompts}) == N_PROMPTS
    folder = reference_folder
    out = reference_set(default_model, prompts, MAX_NEW, directory=folder)
    assert [r.prompt for r in out] == [encode_prompt(default_model.tokenizer, p)
                                       for p in prompts]
    assert all(1 <= len(r.tokens) <= MAX_NEW for r in out)
    # Built once: a second call reads the same references from the folder.
    assert reference_set(default_model, prompts, MAX_NEW, directory=folder) == out
    return out


@pytest.fixture(scope="module")
def cases(default_model, truncated_draft, refs) -> dict[str, Case]:
    """Every case decoded by the real decoder and replayed, once per module."""
    out = {}
    for name, knobs in CASES.items():
        config = DecodeConfig(**knobs)
        draft = truncated_draft if name in USES_DRAFT else None
        decoder = SpeculativeDecoder(default_model, config, draft)
        source = get_method(config.method).replay_factory()(default_model, draft)
        decoded, replayed = [], []
        start = EVERY_OTHER.get(name)
        for ref in (refs if start is None else refs[start::2]):
            generation = decoder.generate(ref.prompt, MAX_NEW, time.perf_counter)
            # Greedy decoding is lossless: every config emits the reference.
            assert generation.tokens == ref.tokens, (name, ref.prompt_id)
            decoded.append(generation)
            replayed.append(simulate(source.track(config, ref), config, ref, MAX_NEW))
        out[name] = Case(config, decoded, replayed)
    return out


def _triples(rounds) -> list[tuple[int, int, int]]:
    return [(r.drafted, r.accepted, r.emitted) for r in rounds]


def _tau(rounds_per_prompt) -> float:
    rounds = [r for rounds in rounds_per_prompt for r in rounds]
    return sum(r.emitted for r in rounds) / len(rounds)


def _exercised(case: Case) -> None:
    """The case drafted and some drafts were accepted (else equal rounds would say
    little); the tests check rejections where the method makes them."""
    rounds = [r for g in case.decoded for r in g.rounds]
    drafted = sum(r.drafted for r in rounds)
    accepted = sum(r.accepted for r in rounds)
    assert drafted > 0 and 0 < accepted, (drafted, accepted)


@pytest.mark.parametrize("name", ["ngram_fixed", "ngram_adaptive", "ngram_heuristic",
                                  "ngram_confidence", "ngram_vllm", "suffix_fixed",
                                  "suffix_vllm", "sa_trtllm", "sglang_ngram_bfs",
                                  "sglang_ngram_prob", "draft_fixed",
                                  "draft_heuristic"])
def test_exact_chains_replay_round_by_round(cases, name):
    case = cases[name]
    _exercised(case)
    for generation, replayed in zip(case.decoded, case.replayed):
        assert _triples(replayed) == _triples(generation.rounds)
        # The verify pass and the chain's depth follow from the drafted count.
        assert [r.verified for r in replayed] == [r.verified for r in generation.rounds]
        assert [r.depth for r in replayed] == [r.draft_depth for r in generation.rounds]
    assert _tau(case.replayed) == _tau([g.rounds for g in case.decoded])


def test_vllm_ngram_drafts_k_every_round_but_the_last(cases):
    """vLLM's V2 runner verifies k drafts every step (padded where no match fills them),
    up to the step that samples the request's last token: more drafted than our rules."""
    padded, ours = cases["ngram_vllm"], cases["ngram_fixed"]
    for generation in padded.decoded:
        assert all(r.drafted == 4 for r in generation.rounds[:-1])
    assert (sum(r.drafted for g in padded.decoded for r in g.rounds)
            > sum(r.drafted for g in ours.decoded[EVERY_OTHER["ngram_vllm"]::2]
                  for r in g.rounds))


def test_draft_model_rejects_something(cases):
    """The truncated draft disagrees with the target: rejections are replayed too."""
    rounds = [r for g in cases["draft_fixed"].decoded for r in g.rounds]
    assert sum(r.accepted for r in rounds) < sum(r.drafted for r in rounds)


def test_draft_model_confidences_are_the_decoders(cases):
    """A draft_model chain's accepted drafts carry the decoder's top-1 probabilities
    (the first rejected draft's too: its prefix is still the reference)."""
    case = cases["draft_fixed"]
    for generation, replayed in zip(case.decoded, case.replayed):
        for real, sim in zip(generation.rounds, replayed):
            exact = min(real.drafted, real.accepted + 1)
            assert sim.confidences[:exact] == pytest.approx(real.confidences[:exact],
                                                            abs=1e-4)


def test_confidence_exit_over_a_draft_model_keeps_what_is_claimed(cases):
    """Accepted and emitted per round are exact; the drafted count is exact wherever the
    decoder stopped at or before its first rejected draft (every decision up to there
    read an exact confidence); after a rejection both go on drafting."""
    case = cases["draft_confidence"]
    _exercised(case)
    stopped_early = 0
    for generation, replayed in zip(case.decoded, case.replayed):
        real_rounds = generation.rounds
        assert len(replayed) == len(real_rounds)
        assert [(r.accepted, r.emitted) for r in replayed] == \
            [(r.accepted, r.emitted) for r in real_rounds]
        generated = 1                               # the prefill's token
        for real, sim in zip(real_rounds, replayed):
            if real.drafted <= real.accepted + 1:
                assert sim.drafted == real.drafted
            else:
                assert sim.drafted > sim.accepted + 1
            limit = min(case.config.k, MAX_NEW - generated - 1)
            stopped_early += real.drafted < limit
            generated += real.emitted
    assert _tau(case.replayed) == _tau([g.rounds for g in case.decoded])
    # The confidence rule did stop some rounds before k (else it tested a fixed K).
    assert stopped_early > 0


def test_static_tree_over_a_draft_model_replays_round_by_round(cases):
    case = cases["draft_static_tree"]
    _exercised(case)
    for generation, replayed in zip(case.decoded, case.replayed):
        real_rounds = generation.rounds
        assert [(r.accepted, r.emitted) for r in replayed] == \
            [(r.accepted, r.emitted) for r in real_rounds]
        # Node counts (trimmed to the budget near the end) and levels.
        assert [r.drafted for r in replayed] == [r.drafted for r in real_rounds]
        assert [r.verified for r in replayed] == [r.verified for r in real_rounds]
        assert [r.depth for r in replayed] == [r.draft_depth for r in real_rounds]
    assert _tau(case.replayed) == _tau([g.rounds for g in case.decoded])


@pytest.mark.parametrize("name", ["layer_skip_k1", "sorted_exit_k1"])
def test_first_draft_token_of_layer_methods_is_exact(cases, name):
    """k=1 chains: every draft is a round's first, read from the teacher-forced pass
    over the target's keys/values (layer_skip) or the stack's own pass (sorted_exit)."""
    case = cases[name]
    _exercised(case)
    rounds = [r for g in case.decoded for r in g.rounds]
    assert sum(r.accepted for r in rounds) < sum(r.drafted for r in rounds)
    for generation, replayed in zip(case.decoded, case.replayed):
        assert _triples(replayed) == _triples(generation.rounds)
        if name == "sorted_exit_k1":
            # The exit each draft took is the decoder's.
            assert [r.exits for r in replayed] == [r.exit_layers for r in generation.rounds]
    if name == "sorted_exit_k1":
        taken = {e for g in case.decoded for r in g.rounds for e in r.exit_layers}
        assert len(taken) >= 2, taken            # the thresholds picked more than one exit
    assert _tau(case.replayed) == _tau([g.rounds for g in case.decoded])


# ------------------------------------------------------------------ Replayer.summary

def _hand_parts(target: LoadedModel, draft: LoadedModel) -> CostParts:
    """Made-up cost parts: τ and acceptance do not depend on them, and measuring the real
    model's parts would cost this module a minute."""
    layers = LayerParts(target.n_layers, 1.0, 0.1, 0.1, 0.01, 0.5, 0.05)
    draft_layers = LayerParts(draft.n_layers, 1.0, 0.1, 0.1, 0.01, 0.5, 0.05)
    return CostParts(format="hand", key={}, target_curve=[[1, 10.0], [128, 100.0]],
                     ar_other=0.5, spec_other=0.7, ngram_lookup=0.2, tree_node=0.05,
                     tree_other=0.01, tree_verify_factor=1.1, target_layers=layers,
                     draft_curve=[[1, 3.0], [32, 20.0]], draft_layers=draft_layers,
                     draft_factor={})


@pytest.fixture(scope="module")
def replayer(default_model, truncated_draft, refs, reference_folder, tmp_path_factory):
    import autotune.replay.run as run_module

    prompts = real_prompts(N_PROMPTS)
    parts = _hand_parts(default_model, truncated_draft)
    folder = tmp_path_factory.mktemp("replayer")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(run_module, "load_or_measure_parts", lambda *args, **kwargs: parts)
        # Not rebuilt: the references come from the folder the `refs` fixture filled.
        patch.setattr("autotune.decoding.reference.reference_continuations", _no_decoding)
        made = run_module.Replayer(default_model, truncated_draft, prompts, MAX_NEW,
                                   folder / "replay_costs.json",
                                   reference_dir=reference_folder)
    assert made.references == refs
    return made


def _no_decoding(*args, **kwargs):
    raise AssertionError("the references were decoded again instead of read from the cache")


@pytest.mark.parametrize("name", ["ngram_fixed", "draft_fixed"])
def test_replayer_summary_tau_is_the_decoders(cases, replayer, name):
    case = cases[name]
    summary = replayer.summary(case.config)
    assert summary["fidelity"] == "replay"
    assert summary["replay_exact"] is True and summary["replay_notes"] == []
    real = [r for g in case.decoded for r in g.rounds]
    assert summary["mean_accepted_tokens"] == _tau([g.rounds for g in case.decoded])
    assert summary["rounds"] == len(real)
    drafted = sum(r.drafted for r in real)
    assert summary["acceptance_rate"] == sum(r.accepted for r in real) / drafted
    assert summary["tokens_generated"] == sum(len(g.tokens) for g in case.decoded)
    assert summary["config"] == case.config.to_dict()


def test_replayer_says_a_wide_dynamic_tree_is_approximate(replayer):
    config = DecodeConfig(method="draft_model", tree_width=2, tree_depth=3, tree_tokens=6)
    summary = replayer.summary(config)
    assert summary["fidelity"] == "replay"
    assert summary["replay_exact"] is False
    assert any("dynamic tree" in note for note in summary["replay_notes"])
    # A static tree over the same draft is exact.
    static = replayer.summary(DecodeConfig(method="draft_model", tree_choices=STATIC_CHOICES))
    assert static["replay_exact"] is True


# ------------------------------------------------------------------ batch size B
def _synthetic_batch_points(curve):
    """A batch profile whose B = 1 column is the loop's own curve and whose rows cost a
    fifth of the first row each (a pass over b rows: (1 + (b - 1) / 5) x one row's)."""
    from autotune.replay.costs import interpolate

    return [{"batch_size": b, "tokens": n, "ms": interpolate(curve, n) * (1 + (b - 1) / 5)}
            for b in (1, 2, 4, 8) for n in (1, 2, 3, 4, 5, 6, 8, 12)]


@pytest.mark.parametrize("name", ["ngram_fixed", "draft_fixed"])
def test_batch_replay_at_one_is_the_single_row_replay(cases, replayer, name):
    from autotune.replay.batch import BatchCost, predict_batched

    config = cases[name].config
    cost = BatchCost(_synthetic_batch_points(replayer.parts.target_curve),
                     replayer.parts.target_curve)
    single = replayer.summary(config)
    batched = predict_batched(replayer, cost, config, 1)
    assert batched["speedup"] == pytest.approx(single["speedup"], rel=1e-9)
    assert batched["mean_accepted_tokens"] == pytest.approx(single["mean_accepted_tokens"])


def test_batch_replay_keeps_tau_and_charges_the_widest_row(cases, replayer):
    from autotune.replay.batch import BatchCost, predict_batched

    config = cases["ngram_fixed"].config
    cost = BatchCost(_synthetic_batch_points(replayer.parts.target_curve),
                     replayer.parts.target_curve)
    one, four = (predict_batched(replayer, cost, config, b) for b in (1, 4))
    # Acceptance is per row: τ over the same rows does not depend on the batch.
    runs = replayer.replay(config).runs[: 4 * four["batches"]]
    rounds = [t for r in runs for t in r.candidate.rounds]
    assert four["mean_accepted_tokens"] == pytest.approx(
        sum(t.emitted for t in rounds) / len(rounds))
    # Rows share a pass that costs a fifth of a row per extra row: AR gains throughput...
    assert four["ar_tokens_per_s"] > 2 * one["ar_tokens_per_s"]
    # ...and every round pays for its widest draft, so speculation gains less than AR.
    assert four["speedup"] < one["speedup"]
