"""Which screened configs the multi-fidelity search measures (`screening.screened_queue`)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import optuna
from optuna.distributions import CategoricalDistribution
from optuna.trial import create_trial

from autotune.search.objectives import load_objective
from autotune.search.samplers import BASELINE, BASELINE_ATTR
from autotune.search.screening import screened_queue
from autotune.search.trial_record import QueuedTrial
from autotune.search.study import UNPRUNED_ATTR

METRIC_KEYS = ("mean_accepted_tokens", "mean_drafted_tokens", "mean_verified_tokens",
               "rounds", "latency_ms_per_token")


def _screen(rows: list[tuple[str, dict[str, Any], float]],
            presets: dict[str, str] | None = None) -> SimpleNamespace:
    """A screen study: (name, config, predicted speedup) per trial, the AR baseline first;
    `presets`: trial name -> the documented default it is."""
    study = optuna.create_study(direction="maximize")
    for i, (name, config, speedup) in enumerate([("baseline", {"method": "none"}, 1.0), *rows]):
        attrs: dict[str, Any] = {"config": config, "name": name, "metrics": {
            **{k: float(i) for k in METRIC_KEYS}, "speedup": speedup}}
        if name == "baseline":
            attrs[BASELINE_ATTR] = BASELINE
        if name in (presets or {}):
            attrs[BASELINE_ATTR] = (presets or {})[name]
        study.add_trial(create_trial(
            params={"name": name}, distributions={"name": CategoricalDistribution([name])},
            value=speedup, user_attrs=attrs))
    return SimpleNamespace(study=study)


def _names(queue: list[QueuedTrial]) -> list[str]:
    return [queued.params["name"] for queued in queue]


NGRAM = [(f"ngram{i}", {"method": "ngram", "k": i}, 1.10 - i / 100) for i in range(1, 7)]
EAGLE = [("eagle_chain", {"method": "eagle", "k": 1}, 0.80),
         ("eagle_tree", {"method": "eagle", "tree_width": 2, "tree_depth": 2}, 0.65),
         ("eagle_chain_2", {"method": "eagle", "k": 2}, 0.70)]
SKIP = [("layer_skip", {"method": "layer_skip", "k": 4, "attn_skip": [1]}, 0.66)]


def test_every_method_is_measured_once_even_when_replay_predicts_it_slower_than_ar():
    queue = screened_queue(_screen([*NGRAM, *EAGLE, *SKIP]), load_objective("speedup"), 5)
    names = _names(queue)
    # The winner's family first; the best of each losing method (not its other configs,
    # not its other shape family) once; then the rest by predicted rank.
    assert names == ["ngram1", "ngram2", "ngram3", "eagle_chain", "layer_skip"]
    predicted = {q.params["name"]: q.user_attrs()["screen"]["predicted"]["speedup"]
                 for q in queue}
    assert predicted["eagle_chain"] == 0.80
    # A losing method's only config is measured on every prompt, the others may be pruned.
    unpruned = {q.params["name"] for q in queue if q.user_attrs().get(UNPRUNED_ATTR)}
    assert unpruned == {"eagle_chain", "layer_skip"}


def test_the_winners_come_before_the_losing_methods_when_slots_are_few():
    queue = screened_queue(_screen([*NGRAM, *EAGLE, *SKIP]), load_objective("speedup"), 2)
    assert _names(queue) == ["ngram1", "eagle_chain"]
    queue = screened_queue(_screen([*NGRAM, *EAGLE, *SKIP]), load_objective("speedup"), 1)
    assert _names(queue) == ["ngram1"]


def test_the_documented_default_takes_a_rank_slot_not_a_methods_only_one():
    default = ("vllm_default", {"method": "ngram", "k": 5, "ngram_min": 5}, 1.02)
    rows = [*NGRAM, default, *EAGLE, *SKIP]
    screen = _screen(rows, {"vllm_default": "vllm_ngram"})
    queue = screened_queue(screen, load_objective("speedup"), 5)
    assert _names(queue) == ["ngram1", "ngram2", "vllm_default", "eagle_chain", "layer_skip"]
    attrs = {q.params["name"]: q.user_attrs() for q in queue}
    assert attrs["vllm_default"][BASELINE_ATTR] == "vllm_ngram"
    # With no slot for anything but the representatives, the default replaces the last.
    queue = screened_queue(screen, load_objective("speedup"), 3)
    assert _names(queue) == ["ngram1", "vllm_default", "eagle_chain"]
