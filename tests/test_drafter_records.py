"""drafter.json and drafters.json as declared records (`models.drafter_folder`): every
folder train-draft wrote reads, what a drafter *is* hashes as the file holds it (older
folders keep their fingerprints), and a file that does not fit is one error line."""

from __future__ import annotations

import json

import pytest

from autotune.common.errors import AutotuneError
from autotune.models.drafter_folder import (DrafterMeta, EagleGeometry, ExitsGeometry,
                                            MedusaGeometry, read_meta, read_set_index)

EAGLE = {"hidden": 64, "n_heads": 4, "n_kv_heads": 2, "head_dim": 16, "intermediate": 128,
         "eps": 1e-06, "attention_bias": False}
# Written before `attention_bias` (EAGLE) and `medusa_layers` (Medusa) were recorded.
OLD_EAGLE = {k: v for k, v in EAGLE.items() if k != "attention_bias"}
OLD_MEDUSA = {**OLD_EAGLE, "medusa_heads": 3}
EXITS = {"hidden": 64, "eps": 1e-06, "n_layers": 6, "exit_layers": [2, 4], "exit_rank": 8}


def _doc(kind: str, geometry: dict, **extra) -> dict:
    return {"format": "autotune.drafter/v1", "kind": kind, "geometry": geometry,
            "target": {"name": "tiny", "fingerprint": "abc", "path": "/m", "dtype": "float32"},
            "trained_on": {"workload": "w", "prompt_sha256": ["d1", "d2"]},
            "training": {"steps": 3}, "weights_sha256": "ff", **extra}


@pytest.mark.parametrize("kind, geometry, record", [
    ("eagle", EAGLE, EagleGeometry), ("eagle", OLD_EAGLE, EagleGeometry),
    ("medusa", OLD_MEDUSA, MedusaGeometry),
    ("medusa", {**EAGLE, "medusa_heads": 2, "medusa_layers": 1}, MedusaGeometry),
    ("exits", EXITS, ExitsGeometry)])
def test_a_drafter_json_reads_and_hashes_as_written(kind, geometry, record, tmp_path):
    doc = _doc(kind, geometry)
    (tmp_path / "drafter.json").write_text(json.dumps(doc))
    meta = read_meta(tmp_path)
    assert type(meta.geometry) is record and meta.kind == kind
    assert meta.target.fingerprint == "abc" and meta.weights_sha256 == "ff"
    assert meta.trained_on.prompt_sha256 == ["d1", "d2"]
    # The fingerprint's text is the file's own (before the records: these four keys as
    # read, sorted); a default the file lacks is not added to it.
    assert meta.identity_json() == json.dumps(
        {k: doc[k] for k in ("format", "kind", "geometry", "target")}, sort_keys=True)
    assert meta.model_dump(exclude_unset=True) == doc
    if geometry is OLD_EAGLE:
        assert meta.geometry.attention_bias is False
    if geometry is OLD_MEDUSA:
        assert isinstance(meta.geometry, MedusaGeometry) and meta.geometry.medusa_layers == 1


@pytest.mark.parametrize("change, problem", [
    (lambda d: d.update(format="autotune.drafter/v0"), "format: Input should be"),
    (lambda d: d.update(kind="hydra"), "tag 'hydra' .* 'eagle', 'medusa', 'exits'"),
    (lambda d: d.update(kind="eagle", geometry=EXITS), "eagle.geometry.n_heads: Field required"),
    (lambda d: d["geometry"].pop("hidden"), "exits.geometry.hidden: Field required"),
    (lambda d: d["geometry"].update(medusa_heads=2), "exits.geometry.medusa_heads: Extra"),
    (lambda d: d["target"].update(fingerprint=3), "exits.target.fingerprint: Input should"),
])
def test_a_drafter_json_that_does_not_fit_is_one_line(change, problem, tmp_path):
    doc = _doc("exits", dict(EXITS))
    change(doc)
    (tmp_path / "drafter.json").write_text(json.dumps(doc))
    with pytest.raises(AutotuneError, match=problem) as caught:
        read_meta(tmp_path)
    assert str(caught.value).startswith(str(tmp_path / "drafter.json"))
    assert "\n" not in str(caught.value)


def test_the_geometry_training_writes_is_the_one_it_always_wrote() -> None:
    """Key order and values as drafter.json has always had them (train-draft dumps it)."""
    eagle = EagleGeometry(**EAGLE)
    assert list(eagle.model_dump()) == list(EAGLE)
    medusa = MedusaGeometry(**eagle.model_dump(), medusa_heads=3, medusa_layers=1)
    assert list(medusa.model_dump()) == [*EAGLE, "medusa_heads", "medusa_layers"]
    assert ExitsGeometry(**EXITS).model_dump() == EXITS
    assert json.dumps(ExitsGeometry(**EXITS).model_dump()) == json.dumps(EXITS)


@pytest.mark.parametrize("index, problem", [
    ({"format": "autotune.drafter-set/v1", "members": {"all": "all", "chat": "chat"}}, None),
    ({"format": "autotune.drafter-set/v1", "members": {"chat": "chat"}},
     "with an 'all' member"),
    ({"format": "autotune.drafter-set/v1", "members": {"all": "../elsewhere"}},
     "member 'all' must name a sub-folder"),
    ({"format": "autotune.drafter/v1", "members": {"all": "all"}}, "format: Input should be"),
    ({"format": "autotune.drafter-set/v1", "members": {"all": 3}}, "members.all: Input"),
])
def test_a_drafter_set_index_reads_or_is_one_line(index, problem, tmp_path):
    (tmp_path / "drafters.json").write_text(json.dumps(index))
    if problem is None:
        assert read_set_index(tmp_path).members == index["members"]
        return
    with pytest.raises(AutotuneError, match=problem) as caught:
        read_set_index(tmp_path)
    assert "\n" not in str(caught.value)


def test_meta_round_trips_what_it_does_not_read() -> None:
    doc = _doc("eagle", EAGLE, engine_checkpoints=["vllm"])
    assert DrafterMeta.from_json(doc).model_dump(exclude_unset=True) == doc
