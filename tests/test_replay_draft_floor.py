"""The replay tier's cost model knows what a draft pass costs (issue 51, item 3).

A draft pass through the first e of the target's N layers costs at least the target's
measured one-token pass scaled to the layers it runs; an exit at the last layer drafts
with the whole target and cannot be predicted faster than AR.

The parts below are those of the case the issue found: sublayer parts timed bare (back to
back, here half the decoder loop's target pass, as on the 2-core CPU) and an in-loop factor
for `sorted_exit` below 1, calibrated on a config whose tokens mostly left at a shallow
exit. Today's code priced the last-layer exit at about a quarter of a target pass; the
model is a tiny random-weight Llama (the mechanics: its draft at the last exit is the
target, so every draft is accepted, as with the 3.015x prediction).
"""

from __future__ import annotations

import pytest
from tiny import tiny_llama

from autotune.common.errors import AutotuneError
from autotune.schema.config import DecodeConfig
from autotune.methods.sorted_exit.replay import SortedExitCost
from autotune.replay.costs import FORMAT, CostParts, LayerParts, interpolate
from autotune.replay.run import Replayer
from autotune.workloads.prompts import Prompt

LAYERS = 8
TARGET_CURVE = [[1, 10.0], [2, 10.6], [4, 11.8], [8, 14.0], [16, 20.0], [32, 32.0]]
BARE = LayerParts(layers=LAYERS, base=1.0, attn=0.15, mlp=0.35, kv=0.4, head=0.8, choose=0.3)
PROMPTS = [Prompt("t1 t2 t3 t1 t2 t3 t1", "rep", "p0"), Prompt("t7 t8 t9 t7 t8", "mix", "p1"),
           Prompt("t4 t5 t6 t4", "other", "p2")]
MAX_NEW = 24


def _parts() -> CostParts:
    return CostParts(FORMAT, {}, TARGET_CURVE, ar_other=0.5, spec_other=0.5,
                     ngram_lookup=0.05, tree_node=0.0, tree_other=0.0,
                     tree_verify_factor=1.0, target_layers=BARE, draft_curve=None,
                     draft_layers=None, draft_factor={"sorted_exit": 0.5, "layer_skip": 0.5})


@pytest.fixture(scope="module")
def replayer(tmp_path_factory) -> Replayer:
    target = tiny_llama(seed=5, layers=LAYERS, scale=4.0)
    folder = tmp_path_factory.mktemp("floor")
    return Replayer(target, None, PROMPTS, MAX_NEW, folder / "unused.json", folder,
                    parts=_parts())


def _layers_ms(run_layers: int) -> float:
    """The target's in-loop one-token pass, scaled to the share of it that a pass through
    `run_layers` layers runs (embedding and head included)."""
    full = BARE.base + LAYERS * (BARE.attn + BARE.mlp)
    return interpolate(TARGET_CURVE, 1) * (BARE.base + run_layers * (BARE.attn + BARE.mlp)) / full


@pytest.mark.parametrize("exit_layer", [LAYERS, LAYERS // 2, LAYERS // 4],
                         ids=["last layer", "half depth", "quarter depth"])
def test_a_draft_pass_costs_at_least_the_layers_it_runs(replayer, exit_layer):
    config = DecodeConfig(method="sorted_exit", k=8, exits=(exit_layer,),
                          exit_policy="heuristic")
    measurement = replayer.replay(config)
    rounds = [r for run in measurement.runs for r in run.candidate.rounds if r.drafted]
    assert rounds
    for r in rounds:
        assert 1000 * r.draft_s >= r.drafted * _layers_ms(exit_layer) * (1 - 1e-9)


def test_an_exit_at_the_last_layer_is_not_predicted_faster_than_ar(replayer):
    config = DecodeConfig(method="sorted_exit", k=8, exits=(LAYERS,), exit_policy="heuristic")
    summary = replayer.summary(config)
    # The draft is the target: every draft token is accepted...
    assert summary["acceptance_rate"] == pytest.approx(1.0)
    # ...and each costs a target pass, so nothing is gained.
    assert summary["speedup"] < 1.0


def test_a_half_depth_exit_costs_half_the_layers_of_a_last_layer_exit(replayer):
    """The floor scales with the layers run, not one price for every exit."""
    def draft_ms_per_token(exit_layer: int) -> float:
        config = DecodeConfig(method="sorted_exit", k=4, exits=(exit_layer,))
        rounds = [r for run in replayer.replay(config).runs for r in run.candidate.rounds]
        return 1000 * sum(r.draft_s for r in rounds) / sum(r.drafted for r in rounds)

    last, half = draft_ms_per_token(LAYERS), draft_ms_per_token(LAYERS // 2)
    assert last >= interpolate(TARGET_CURVE, 1) * (1 - 1e-9)
    assert half < last
    assert half >= _layers_ms(LAYERS // 2) * (1 - 1e-9)


def test_a_prediction_below_the_floor_stops_the_replay(replayer, monkeypatch):
    """The guard: a cost model that priced a pass below its layers' cost (as the parts
    times the in-loop factor alone did) is refused, naming the config."""
    monkeypatch.setattr(SortedExitCost, "priced_pass_ms",
                        lambda self, tokens, exit_layer: self.pass_ms(tokens, exit_layer)
                        * self.factor, raising=False)
    config = DecodeConfig(method="sorted_exit", k=8, exits=(LAYERS,), exit_policy="heuristic")
    with pytest.raises(AutotuneError, match="sorted_exit.*below the .* ms its passes' layers"):
        replayer.replay(config)
