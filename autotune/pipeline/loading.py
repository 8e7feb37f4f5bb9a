"""The search's models: the target, the drafter (checked against the held-out prompts),
the space bound to their depths and cut to the target engine, and the engine's backend
where it measures here."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from autotune.backends import Backend, measured_methods, open_backend
from autotune.common.errors import AutotuneError
from autotune.schema.engines import rules_for

# By attribute (`loading.load_model`), looked up when called: tests put a spy on it.
from autotune.models import loading
from autotune.models.trained import TrainedDraft, load_draft, trained_prompt_digests
from autotune.pipeline.plan import SearchPlan
from autotune.pipeline.progress import note
from autotune.search.targets import engine_space, refusal
from autotune.space import BoundSpace, SearchSpace, load_space
from autotune.space.binding import trained_space_args
from autotune.workloads.prompts import Prompt, load_workload, prompt_digest


@dataclass(frozen=True)
class SearchModels:
    """What the plan's model names load to."""

    target: loading.LoadedModel
    draft: loading.LoadedModel | None      # a draft model, a trained drafter or a set
    space: BoundSpace                      # bound to their depths, cut to the engine
    backend: Backend | None                # the --target engine, where it measures here
    # `--target all`: each answered engine's own space, bound the same way and cut to
    # what that engine runs exactly (empty for `--target X`).
    engine_spaces: dict[str, BoundSpace] = field(default_factory=dict)


def load_models(plan: SearchPlan) -> SearchModels:
    """Load the target and the drafter, refuse a drafter trained on a held-out prompt,
    bind the space and open the target engine's backend (when it measures here)."""
    note(f"loading {plan.model}" + (f" and draft {plan.draft}" if plan.draft else ""))
    target = loading.load_model(plan.model, plan.device, plan.dtype, plan.trust_remote_code)
    draft = load_draft(plan.draft, target, plan.device, plan.dtype, plan.trust_remote_code)
    check_unseen(draft, plan.held_out)   # a trained head must never have seen them
    layered = loading.draft_model(draft)

    def bound(space: SearchSpace, engine: str) -> BoundSpace:
        bound = space.bind(target.n_layers, layered.n_layers if layered is not None else None,
                           draft.trained_kind if draft is not None else None,
                           **trained_space_args(draft))
        # Measured under the rules of the runner the engine uses on this device
        # (vLLM on a CPU: Model Runner V1), refused by what the engine's export cannot carry.
        # Raced in the engine itself here: only what its backend runs there.
        raced = (engine == plan.target and plan.in_engine) or engine in plan.engine_races
        return bound.for_engine(rules_for(engine, target.device.type),
                                refusal(engine, draft is not None,
                                        measured_methods(engine) if raced else None))

    backend = (_open_engine_backend(plan, target, draft) if plan.in_engine else None)
    return SearchModels(target, draft, bound(plan.space, plan.target), backend,
                        {engine: bound(load_space(engine_space(engine)), engine)
                         for engine in plan.engines})


def check_unseen(draft: Any, held_out: list[Prompt]) -> None:
    """Refuse a trained drafter that was trained on one of the search's held-out
    prompts: its validated figure would not be a held-out figure."""
    if not isinstance(draft, TrainedDraft) or not held_out:
        return
    seen = trained_prompt_digests(draft)
    overlap = [p for p in held_out if prompt_digest(p.text) in seen]
    if overlap:
        raise AutotuneError(f"drafter {draft.path} was trained on {len(overlap)} of this "
                            f"search's held-out prompts (e.g. {overlap[0].prompt_id}): train "
                            "it with the same --workload, --validation and --seed as the search")


def _companions(plan: SearchPlan) -> list[Prompt]:
    """At --concurrency N > 1: the workload's prompts that the search never times (not
    searched on, not in the held-out pool), served beside timed ones."""
    if plan.concurrency < 2:
        return []
    used = {p.prompt_id for p in [*plan.prompts, *plan.held_out, *plan.split.pool]}
    return [p for p in load_workload(plan.workload, plan.categories)
            if p.prompt_id not in used]


def _open_engine_backend(plan: SearchPlan, target: Any, draft: Any) -> Backend:
    """The --target engine's backend, sized for every prompt it may be asked to decode."""
    backend = open_backend(plan.target, target, draft, plan.model,
                           [*plan.prompts, *plan.held_out], plan.max_new_tokens,
                           _companions(plan), plan.draft)
    note(f"{'every trial' if plan.fidelity == 'engine' else 'the finalists'} "
         f"measured in {backend.label}")
    return backend
