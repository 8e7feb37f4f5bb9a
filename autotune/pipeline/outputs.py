"""The files stage: the run files (trials.csv, best.json, run.json), then the report and
the exports of the best config. It runs after a Ctrl-C in an earlier stage too, so
finished work is always on disk. The run files go through `run_folder.write_run_files`,
by attribute: tests/phase_driver.py parks a run there.
"""

from __future__ import annotations

from pathlib import Path

import optuna

from autotune.frozen.record import FrozenContext
from autotune.pipeline.plan import SearchPlan
from autotune.pipeline.progress import warn
from autotune.report import write_report
from autotune.runs import folder as run_folder
from autotune.runs.engine_exports import write_engine_exports
from autotune.runs.exports_folder import write_exports
from autotune.runs.folder import BEST_FILE, ranked_documents

__all__ = ["write_files"]


def write_files(plan: SearchPlan, study: optuna.Study, context: FrozenContext) -> list[str]:
    """The run files, then the report and the exports; what was written of the latter
    two, for the summary's last line."""
    run_folder.write_run_files(plan.run_dir, study, plan.objective, context)
    return _write_outputs(plan, study, context)


def _write_outputs(plan: SearchPlan, study: optuna.Study, context: FrozenContext
                   ) -> list[str]:
    """The report and the exports of the best config, after the study has stopped.

    Neither may lose finished work: a failure here is a warning, the study and the
    run files are already on disk and `autotune report` / `autotune export` can redo
    it."""
    run_dir = plan.run_dir
    written = []
    try:
        write_report(run_dir, storage=plan.storage)
        written.append("report.html")
    except Exception as exc:  # noqa: BLE001 - the study is safe; say why and go on
        warn(f"no report written ({type(exc).__name__}: {exc}); "
             f"retry with: autotune report {run_dir}")
    if (run_dir / BEST_FILE).is_file():
        try:
            names = (write_engine_exports(run_dir / BEST_FILE, run_dir / "exports")
                     if _answers_engines(run_dir / BEST_FILE) else
                     write_exports(run_dir / BEST_FILE, run_dir / "exports",
                                   ranked_documents(study, plan.objective, context)))
            written.append(f"exports/ ({', '.join(names) or 'none: see its README.txt'})")
        except Exception as exc:  # noqa: BLE001 - as above
            warn(f"no exports written ({type(exc).__name__}: {exc}); "
                 f"retry with: autotune export {run_dir / BEST_FILE} --format ...")
    return written


def _answers_engines(best_path: Path) -> bool:
    """Whether the run's best.json holds per-engine answers (`--target all`, validated)."""
    from autotune.common.files import read_json
    from autotune.frozen.engines import engine_answers

    return bool(engine_answers(read_json(best_path)))

