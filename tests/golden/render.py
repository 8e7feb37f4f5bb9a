"""Re-render every file a finished run writes from the golden fixture, with the real writers.

Shared by `tests/test_golden_outputs.py` (renders into tmp_path and compares with
`tests/golden/<case>/expected/`) and `tests/golden/make_golden.py` (renders the expected
files).
Both must render the same way, so the one function lives here.

What `render_outputs` writes under its `out` folder (the paths of `expected/`):

- `best.json`, `trials.csv`: `autotune.runs.folder.write_run_files` on the fixture's study,
  with run.json's `frozen` as the context, as the pipeline calls it; in best.json each
  answer's `provenance.created` (the render's own clock) is normalised (`normalise_best`);
  trials.csv's `started` is local time, so everything is rendered in UTC (`_utc`).
- `summary.txt`: `autotune.cli.search.print_summary`'s stdout for that study (the
  per-engine table, top trials, validation tables). Its stderr line (why it stopped, the
  run's seconds) and the time-by-stage lines are timing, not study data, and are left out:
  the outcome is built with no stages, no budget lines, and stdout alone is kept.
- `report.html`: `autotune.report.write_report`, with plotly.js's inlined source replaced
  by a marker (see `normalise_report`).
- `exports/`: what the pipeline writes for this run: `write_engine_exports` (best.json
  answers per engine), else `write_exports` with `ranked_documents` as fallbacks.
- `exports-single/`: `write_exports` on the same best.json with `ranked_documents`, the
  single-engine path (`--target X` runs): its README, fallback choice and launch notes.
- `export-cli/<format>.txt`: `autotune export best.json --format <format>` for every
  format: exit code, stderr and stdout (the files, or the refusal).

Nothing here loads a model: the fixture holds no weights, and rendering needs none (the
model's path in run.json is only text in the outputs).
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import re
import shutil
import time
from pathlib import Path
from typing import Any, Iterator

import optuna

from autotune.cli.main import main as cli_main
from autotune.cli.search import print_summary
from autotune.exports import FORMATS
from autotune.common.files import read_json
from autotune.frozen.engines import engine_answers
from autotune.pipeline.run import SearchOutcome
from autotune.report import REPORT_FILE, write_report
from autotune.runs.engine_exports import write_engine_exports
from autotune.runs.exports_folder import write_exports
from autotune.runs.folder import BEST_FILE, RUN_FILE, TRIALS_FILE, ranked_documents, write_run_files
from autotune.search.objectives import Objective, load_objective
from autotune.search.storage import JOURNAL_NAME, storage_from_url

GOLDEN = Path(__file__).resolve().parent
# One folder per fixture (make_golden.py says what each search was): `all-engines`, every
# engine's answer speculating (HF raced in itself, a K schedule); `no-gain`, answers that
# do not speculate (the refusals, the READMEs, the baseline's best.json).
CASES: tuple[str, ...] = ("all-engines", "no-gain")


def fixture_run(case: str) -> Path:
    """The committed run folder of `case` (inputs only)."""
    return GOLDEN / case / "run"


def expected_outputs(case: str) -> Path:
    """The committed outputs of `case`, rendered by the code of the time."""
    return GOLDEN / case / "expected"


# The fixture's inputs: run.json (the study's name, the objective, the frozen context
# every best.json entry records), the hardware profile the report's hardware panel draws,
# and the study storage, gzipped (its journal repeats each stored record: 2.9 MB as
# written, about 120 kB gzipped). Nothing else is read to render.
FIXTURE_FILES: tuple[str, ...] = (RUN_FILE, "hardware_profile.json")
JOURNAL_GZ = JOURNAL_NAME + ".gz"

# plotly.js (about 4.6 MB) is inlined once in the report's head: it is the installed
# plotly's library, not autotune's output, and would change with a plotly upgrade.
PLOTLY_MARKER = "/* plotly.js (installed plotly's source) left out of the golden file */"
_PLOTLY_SCRIPT = re.compile(r'(<script type="text/javascript">)(.*?)(</script>)', re.DOTALL)

# best.json's provenance.created is the time the document was built: a render's own now.
CREATED_MARKER = "<rendered at: normalised>"
_ISO_SECONDS = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00")

# What print_summary's last line names (the run folder and its files): fixed, since they
# are the pipeline's bookkeeping, not the study's data.
SUMMARY_RUN_DIR = Path("RUN")
SUMMARY_FILES = [RUN_FILE, TRIALS_FILE, BEST_FILE, REPORT_FILE, "exports/"]


def normalise_report(html: str) -> str:
    """The report with plotly.js's inlined source replaced by `PLOTLY_MARKER`.

    Only the first `<script type="text/javascript">` is plotly.js (page.render_report puts
    it in the head before any panel); the figures' own scripts (their data and layout
    JSON) stay as written. Nothing else varies: figure div ids are fixed per panel
    (report/style.py `figure`), the run folder's path is not printed, and the dates shown
    are the study's and run.json's own, stored in the fixture."""
    match = _PLOTLY_SCRIPT.search(html)
    if match is None or len(match.group(2)) < 100_000:
        raise AssertionError("report.html: plotly.js is no longer inlined where expected; "
                             "update normalise_report")
    return html[:match.start(2)] + PLOTLY_MARKER + html[match.end(2):]


def normalise_best(text: str) -> str:
    """best.json with each answer's `provenance.created` (the wall-clock second the
    document was rendered, frozen/document.py) replaced by `CREATED_MARKER`.

    Only those stamps: found by reading the document (the top level's and each engine
    answer's), checked to be ISO seconds in UTC, then replaced as text so the file's
    layout is still compared as written. The validation's own `created` (when the
    finalists were validated, stored in the study) stays."""
    doc = json.loads(text)
    answers = [doc, *(doc.get("engines") or {}).values()]
    for stamp in {str((a.get("provenance") or {}).get("created")) for a in answers}:
        if not _ISO_SECONDS.fullmatch(stamp):
            raise AssertionError(f"best.json: provenance.created {stamp!r} is not ISO "
                                 "seconds in UTC; update normalise_best")
        text = text.replace(f'"created": "{stamp}"', f'"created": "{CREATED_MARKER}"')
    return text


def read_text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


@contextlib.contextmanager
def _utc() -> Iterator[None]:
    """The process's local time zone set to UTC, as where the fixtures were made.

    Optuna's journal keeps each trial's start in UTC and hands it back as naive local
    time (`astimezone().replace(tzinfo=None)`, optuna/storages/journal/_storage.py), so
    trials.csv's `started` column is the reading machine's local time: the same study
    gives another file in another time zone. The render fixes the zone, not the file."""
    before = os.environ.get("TZ")
    os.environ["TZ"] = "UTC"
    time.tzset()
    try:
        yield
    finally:
        if before is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = before
        time.tzset()


@contextlib.contextmanager
def _cwd(folder: Path) -> Iterator[None]:
    before = Path.cwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(before)


def _export_cli(run: Path, fmt: str) -> str:
    """`autotune export best.json --format fmt` as a user sees it: exit code, stderr,
    stdout. Run inside the run folder with a relative path, so messages that name the
    file name no temporary folder."""
    out, err = io.StringIO(), io.StringIO()
    with _cwd(run), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli_main(["export", BEST_FILE, "--format", fmt])
    return f"exit code: {code}\n--- stderr\n{err.getvalue()}--- stdout\n{out.getvalue()}"


def _summary(study: optuna.Study, objective: Objective, run: dict[str, Any]) -> str:
    """print_summary's stdout (its stderr line is the run's time: left out)."""
    outcome = SearchOutcome(reason="budget", run_dir=SUMMARY_RUN_DIR, study=study,
                            objective=objective, finished=len(study.trials),
                            budget=int(run["trials"]), seconds=0.0, files=SUMMARY_FILES)
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        print_summary(outcome)
    return out.getvalue()


def render_outputs(fixture: Path, work: Path) -> Path:
    """Render every output of the fixture run folder `fixture` under `work` (which must
    not exist yet), in UTC (`_utc`), and return `work/out`, laid out as `expected/`."""
    with _utc():
        return _render(fixture, work)


def _render(fixture: Path, work: Path) -> Path:
    run, out = work / "run", work / "out"
    run.mkdir(parents=True)
    for name in FIXTURE_FILES:
        if (fixture / name).is_file():
            shutil.copy2(fixture / name, run / name)
    (run / JOURNAL_NAME).write_bytes(gzip.decompress((fixture / JOURNAL_GZ).read_bytes()))
    out.mkdir()

    doc: dict[str, Any] = json.loads((run / RUN_FILE).read_text(encoding="utf-8"))
    # By name (the preset), not run.json's objective_file: that is a path into the
    # package where the fixture was made.
    objective = load_objective(doc["objective"])
    study = optuna.load_study(study_name=doc["study"],
                              storage=storage_from_url(str(run / JOURNAL_NAME)))
    context = doc["frozen"]

    write_run_files(run, study, objective, context)
    (out / BEST_FILE).write_text(normalise_best(read_text(run / BEST_FILE)), encoding="utf-8")
    shutil.copy2(run / TRIALS_FILE, out / TRIALS_FILE)

    (out / "summary.txt").write_text(_summary(study, objective, doc), encoding="utf-8")

    report = write_report(run)
    (out / REPORT_FILE).write_text(normalise_report(read_text(report)), encoding="utf-8")

    ranked = ranked_documents(study, objective, context)
    if engine_answers(read_json(run / BEST_FILE)):
        write_engine_exports(run / BEST_FILE, out / "exports")
    else:
        write_exports(run / BEST_FILE, out / "exports", ranked)
    write_exports(run / BEST_FILE, out / "exports-single", ranked)

    (out / "export-cli").mkdir()
    for fmt in FORMATS:
        (out / "export-cli" / f"{fmt}.txt").write_text(_export_cli(run, fmt), encoding="utf-8")
    return out


def output_files(folder: Path) -> list[str]:
    """Every file under `folder`, as sorted POSIX paths relative to it."""
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
