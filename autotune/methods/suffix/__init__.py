"""`suffix`: suffix decoding (Oliaro et al., 2024, "SuffixDecoding"; vLLM's `method:
"suffix"`). A suffix tree over this request's prompt and one over earlier requests'
outputs (shared by every request the engine serves) propose the continuation whose
context match scores best; no draft model, no layer access. Runs on Snowflake's own
implementation, `arctic_inference.suffix_decoding`, which vLLM imports; its cache is
the method's state across requests (`SuffixState`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Mapping

from autotune.schema.method_spec import MethodSpec, Preset
from autotune.methods.suffix import checks

if TYPE_CHECKING:
    from autotune.decoding.drafters.base import Drafter
    from autotune.replay.draft_cost import DraftCost

# arctic-inference builds from its sdist (a C++ suffix tree, nanobind); the build
# imports torch, so it runs without build isolation in the environment that has torch.
INSTALL = ("pip install nanobind grpcio-tools cmake ninja && "
           "CMAKE_PREFIX_PATH=$(python -m nanobind --cmake_dir) pip install --no-deps "
           "--no-build-isolation arctic-inference==0.3.0")


def _short(value: Any) -> str:
    """A searched float at three significant digits (`3.53`, not `3.53227449256707`):
    a label names the config, best.json keeps its exact value."""
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def _summary(c: Mapping[str, Any]) -> str:
    cached = c.get("suffix_max_cached_requests")
    return (f"depth={c.get('suffix_max_tree_depth')} "
            f"factor={_short(c.get('suffix_max_spec_factor'))}"
            f" p>={_short(c.get('suffix_min_token_prob'))}"
            + (" prompt-only" if cached == 0 else ""))


def _presets(n_layers: int) -> list[Preset]:
    # PROVENANCE["vllm"].version: vllm/config/speculative.py L537-556 (tree depth 24,
    # 10000 cached requests, spec factor 1.0, min token prob 0.1) and L1733-1735: without
    # num_speculative_tokens suffix decoding drafts up to the tree depth.
    return [Preset("vllm_suffix", "vLLM suffix decoding defaults: num_speculative_tokens="
                   "suffix_decoding_max_tree_depth=24, max_cached_requests=10000, "
                   "max_spec_factor=1.0, min_token_prob=0.1",
                   {"method": "suffix", "k": 24, "suffix_max_tree_depth": 24,
                    "suffix_max_cached_requests": 10000, "suffix_max_spec_factor": 1.0,
                    "suffix_min_token_prob": 0.1, "exit_policy": "fixed"},
                   rank=3, engine="vllm")]


# Its code, imported on first use (drafters, scorers and replay sources import torch;
# this package must not): each loader imports what it returns, so a reader and a tool
# follow it to its definition.
def _drafter() -> type[Drafter]:
    from autotune.methods.suffix.drafter import SuffixDrafter
    return SuffixDrafter


def _scorer() -> Callable[..., Any]:
    from autotune.methods.suffix.agreement import scorer
    return scorer


def _replay() -> Callable[..., Any]:
    from autotune.methods.suffix.replay import source
    return source


def _draft_cost() -> type[DraftCost]:
    from autotune.methods.suffix.replay import SuffixCost
    return SuffixCost


def _shared_state() -> Callable[..., Any]:
    from autotune.methods.suffix.drafter import SuffixState
    return SuffixState


SPEC = MethodSpec(
    "suffix", label="suffix", color="#CC79A7", model_free=True,
    about="suffix decoding: drafts from suffix trees over the prompt and earlier outputs",
    drafter=_drafter, scorer=_scorer, replay=_replay, draft_cost=_draft_cost,
    shared_state=_shared_state, requires=("arctic_inference", INSTALL),
    check_every_config=checks.check_every_config, summary=_summary, presets=_presets)
