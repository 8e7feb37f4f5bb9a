"""What a run keeps, readable without the code that made it (issue 62).

The search writes these records into its study and run folder; the run folder's
writers, the exporters and the report read them back here, so a reader of a run needs
no measuring, searching or decoding code (`tests/test_report_reads_records.py` holds the
report to that, and `pyproject.toml`'s import contract forbids the edge):

- `summary`: one measurement's figures (`MeasurementSummary`: `measure --json`, a
  trial's `metrics`);
- `trial`: a trial's user attributes (`TrialRecord`);
- `validation`, `validation_parts`, `validation_upgrade`: the race's record
  (`ValidationRecord`), its parts and the one upgrader of its older versions;
- `ranking`: the order of complete trials; `answer`: what the run recommends, the one
  rule best.json, the exports and the report follow;
- `storage`: where a study lives (an Optuna storage by URL or journal path);
- `objective`: what a study optimised (an objective file, read);
- `profile`: the hardware profile's file and what is read off it.

Torch-free; optuna and pydantic only.
"""
