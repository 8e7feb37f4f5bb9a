"""The replay tier's predictions of the finalists over the whole held-out pool.

The validation measures a random sample of the held-out pool; these predictions give
`autotune.measure.ppi` the rest. They reuse the search's cost parts (measured once on
this machine) and decode the pool's reference continuations once (cached like the
search's). A finalist the replay tier cannot predict (a sampled config, a method
without replay) has no predictions and is judged on its measured sample alone.
"""

from __future__ import annotations

import sys
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING

from autotune.common.errors import AutotuneError
from autotune.common.memory import release_freed_memory
from autotune.measure.paired import PromptPair

if TYPE_CHECKING:
    from collections.abc import Mapping

    from autotune.backends.profile import EngineProfile
    from autotune.schema.config import DecodeConfig
    from autotune.replay.run import Replayer
    from autotune.search.finalists import Finalist
    from autotune.search.objectives import EvalContext
    from autotune.workloads.prompts import Prompt

__all__ = ["predict_pool"]


def predict_pool(ctx: EvalContext, finalists: list[Finalist], pool: list[Prompt],
                 profiles: Mapping[str, EngineProfile] | None = None
                 ) -> dict[str, list[PromptPair]]:
    """Per finalist arm that the replay tier can predict: one predicted pair (its own
    and the AR baseline's decode times and tokens) per pool prompt; priced at an
    engine's own costs where `profiles` holds its rules' (the --target engine's, whose
    race measures in the engine), else at our decoder's."""
    from autotune.schema.config import config_from_mapping
    from autotune.replay import PARTS_FILE, kept, replay_refusal
    from autotune.replay.costs import CostParts, parts_key, stored_parts
    from autotune.replay.reference import cache_dir
    from autotune.replay.run import Replayer

    configs = {f.arm: config_from_mapping(f.params).validate() for f in finalists}
    replayable = {arm: c for arm, c in configs.items() if replay_refusal(c) is None}
    if not replayable or not pool:
        return {}
    parts_path = Path(ctx.replay_parts) if ctx.replay_parts else cache_dir() / PARTS_FILE
    search_replayer = ctx.memo.get("replayer")
    parts: CostParts | None = (search_replayer.parts if search_replayer is not None
                               else stored_parts(parts_path, parts_key(ctx.target, ctx.draft)))
    if parts is None:
        # Measured for the pool beside the search's, never over them.
        parts_path = parts_path.with_name(f"pool-{parts_path.name}")
    print(f"autotune: predicting {len(replayable)} finalists on the {len(pool)} held-out "
          "prompts by replay (their reference continuations are decoded once, then "
          "cached)", file=sys.stderr, flush=True)
    # The screens' kept keys/values and hidden states (their Replayer lives on in their
    # context's memo, which this stage cannot see) serve no pool prompt: every source's
    # go before the pool's references are decoded, and their pages with them (issue 59,
    # item 6). A later use of the screens' Replayer makes them again where it needs them.
    kept.forget_all()
    release_freed_memory()
    pooled = Replayer(ctx.target, ctx.draft, pool, ctx.max_new_tokens, parts_path,
                      parts=parts)
    pooled.engine_profiles.update(profiles or {})
    predicted = _predicted_pairs(pooled, replayable)
    # The replayer (the pool's references, its sources' tables and caches) is gone:
    # its pages go back to the OS, or the race starts from this stage's peak (issue 51).
    release_freed_memory()
    return predicted


def _predicted_pairs(replayer: Replayer, configs: dict[str, DecodeConfig]
                     ) -> dict[str, list[PromptPair]]:
    """Per arm, its predicted pair per pool prompt (only the pairs are kept, not the
    measurements' rounds), in `configs`' order.

    What replay sources keep between configs (`replay.kept`: a prompt's keys/values, its
    hidden states) serves only later configs of the same method over the same prompts.
    So the arms are replayed a method at a time, and what was kept is dropped after each
    method (`predict_pool` drops the screen's first): the stage holds one method's kept
    state at a time, never the screen's beside the pool's.
    A method with a single finalist keeps nothing (nothing would read it); its tables
    cost the same passes either way."""
    from autotune.replay import kept

    by_method: dict[str, list[str]] = {}
    for arm, config in configs.items():
        by_method.setdefault(config.method, []).append(arm)
    predicted: dict[str, list[PromptPair]] = {}
    for arms in by_method.values():
        with kept.suspended() if len(arms) == 1 else nullcontext():
            for arm in arms:
                try:
                    predicted[arm] = [run.pair() for run in replayer.replay(configs[arm]).runs]
                except AutotuneError as exc:
                    print(f"autotune: {arm} is judged on its measured prompts alone ({exc})",
                          file=sys.stderr, flush=True)
        kept.forget_all()
    return {arm: predicted[arm] for arm in configs if arm in predicted}
