"""Per-category drafters: which member of a per-category `--draft` folder drafts best
for each workload category (the `drafter` knob: `all`, each category's specialist,
`routed`). Drawn only for a study that tuned that knob.

For each drafter value, its best complete trial (by the objective, as the search ranks
them) and that trial's speedup on each category's search prompts: a heatmap of drafter
x category, the best drafter of each category marked. Search-prompt figures pick the
drafter; the Finalists panel gives held-out figures for the finalists."""

from __future__ import annotations

from dataclasses import dataclass

import optuna
import pandas as pd
import plotly.graph_objects as go

from autotune.schema.config import GENERAL_DRAFTER as GENERAL
from autotune.schema.config import ROUTED_DRAFTER as ROUTED
from autotune.report.objective import ObjectiveInfo
from autotune.report.panels.base import Panel
from autotune.report.style import esc, figure, layout, note, num, section
from autotune.report.trials import decoded_config, finite, metrics_of, ranked, trial_label


@dataclass
class Drafters:
    """`frame`: drafter, category, speedup, trial, label, best_in_category (one row per
    drafter value x category of its best trial); `note` says what is missing."""

    frame: pd.DataFrame
    note: str | None = None

    @property
    def winners(self) -> dict[str, str]:
        """Each category's best drafter value."""
        best = self.frame[self.frame["best_in_category"]]
        return dict(zip(best["category"], best["drafter"]))


def data(study: optuna.Study, objective: ObjectiveInfo) -> Drafters | None:
    """None unless some complete trial drafted with a member other than `all`."""
    columns = ["drafter", "category", "speedup", "trial", "label", "best_in_category"]
    best: dict[str, optuna.trial.FrozenTrial] = {}
    for t in ranked(study, objective):                     # best first
        config = decoded_config(t)
        if config is not None and config.drafter not in best:
            best[config.drafter] = t
    if not set(best) - {GENERAL}:
        return None
    rows = []
    for drafter, t in best.items():
        by_category = metrics_of(t).speedup_by_category or {}
        for category, speedup in sorted(by_category.items()):
            rows.append({"drafter": drafter, "category": category, "speedup": finite(speedup),
                         "trial": t.number, "label": trial_label(t), "best_in_category": False})
    frame = pd.DataFrame(rows, columns=columns)
    text = None
    if frame.empty:
        text = "The trials that tuned the drafter recorded no per-category speedups."
    else:
        scored = frame.dropna(subset=["speedup"])
        top = scored.loc[scored.groupby("category")["speedup"].idxmax()]
        frame.loc[top.index, "best_in_category"] = True
    return Drafters(frame, text)


def render(d: Drafters) -> str:
    how = ("Each row is a value of the drafter knob (all: trained on every category; a "
           "category's own specialist; routed: each prompt drafts with its category's), at "
           "its best trial; each cell that trial's speedup on one category's search prompts. "
           "A boxed cell is its category's best. Held-out figures: the Finalists panel.")
    if d.frame.empty:
        return section("drafters", "Drafter per category", how, note(d.note))
    grid = d.frame.pivot(index="drafter", columns="category", values="speedup")
    order = [GENERAL] + sorted(x for x in grid.index if x not in (GENERAL, ROUTED)) + \
        ([ROUTED] if ROUTED in grid.index else [])
    grid = grid.reindex([x for x in order if x in grid.index])
    fig = go.Figure(go.Heatmap(
        z=grid.values, x=list(grid.columns), y=list(grid.index), colorscale="RdYlGn",
        zmid=1.0, text=[[num(v) for v in row] for row in grid.values],
        texttemplate="%{text}", hovertemplate="%{y} on %{x}: %{z:.3f}x<extra></extra>",
        colorbar=dict(title="speedup")))
    for row in d.frame[d.frame["best_in_category"]].itertuples(index=False):
        fig.add_shape(type="rect", xref="x", yref="y", line=dict(color="black", width=2),
                      x0=list(grid.columns).index(row.category) - 0.5,
                      x1=list(grid.columns).index(row.category) + 0.5,
                      y0=list(grid.index).index(row.drafter) - 0.5,
                      y1=list(grid.index).index(row.drafter) + 0.5)
    layout(fig, "category", "drafter")
    trials = d.frame.drop_duplicates("drafter")
    table = "".join(f"<tr><td>{esc(r.drafter)}</td><td>#{r.trial}</td><td>{esc(r.label)}</td></tr>"
                    for r in trials.itertuples(index=False))
    winners = ", ".join(f"{esc(c)}: {esc(w)}" for c, w in sorted(d.winners.items()))
    body = (figure(fig, "fig-drafters") + f"<p>Best drafter per category: {winners}.</p>"
            "<table><tr><th>drafter</th><th>trial</th><th>config</th></tr>"
            f"{table}</table>" + note(d.note))
    return section("drafters", "Drafter per category", how, body)


PANEL = Panel("drafters", lambda i: data(i.study, i.objective), render, optional=True)
