"""The frozen config: the versioned JSON document (`best.json`, `"schema": "autotune.frozen/v6"`;
v1 to v5 still read) a search leaves behind.

It carries the canonical knobs (`params`), what was measured (`metrics`), on what
(`model`, `draft`, `hardware`, `workload`) and by which run (`provenance`), so that
`autotune measure --config`, `generate` and `export` can consume it and a reader can tell
whether a re-measurement is comparable. One module per job; import from the one that owns
the name:

- `schema`: the version ids and their JSON Schemas (`schemas/frozen-v*.schema.json`), the
  method enum filled from the method registry.
- `environment`: the model, hardware and command records, and what changed since.
- `document`: building a document of the current version.
- `schedule`: the optional K-per-batch-size `schedule` and its checks.
- `engines`: the per-engine answers a `--target all` run keeps under `engines`.
- `record`: the typed document and its writer: `FrozenConfig` (every part a declared
  record), `write_frozen`, and `upgrade`, the one place that turns an older version into
  the current one.
- `checks`: reading a file (`load_frozen`, `load_frozen_config`: checked, upgraded, typed;
  `read_parts`) and everything wrong with it (`problems`, for `autotune validate`).
"""
