"""Which drafter drafts: the member of a per-category drafter set that a config's
`drafter` knob names for a prompt of a given category."""

from __future__ import annotations

from autotune.common.errors import AutotuneError
from autotune.models.drafter_folder import GENERAL, ROUTED
from autotune.models.loading import LoadedModel
from autotune.models.trained import DrafterSet


def pick_drafter(draft: LoadedModel | None, drafter: str, category: str | None = None
                 ) -> LoadedModel | None:
    """The draft that drafts under `drafter` (the config's knob) for a prompt of
    `category`: a DrafterSet's member (`routed`: the category's own, `all` where it has
    none or no category is known), else `draft` itself, which only `all` may name."""
    if not isinstance(draft, DrafterSet):
        if drafter != GENERAL:
            raise AutotuneError(f"drafter={drafter} names a member of a per-category drafter "
                                "folder: pass --draft DIR from autotune train-draft "
                                "--per-category")
        return draft
    if drafter == ROUTED:
        return draft.members.get(category or GENERAL, draft.members[GENERAL])
    if drafter not in draft.members:
        raise AutotuneError(f"drafter={drafter} is not in {draft.path} (it holds "
                            f"{', '.join(draft.drafter_choices())})")
    return draft.members[drafter]
