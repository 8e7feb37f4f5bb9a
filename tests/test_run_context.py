"""run.json's `frozen` entry (`FrozenContext`) is best.json's records: built as the
pipeline builds it (model and hardware entries as records or as dicts, the workload and
provenance as records, a file reference given positionally), it writes the JSON run.json
always held, key for key and in order, and reads back from it."""

from __future__ import annotations

import json

from autotune.frozen.document import frozen_config
from autotune.frozen.record import HardwareRecord, ModelRecord
from autotune.runs.record import FileRecord, FrozenContext, Provenance, WorkloadRecord

MODEL = {"id": "tiny", "spec": "/m/tiny", "path": "/m/tiny", "sha256": "a" * 64,
         "hash_of": "weights", "dtype": "float32", "n_layers": 4, "model_type": "llama"}
HARDWARE = {"device": "cpu", "device_name": "x86", "cpu": "x86", "threads": 2,
            "torch": "2.5", "cuda": None, "transformers": "4.4", "python": "3.11"}
# run.json's `frozen` as the dataclasses before these records wrote it.
WRITTEN = {
    "model": MODEL, "draft": None, "hardware": HARDWARE,
    "workload": {"source": "builtin", "categories": None, "prompts": 8,
                 "max_new_tokens": 32, "temperature": 0.0, "top_p": 1.0, "seed": 0,
                 "sha256": "c" * 64},
    "provenance": {"space": {"name": "ngram", "file": "ngram.yaml", "sha256": "b" * 64},
                   "objective": {"name": "latency", "file": "latency.yaml",
                                 "sha256": "d" * 64},
                   "sampler": "tpe", "seed": 0, "study": "s", "storage": "sqlite:///x.db",
                   "command": "autotune search"},
}


def _built(model: object, hardware: object) -> FrozenContext:
    return FrozenContext(
        model=model, draft=None, hardware=hardware,
        workload=WorkloadRecord(source="builtin", categories=None, prompts=8,
                                max_new_tokens=32, temperature=0.0, top_p=1.0, seed=0,
                                sha256="c" * 64),
        provenance=Provenance(
            space=FileRecord("ngram", "ngram.yaml", "b" * 64),
            objective=FileRecord("latency", "latency.yaml", "d" * 64),
            sampler="tpe", seed=0, study="s", storage="sqlite:///x.db",
            command="autotune search"))


def test_the_context_writes_run_json_as_before_from_records_or_dicts():
    text = json.dumps(WRITTEN, indent=2)
    for model, hardware in ((MODEL, HARDWARE),
                            (ModelRecord(**MODEL), HardwareRecord(**HARDWARE))):
        context = _built(model, hardware)
        assert json.dumps(context.to_json(), indent=2) == text
        assert context.model is not None and context.model.n_layers == 4
    assert FrozenContext.of(json.loads(text)).to_json() == WRITTEN


def test_a_frozen_config_carries_the_given_parts_of_the_context():
    record = frozen_config({"method": "ngram", "k": 3}, context=_built(MODEL, HARDWARE))
    doc = record.to_json()
    assert list(doc) == ["schema", "params", "metrics", "model", "draft", "hardware",
                         "workload", "provenance"]
    assert doc["draft"] is None and record.draft is None
    assert list(doc["provenance"])[:3] == ["autotune_version", "created", "space"]
    # A part left out of the context is left out of the config.
    assert "hardware" not in frozen_config({}, context={"model": MODEL}).to_json()
