"""Every panel's data for a study (`collect`) and the one self-contained HTML page they
make (`render_report`): plotly.js inlined once in the head, each panel a section drawn by
its own module, nothing that refers to a URL (no CDN, fonts or MathJax)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import optuna
from plotly.offline import get_plotlyjs

from autotune.report.documents import RunFacts, best_record
from autotune.report.objective import ObjectiveInfo, objective_info
from autotune.report.schedule import read_schedule
from autotune.report.panels import PANELS, Inputs
from autotune.report.style import CSS, esc


@dataclass
class ReportData:
    """All panels of one report plus the inputs they came from.

    `panels` maps each panel's field name (its id, `-` read as `_`) to its data, in page
    order; `data.header`, `data.pos_acc` read one."""

    run: RunFacts
    objective: ObjectiveInfo
    panels: dict[str, Any]

    def __getattr__(self, name: str) -> Any:
        panels = self.__dict__.get("panels") or {}
        if name in panels:
            return panels[name]
        raise AttributeError(f"{type(self).__name__} has no panel or attribute {name!r}")

    @property
    def panel_ids(self) -> tuple[str, ...]:
        """The ids of the panels this page draws, in page order (every panel but the
        optional ones without data)."""
        return tuple(p.id for p in PANELS if p.shows(self.panels.get(p.field)))


def collect(study: optuna.Study, run_doc: Mapping[str, Any] | None = None,
            best_doc: Mapping[str, Any] | None = None, profile: Any = None,
            profile_problem: str | None = None) -> ReportData:
    """Every panel's data for `study` (run_doc / best_doc: the run folder's run.json and
    best.json as parsed, None when absent; profile: its parsed hardware_profile.json,
    None when absent, with `profile_problem` saying why it could not be read)."""
    run, best = RunFacts.read(run_doc), best_record(best_doc)
    inputs = Inputs(study, objective_info(study, run, best), run, best,
                    read_schedule(best_doc), profile, profile_problem)
    return ReportData(run, inputs.objective,
                      {panel.field: panel.collect(inputs) for panel in PANELS})


def render_report(data: ReportData) -> str:
    """The whole report as one self-contained HTML page (plotly.js inlined once)."""
    body = "\n".join(panel.render(data.panels[panel.field]) for panel in PANELS
                     if panel.shows(data.panels[panel.field]))
    title = f"autotune report: {data.header.study}"
    # PlotlyConfig before plotly.js keeps it from looking for MathJax anywhere.
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
            f"<title>{esc(title)}</title>\n<style>{CSS}</style>\n"
            "<script>window.PlotlyConfig = {MathJaxConfig: 'local'};</script>\n"
            f"<script type=\"text/javascript\">{get_plotlyjs()}</script>\n"
            f"</head>\n<body>\n<main>\n{body}\n</main>\n</body>\n</html>\n")
