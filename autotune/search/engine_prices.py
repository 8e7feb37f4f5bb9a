"""`--target all`: each engine that runs here prices its screen's candidates at its own
costs (issue 60).

Before the engines' screens, every engine raced in itself on this machine (vLLM's CPU
build, llama-server, HF `generate()`) has its cost profile (`backends.profile`) loaded
from the run folder or the cache folder, or measured in the engine now
(`backends.profiling`) and kept in both; the search's replayer then prices that
engine's configs and their baseline with it (`Replayer.engine_profiles`). An engine that
cannot run here (a GPU engine) keeps our decoder's prices, and its replay notes say so.

`profile_seconds` prices a profile not yet measured for a time budget's plan: each
profiled config is an engine started (its start-up as this machine measured it) and a
few short decodes.
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

from autotune.backends import BACKEND_RECORDS, BackendUnavailable, engine_cost, open_backend
from autotune.backends.profile import (PROFILES_FILE, EngineProfile, ProfileKey,
                                       load_profile, profile_file, store_profile,
                                       stored_keys)
from autotune.backends.profiling import (LEAST_TOKENS, STEPS_PER_POINT, profile_ks,
                                         measure_profile, profile_runs)
from autotune.backends.startup import machine_threads
from autotune.common.errors import AutotuneError
from autotune.schema.engines import rules_for

if TYPE_CHECKING:
    from autotune.measure.paired import PromptPair
    from autotune.replay.costs import CostParts
    from autotune.search.finalists import Finalist
    from autotune.search.objectives import EvalContext
    from autotune.workloads.prompts import Prompt

__all__ = ["ENGINE_PRICES", "EnginePrices", "cached_engine", "engine_pool_predictions", "price_engines", "profile_key", "profile_seconds"]

# Decodes per profiled config: a warm-up and three timed ones.
_DECODES = 4
# Where a search keeps its `EnginePrices` (its context's memo).
ENGINE_PRICES = "engine_prices"


@dataclass(frozen=True)
class EnginePrices:
    """The engines' profiles a search measured or loaded, and the replay cost parts
    they were installed beside (what a later replayer over other prompts needs)."""

    profiles: dict[str, EngineProfile]
    parts: "CostParts"


def _version_mode(engine: str, model_spec: str) -> tuple[str, str, int]:
    """(release, mode, threads) the engine's start-ups are recorded under, where its
    backend records them; transformers' release, eager, torch's threads for HF."""
    record = BACKEND_RECORDS.get(engine)
    if record is not None and record.startup is not None:
        key = record.startup(model_spec)
        return key.version, key.mode, key.threads
    try:
        version = metadata.version("transformers")
    except metadata.PackageNotFoundError:
        version = "unknown"
    import torch
    return version, "eager", torch.get_num_threads()


def profile_key(engine: str, model_spec: str, device: str, context: int) -> ProfileKey:
    version, mode, threads = _version_mode(engine, model_spec)
    return ProfileKey(engine, version, mode, threads, device, model_spec, context)


def cached_engine(engine: str, model_spec: str) -> bool:
    """Whether the cache folder holds a profile of `engine` on `model_spec` in this
    release and mode (at some context): a plan then prices none to measure."""
    record = BACKEND_RECORDS.get(engine)
    if record is not None and record.startup is not None:
        key = record.startup(model_spec)
        prefix = f"{engine} {key.version} {key.mode} threads={key.threads} "
    else:
        prefix = f"{engine} "
    return any(text.startswith(prefix) and f" {model_spec} context=" in text
               for text in stored_keys(profile_file()))


def profile_seconds(engine: str, model_spec: str, ar_s: float) -> float:
    """A profile of `engine` on `model_spec` measured now, estimated: each config's
    engine started and its decodes (tokens at the engine's cost per token over our AR
    token, `engine_cost`).

    A compiled engine's start is priced cold, at the larger of its recorded start-up and
    its prior: a profile is measured once per machine and key, and its configs are ones
    the engine has not compiled before. vLLM's compiled CPU build recorded 12-19 s
    start-ups for engines its compile cache knew, and its first profile took 375 s, 94 s
    a config (issue 60: a `--target vllm` run passed its 600 s budget by 160 s)."""
    cost = engine_cost(engine, model_spec)
    ks = profile_ks(engine)
    tokens = sum(_DECODES * max(LEAST_TOKENS, STEPS_PER_POINT * (k + 1)) for k in (0, *ks))
    start = cost.start_seconds(ar_s)
    if _version_mode(engine, model_spec)[1] == "compiled":
        start = max(start, cost.start_tokens * ar_s)
    return profile_runs(engine) * start + tokens * cost.token_ratio * ar_s


def _context(ctx: "EvalContext") -> int:
    """Tokens cached when a typical step runs (a search prompt's median length, chat
    template included, and half the tokens decoded), rounded up to a power of two (at
    least 64): a step's cost grows slowly with it, and another workload of about the
    same lengths reuses the profile."""
    from autotune.workloads.prompts import encode_prompt
    lengths = [len(encode_prompt(ctx.target.tokenizer, p)) for p in ctx.prompts]
    typical = int(statistics.median(lengths)) + ctx.max_new_tokens // 2 if lengths else 128
    return max(64, 1 << max(typical - 1, 1).bit_length())


def _note(text: str) -> None:
    print(f"autotune: {text}", file=sys.stderr, flush=True)


def price_engines(ctx: "EvalContext", engines: Sequence[str], model_spec: str,
                  draft_spec: str | None, run_dir: Path | None) -> EnginePrices | None:
    """Each of `engines`' profile (loaded, or measured in the engine now), kept in
    `run_dir` and the cache folder, and installed on the search's replayer under the
    rules its configs carry (`rules_for`): they are priced at its own costs from now
    on. An engine that cannot be profiled here keeps our decoder's prices (one line
    says why). None without engines."""
    from autotune.search.evaluation import replayer

    if not engines:
        return None
    context = _context(ctx)
    device = str(ctx.target.device)
    paths = ([run_dir / PROFILES_FILE] if run_dir is not None else []) + [profile_file()]
    ids = ctx.target.tokenizer(ctx.prompts[0].text)["input_ids"] if ctx.prompts else []
    profiles: dict[str, EngineProfile] = {}
    for engine in engines:
        key = profile_key(engine, model_spec, device, context)
        profile = load_profile(key, paths)
        if profile is None:
            try:
                profile = _measure(ctx, engine, key, ids, model_spec, draft_spec)
            except (AutotuneError, OSError, ValueError) as exc:
                _note(f"{engine}: its cost profile could not be measured ({exc}); its "
                      "screen prices at autotune's decoder's costs")
                continue
        store_profile(profile, paths)
        # Under the rules its configs are screened by (vLLM on a CPU: `vllm_v1`).
        profiles[rules_for(engine, ctx.target.device.type)] = profile
        widest = int(profile.verify_curve[-1][0])
        drafter = next(iter(profile.draft_ms), "")
        _note(f"{engine}'s own costs (measured in {engine}): AR {profile.ar_ms:.1f} "
              f"ms/step, a speculative step verifying {widest} tokens "
              f"{profile.step_ms(widest, drafter):.1f} ms")
    search = replayer(ctx)
    search.engine_profiles.update(profiles)
    return EnginePrices(profiles, search.parts)


def _measure(ctx: "EvalContext", engine: str, key: ProfileKey, ids: list[int],
             model_spec: str, draft_spec: str | None) -> EngineProfile:
    """`engine`'s profile measured now through its own backend."""
    ks = profile_ks(engine)
    _note(f"measuring {engine}'s own step costs at context {key.context} "
          f"({profile_runs(engine)} configs, k up to {max(ks)})")
    try:
        backend = open_backend(engine, ctx.target, ctx.draft, model_spec, ctx.prompts[:1],
                               key.context + STEPS_PER_POINT * (max(ks) + 1) + LEAST_TOKENS,
                               (), draft_spec)
    except BackendUnavailable as exc:
        raise AutotuneError(str(exc)) from None
    try:
        return measure_profile(backend, key, ids, log=_note)
    finally:
        backend.close()


def engine_pool_predictions(ctx: "EvalContext", finalists: Sequence["Finalist"],
                            pool: Sequence["Prompt"], prices: EnginePrices | None
                            ) -> dict[str, list["PromptPair"]]:
    """Per engine finalist whose prices are its engine's own (`prices`, what
    `price_engines` gave: a profile that measured its drafter), one predicted pair per
    pool prompt at those prices (the pool's references are cached by the pool's own
    prediction). What `engine_screens.predicted_behind` may leave out on; none for the
    rest, nor without `prices`."""
    from autotune.replay.engine_prices import prices_for
    from autotune.replay.run import Replayer
    from autotune.schema.config import config_from_mapping
    from autotune.search.finalists import OWN_ENGINE

    if prices is None or not prices.profiles or not pool:
        return {}
    configs = {}
    for f in finalists:
        if f.engine == OWN_ENGINE:
            continue
        config = config_from_mapping(f.params).validate()
        if prices_for(prices.profiles, config) is not None and config.greedy:
            configs[f.arm] = config
    if not configs:
        return {}
    pooled = Replayer(ctx.target, ctx.draft, list(pool), ctx.max_new_tokens,
                      Path("unused"), parts=prices.parts)
    pooled.engine_profiles.update(prices.profiles)
    predicted: dict[str, list["PromptPair"]] = {}
    for arm, config in configs.items():
        try:
            predicted[arm] = [run.pair() for run in pooled.replay(config).runs]
        except AutotuneError as exc:
            _note(f"{arm}: not predicted at its engine's prices ({exc})")
    return predicted
