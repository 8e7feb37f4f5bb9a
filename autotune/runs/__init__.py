"""A search's run folder: `run.json` (the record), `trials.csv`, `best.json`, the
top-trials tables, and the `exports/` folder written from the run's answer."""
