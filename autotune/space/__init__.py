"""Search spaces: YAML data -> typed knobs -> Optuna params -> DecodeConfig.

Two steps, one module each: `loading` reads a space file and its includes into checked
entries (one per fixed key or knob, `entries`); `binding` resolves them against a
model's depth and turns trials into configs and back.

A space file (`autotune/space/presets/*.yaml`, package data of `autotune.space.presets`)
names the knobs to tune, their ranges and when each one applies. `load_space` parses and
checks it: every mistake is one AutotuneError line with `file:line: key: problem`.
`SearchSpace.bind` resolves layer candidates against a model's depth, and the resulting
`BoundSpace` turns an Optuna trial into a DecodeConfig (`suggest`, define-by-run), a params
dict back into one (`params_to_config`), a known config into params to enqueue (`encode`),
and lists its grid (for `GridSampler`) and its params (for display).

Layer sets are one 0/1 integer param per candidate layer (`attn_skip[12]`), as Draft &
Verify's Bayesian search encodes them, so every sampler (TPE, GP, CMA-ES, bayes_opt)
treats them as ordinary dimensions. A point the space or DecodeConfig rejects (too many
skipped layers, ngram_min > ngram_max, ...) raises InfeasibleConfig.

File format (top-level keys `description`, `include`, `fixed`, `knobs`):

    include: [_policy, {space: ngram, when: {method: ngram}}]
    fixed: {method: layer_skip}
    knobs:
      k: {type: int, low: 1, high: 12}
      attn_skip: {type: layers, never_skip: [0], max_skipped: 0.6}
      gamma: {type: float, low: 0.05, high: 0.95, when: {exit_policy: [confidence, adaptive]}}

An include with `when:` makes the included space a conditional branch whose params are
namespaced `<space>.<knob>` (several branches share knob names with different ranges);
`as: NAME` names the branch instead of the file's name (one file included twice, or a
fragment `_x` that should not show as `_x.` in param names).

A `switch` knob chooses between branches without setting any config key: its name is
not a DecodeConfig field, its `choices:` are labels that `when:` conditions test, e.g.

    draft_shape: {type: switch, choices: [chain, tree], when: {method: layer_skip}}

`encode` finds a switch's value by trying its choices in order and keeping the first
one under which the whole config is expressible (so list the plainer branch first).

Draft trees: a dynamic tree (tree_width >= 1) whose tree_tokens keeps every drafted
node (tree_tokens >= the pool size, tree_width + (tree_depth-1)*tree_width^2) is the
same tree as tree_tokens=0, and one with 0 < tree_tokens < tree_depth drafts levels the
rerank can never keep (a node's value is at most its parent's, so the kept nodes form a
tree of depth <= tree_tokens: EAGLE-2, Li et al. 2024). Both raise InfeasibleConfig
rather than spend a trial measuring a duplicate or a dominated point (the rule is
`DraftShape.waste`).
"""

from autotune.space.binding import BoundSpace, InfeasibleConfig, SearchSpace
from autotune.space.loading import available_spaces, load_space

__all__ = ["BoundSpace", "InfeasibleConfig", "SearchSpace", "available_spaces", "load_space"]
