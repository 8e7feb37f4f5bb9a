"""The run folder's documents as the report reads them (`report.documents`): run.json as
`RunFacts` and best.json as its `FrozenConfig`, each part that reads kept and each part
that does not left out, so a hand-edited file costs the report a fact, never the page."""

from __future__ import annotations

from autotune.report.documents import RunFacts, best_record


def test_run_facts_keep_what_reads_and_drop_a_value_of_another_type() -> None:
    facts = RunFacts.read({"study": "s", "prompts": "twenty", "n_layers": True, "sampler": "tpe"})
    assert facts.study == "s"
    # Strict: text is not a count and a flag is not a layer count (read as absent).
    assert facts.prompts is None and facts.n_layers is None
    # Undeclared keys stay as written, for the header's tables.
    assert facts.to_json() == {"study": "s", "sampler": "tpe"}
    assert RunFacts.read(None) == RunFacts()


def test_best_record_keeps_the_parts_that_read() -> None:
    best = best_record({"schema": "autotune.frozen/v5", "params": {"method": "ngram", "k": 3},
                        "model": {"id": "m", "n_layers": 12},
                        "hardware": {"threads": "many"},
                        "objective": {"name": "latency", "metrics": ["latency_ms_per_token"]}})
    assert best.model is not None and best.model.n_layers == 12
    assert best.hardware is None                     # its one bad value costs only that part
    assert best.config.method == "ngram" and best.config.k == 3
    assert best.objective is not None and best.objective.metrics == ["latency_ms_per_token"]


def test_best_record_of_an_older_version_is_upgraded_and_of_an_unknown_one_is_empty() -> None:
    old = best_record({"schema": "autotune.frozen/v2", "params": {"method": "ngram", "k": 2}})
    assert old.config.engine == "autotune"           # v2 had no engine: autotune's own rules
    assert best_record({"schema": "autotune.frozen/v99", "params": {"k": 2}}) == best_record(None)
    assert "config" not in best_record(None).model_fields_set
