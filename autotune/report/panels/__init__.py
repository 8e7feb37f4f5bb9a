"""The report's panels, one module each, in page order.

Each module has `data(...)` (its tables, checked by tests on hand-built studies),
`render(data)` (one HTML section) and `PANEL` (both, with how to read its arguments off
the report's inputs). A new panel is a module here plus its entry in `PANELS`. An
optional panel (batch size, drafter per category) is on the page only when the run
folder has its data.
"""

from __future__ import annotations

from autotune.report.panels import (
                                    batch_size,
                                    drafters,
                                    engines,
                                    finalists,
                                    hardware,
                                    header,
                                    history,
                                    importance,
                                    knobs,
                                    layers,
                                    parallel,
                                    pareto,
                                    pos_acc,
                                    predicted,
                                    time_split,
                                    top,
                                    tree,
)
from autotune.report.panels.base import Inputs, Panel

PANELS: tuple[Panel, ...] = (
    header.PANEL, engines.PANEL, finalists.PANEL, batch_size.PANEL, drafters.PANEL, top.PANEL, history.PANEL,
    knobs.PANEL, parallel.PANEL, importance.PANEL, layers.PANEL, tree.PANEL, pos_acc.PANEL,
    time_split.PANEL, hardware.PANEL, predicted.PANEL, pareto.PANEL,
)

# Ids of the panels on every page, in page order (`panel-<id>`); a test and the
# headless-browser check use them. The optional ones join only where they have data
# (`ReportData.panel_ids` lists one page's).
PANEL_IDS: tuple[str, ...] = tuple(panel.id for panel in PANELS if not panel.optional)
OPTIONAL_PANEL_IDS: tuple[str, ...] = tuple(panel.id for panel in PANELS if panel.optional)

__all__ = ["PANELS", "PANEL_IDS", "OPTIONAL_PANEL_IDS", "Inputs", "Panel", "batch_size",
           "drafters", "engines", "finalists", "hardware", "header", "history", "importance", "knobs",
           "layers", "parallel", "pareto", "pos_acc", "predicted", "time_split", "top", "tree"]
