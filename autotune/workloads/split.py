"""The workload split: search prompts | held-out validation prompts the search never sees.

The held-out part is a pool: the replay tier predicts every pool prompt, and a random
sample of it, balanced by category, is measured (`autotune.measure.ppi` joins the two).
A random sample keeps the prediction-powered estimate unbiased, for the pool and for
each category; the balance gives every large enough category measured prompts of its
own.

`autotune search` validates its finalists on the held-out part; `autotune train-draft`
splits the same workload with the same `--validation` and `--seed` and trains on the
search part only, so a trained drafter never sees a prompt its search validates on.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path
from typing import NamedTuple

from autotune.common.errors import AutotuneError
from autotune.workloads.prompts import (
    Prompt,
    load_workload,
    round_robin,
    split_workload,
    without,
)

# Fewest held-out prompts that give an interval over prompts.
MIN_HELD_OUT = 2
# Held-out prompts the replay tier predicts by default (`--validation-pool`): each costs
# one reference decode (about an eighth of a measured prompt with three finalists),
# and the pool's breadth is what narrows the prediction-powered interval. 80, not 120
# (issue 41: the main job within 10 minutes on 2 cores): 40 fewer reference decodes and
# table passes (about a minute there), for an interval at most ~9% wider where replay
# predicts well (the pool's share of ppi++'s variance grows by 120/80; the measured
# sample's share, the larger one at 16 prompts, is unchanged).
DEFAULT_POOL = 80


class PromptSplit(NamedTuple):
    """The search prompts, the held-out prompts measured (a simple random sample of
    the pool), where they came from (a sentence for the record, "none" when nothing is
    held out) and the held-out pool (the measured prompts among them)."""

    search: list[Prompt]
    held_out: list[Prompt]
    source: str
    pool: list[Prompt]
    # What the replay screens rank configs on: the search prompts first, then more of
    # the search part (never the pool); empty: the search prompts.
    screen: list[Prompt] = []

    @property
    def screened(self) -> list[Prompt]:
        """The screens' prompts (the search prompts when no more were asked for)."""
        return self.screen or self.search


def split_prompts(workload: str, categories: list[str] | None, validation: str, seed: int,
                  prompts: int | None = None, held_out: int | None = None,
                  pool: int | None = None, screen: int | None = None) -> PromptSplit:
    """Split `workload` (after `categories`) by the `validation` spec.

    `validation` a FRACTION: that share of the workload is held out, stratified by
    category and seeded by `seed`, before the search prompts are drawn from the rest;
    a FILE: its prompts are held out and any workload prompt with the same text is
    dropped from the search; `0`: nothing is held out. The search prompts are drawn
    round-robin over categories (`prompts`, None: all); so is the held-out pool
    (`pool`, None: all), and `held_out` of the pool are drawn from it at random, seeded,
    in a random order whose every prefix is a random sample (None: the whole pool).
    `screen`: how many prompts of the search part the replay screens rank on (the
    search prompts are their first; None: the search prompts alone).
    The error messages name the `search` flags, which `train-draft` shares."""
    spec = str(validation)
    loaded = load_workload(workload, categories)
    try:
        fraction: float | None = float(spec)
    except ValueError:
        fraction = None
    if fraction is None:
        if not Path(spec).is_file():
            raise AutotuneError(f"--validation {spec!r} is neither a fraction in [0, 1) nor "
                                "a prompt file")
        held = load_workload(spec, None)
        held = round_robin(held, _count(pool, held))
        if len(held) < MIN_HELD_OUT:
            raise AutotuneError(f"--validation {spec} has {len(held)} prompt; an interval "
                                f"over prompts needs at least {MIN_HELD_OUT}")
        search = without(loaded, held)
        if not search:
            raise AutotuneError(f"every workload prompt is in --validation {spec}: nothing "
                                "is left to search on")
        source = f"{len(held)} prompts of {spec}"
    elif fraction == 0:
        return PromptSplit(round_robin(loaded, _count(prompts, loaded)), [], "none", [])
    else:
        if not 0 < fraction < 1:
            raise AutotuneError(f"--validation {spec}: a fraction lies in [0, 1)")
        search, part = split_workload(loaded, fraction, seed)
        held = round_robin(part, _count(pool, part))
        source = (f"{len(held)} of the {len(part)} prompts of {workload} held out "
                  f"({fraction:g}, stratified by category, seed {seed})")
        if len(held) < MIN_HELD_OUT:
            # One held-out prompt gives no interval, so it could only ever say "do not
            # speculate": search on everything and say the answer is not validated.
            print(f"autotune: warning: {workload} has {len(loaded)} prompts, too few "
                  f"to hold {MIN_HELD_OUT} out at --validation {spec}; the answer will not be "
                  "validated (give more prompts or --validation FILE)",
                  file=sys.stderr, flush=True)
            return PromptSplit(round_robin(loaded, _count(prompts, loaded)), [], "none", [])
    measured = _sample(held, held_out, seed)
    if len(measured) < len(held):
        source += f"; {len(measured)} of them measured (a random sample, seed {seed})"
    screened = round_robin(search, _count(screen, search)) if screen else []
    return PromptSplit(round_robin(search, _count(prompts, search)), measured, source, held,
                       screened)


def resized(split: PromptSplit, pool: int, measured: int, seed: int, why: str
            ) -> PromptSplit:
    """`split` with its held-out pool cut to its first `pool` prompts (the pool is drawn
    round-robin over categories, so they are what a `--validation-pool` of `pool` draws)
    and `measured` of them drawn as `split_prompts` draws them; the search and screen
    prompts unchanged. `why` ends the source sentence ("by --time-budget")."""
    if pool >= len(split.pool) and measured >= len(split.held_out):
        return split
    kept = split.pool[:pool]
    sample = _sample(kept, measured, seed)
    return split._replace(pool=kept, held_out=sample,
                          source=f"{split.source}; cut to a pool of {len(kept)}, "
                                 f"{len(sample)} measured, {why}")


def sample_reserve(split: PromptSplit, seed: int) -> list[Prompt]:
    """The held-out pool's prompts after the measured sample, in the order `_sample`
    draws them (`seed` the split's): what a race under a time budget grows its sample
    into, each prefix of sample + reserve still a random sample of the pool."""
    order = _sample(split.pool, None, seed)
    if order[:len(split.held_out)] != split.held_out:
        return []                    # a sample drawn otherwise: nothing extends it
    return order[len(split.held_out):]


def _sample(pool: list[Prompt], wanted: int | None, seed: int) -> list[Prompt]:
    """The first `wanted` prompts (all for None) of a seeded random order of `pool` that
    is balanced by category: each category's prompts are shuffled and spread evenly
    over the order from a random offset (prompt r of a category of n sits at
    (r + U) / n, U uniform), so every prefix holds each category in proportion to the
    pool (within one prompt, and exactly in expectation) and is a random sample of it.
    The finalists are raced over prefixes, and a larger `wanted` extends a smaller
    one."""
    rng = random.Random(seed)
    groups: dict[str, list[Prompt]] = {}
    for p in pool:
        groups.setdefault(p.category, []).append(p)
    keyed: list[tuple[float, float, Prompt]] = []
    for members in groups.values():
        members = list(members)
        rng.shuffle(members)
        offset = rng.random()
        keyed += [((rank + offset) / len(members), rng.random(), p)
                  for rank, p in enumerate(members)]
    order = [p for _, _, p in sorted(keyed, key=lambda k: (k[0], k[1]))]
    return order if wanted is None else order[:wanted]


def _count(wanted: int | None, available: list[Prompt]) -> int:
    """How many to draw: `wanted`, or all of `available` for None (still round-robin
    over categories, so the order is the same as for any large count)."""
    return wanted if wanted is not None else len(available)
