"""The replay tier: exact greedy acceptance from one reference generation plus a
measured cost model, so a search screens thousands of configs and measures only the few
that matter.

reference.py   the target's greedy continuations, cached and checked
tables.py      teacher-forced draft tables (the methods' table sources build on them)
heads.py       trained heads' tables per round start (eagle's and medusa's sources)
sources.py     what a method's source gives (`MethodSpec.replay`): a prompt's track,
               and what is exact
simulate.py    the decoder's rounds along a reference, for any K, exit policy, tree
draft_cost.py  what a method's draft cost gives (`MethodSpec.draft_cost`)
costs.py       the cost model from measured parts (`CostParts`, `CostModel`)
parts.py       measuring those parts, and their file in the cache
run.py         `Replayer`: configs -> predicted measurements (`"fidelity": "replay"`)
kept.py        what sources keep between configs, one byte limit per kind for the process

Each method's own source and draft cost live in its package
(autotune/methods/<name>/replay.py); no module here branches on a method's name.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from autotune.schema.config import DecodeConfig

# The run folder's measured cost parts (a search's; `measure --replay` keeps its own in
# the cache folder). Here, not in run.py: the CLI names it without importing torch.
PARTS_FILE = "replay_costs.json"


def replay_refusal(config: "DecodeConfig") -> str | None:
    """None, or why `config` cannot be replayed (one line; torch-free, so a command can
    refuse before loading a model)."""
    from autotune.schema.methods import get_method

    if get_method(config.method).replay is None:
        return f"method={config.method} has no replay (it can only be measured)"
    if not config.greedy:
        return ("replay predicts greedy verification only; sampled acceptance is random "
                "(measure it)")
    return None
