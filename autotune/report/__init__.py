"""The interactive report of a search run: study -> panel data -> one self-contained HTML file.

    data = build_report(Path("reports/my-run"))      # ReportData: tables a test can check
    path = write_report(Path("reports/my-run"))      # reports/my-run/report.html

Each panel is one module in `panels/` (`data()` computes its tables from the study and
the run folder's documents, `render()` draws them with plotly); `page.py` collects them
in page order into one page that opens offline. This package reads the run folder.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import optuna
from optuna.storages.journal import JournalFileBackend

from autotune.common.errors import AutotuneError
from autotune.common.files import write_atomically
from autotune.records.profile import PROFILE_FILE
from autotune.report.documents import RunFacts
from autotune.report.page import ReportData, collect, render_report
from autotune.report.panels import OPTIONAL_PANEL_IDS, PANEL_IDS, PANELS
from autotune.records.storage import JOURNAL_NAME, storage_url_shown, storage_from_url

__all__ = ["PANELS", "PANEL_IDS", "OPTIONAL_PANEL_IDS", "ReportData", "build_report", "collect", "render_report",
           "write_report", "REPORT_FILE", "JOURNAL_FILE"]

REPORT_FILE = "report.html"
JOURNAL_FILE = JOURNAL_NAME         # the run folder's default study storage


def _read_json(path: Path, required: bool) -> dict[str, Any] | None:
    """A JSON object from `path`; None when absent and not required."""
    if not path.is_file():
        if required:
            raise AutotuneError(f"{path.parent}: no {path.name} here; is this a run folder "
                                "of `autotune search`?")
        return None
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise AutotuneError(f"cannot read {path}: {str(exc).splitlines()[0]}") from None
    if not isinstance(doc, dict):
        raise AutotuneError(f"{path}: expected a JSON object")
    return doc


def _read_profile(path: Path) -> tuple[Any, str | None]:
    """The parsed hardware profile (None when absent) and why it could not be read: a bad
    profile costs the report one panel's plot, never the report."""
    if not path.is_file():
        return None, None
    try:
        return json.loads(path.read_text(encoding="utf-8")), None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        return None, (str(exc).splitlines() or [type(exc).__name__])[0]


def _opened_for_run(run_dir: Path, storage: str | None, run: RunFacts) -> tuple[Any, str]:
    """The study storage (read only in spirit: nothing is written) and its display name."""
    if storage is not None and "://" in storage:
        return storage_from_url(storage), storage_url_shown(storage)
    path = Path(storage) if storage is not None else run_dir / JOURNAL_FILE
    if not path.is_file():
        # Never let JournalFileBackend create an empty journal where none was.
        recorded = run.storage
        hint = (f"; this run's storage was {recorded}: pass it with --storage"
                if storage is None and recorded is not None and "://" in recorded else "")
        raise AutotuneError(f"no study storage at {path}{hint}")
    try:
        return optuna.storages.JournalStorage(JournalFileBackend(str(path))), str(path)
    except Exception as exc:   # unreadable or corrupt journal
        raise AutotuneError(f"cannot open storage {path}: {str(exc).splitlines()[0]}") from None


def _load_study(storage: Any, shown: str, name: str | None) -> optuna.Study:
    try:
        if not name:
            # An old or hand-made run.json: a storage holding one study is unambiguous.
            names = [s.study_name for s in storage.get_all_studies()]
            if len(names) != 1:
                raise AutotuneError(f"run.json names no study and {shown} holds "
                                    f"{len(names)}: {', '.join(names) or 'none'}")
            name = names[0]
        return optuna.load_study(study_name=str(name), storage=storage)
    except AutotuneError:
        raise
    except KeyError:
        raise AutotuneError(f"study {name!r} not found in {shown}") from None
    except Exception as exc:   # storage unreachable mid-read, corrupt log
        raise AutotuneError(f"cannot read study {name!r} from {shown}: "
                            f"{(str(exc).splitlines() or [type(exc).__name__])[0]}") from None


def build_report(run_dir: Path, storage: str | None = None) -> ReportData:
    """Every panel's data for the run folder `run_dir` (run.json, best.json,
    hardware_profile.json and the study in `storage`, by default `run_dir/study.journal`)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise AutotuneError(f"run folder not found: {run_dir}")
    run_doc = _read_json(run_dir / "run.json", required=True)
    run = RunFacts.read(run_doc)
    try:
        best_doc = _read_json(run_dir / "best.json", required=False)
    except AutotuneError:
        best_doc = None    # best.json is rebuilt from the study; the study is enough
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        opened, shown = _opened_for_run(run_dir, storage, run)
        study = _load_study(opened, shown, run.study)
    profile, problem = _read_profile(run_dir / PROFILE_FILE)
    return collect(study, run_doc, best_doc, profile, problem)


def write_report(run_dir: Path, out: Path | None = None, storage: str | None = None) -> Path:
    """Build and write the report (default `run_dir/report.html`, written atomically)."""
    data = build_report(run_dir, storage)
    path = Path(out) if out is not None else Path(run_dir) / REPORT_FILE
    write_atomically(path, render_report(data))
    return path
