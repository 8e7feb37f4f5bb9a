"""Trained heads (eagle, medusa): the training forward is the drafting pass; greedy
output equals greedy AR token for token for chains under every exit policy and for
dynamic and static trees, with and without an EOS; sampling keeps the target's law;
the folder round-trips; bad inputs are refused in one line."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import test_sampling_e2e as e2e
import torch
from tiny import one_thread, tiny_llama, tiny_loaded  # noqa: F401

from autotune.common.errors import AutotuneError
from autotune.schema.config import DecodeConfig, config_from_mapping
from autotune.decoding.decoder import SpeculativeDecoder
from autotune.decoding.drafters.base import TokenChooser
from autotune.methods.eagle.drafter import EagleDrafter
from autotune.models.drafter_folder import DrafterMeta
from autotune.models.trained import trained_draft
from autotune.training.data import Sequence_
from autotune.training.kinds import new_head
from autotune.training.loop import TrainSettings, split_heldout, train_head

EOS = 52
MAX_NEW = 24
PROMPTS = [[1, 2, 3, 4, 1, 2, 3, 4, 1, 2], [7, 8, 9], [30, 31, 32, 33, 34, 35, 30, 31]]
POLICIES = {
    "fixed": dict(exit_policy="fixed", k=3),
    "confidence": dict(exit_policy="confidence", k=5, gamma=0.4),
    "adaptive": dict(exit_policy="adaptive", k=6, gamma=0.5),
    "heuristic": dict(exit_policy="heuristic", k=2),
}
TREES = {
    "dynamic": dict(exit_policy="fixed", tree_width=3, tree_depth=3, tree_tokens=8),
    "static": dict(exit_policy="fixed", tree_choices=[[0], [1], [0, 0], [0, 1], [1, 0],
                                                      [0, 0, 0]]),
}


def _sequences(target, n: int = 16, new: int = 30) -> list[Sequence_]:
    """Greedy continuations of seeded random prompts with their target features."""
    gen = torch.Generator().manual_seed(0)
    decoder = SpeculativeDecoder(target, DecodeConfig())
    out = []
    for i in range(n):
        prompt = torch.randint(1, 60, (6,), generator=gen).tolist()
        ids = prompt + decoder.generate(prompt, new, time.perf_counter).tokens
        with torch.inference_mode():
            _, features = target.forward.forward_features(
                torch.tensor([ids]), target.forward.new_cache(1, len(ids)))
        out.append(Sequence_(torch.tensor(ids), features[0].clone(), len(prompt), "c", str(i)))
    return out


def train_steps(head, kind: str, target, train: list[Sequence_], held: list[Sequence_],
                tmp: Path, steps: int, lr: float):
    """`steps` optimiser steps of 256 positions, no time limit in play, no checkpoint."""
    return train_head(head, kind, target.forward, train, held,
                      TrainSettings(kind, seconds=600, lr=lr, batch_tokens=256,
                                    max_steps=steps, eval_s=1e9, checkpoint_s=1e9),
                      tmp, {"kind": kind}, lambda line, final: None)


def _trained(target, kind: str, steps: int, tmp: Path):
    """A head trained for `steps` steps (partly trained: it drafts well, not perfectly)."""
    head, geometry = new_head(kind, target.forward, 3)
    if steps:
        train, held = split_heldout(_sequences(target), 0)
        train_steps(head, kind, target, train, held, tmp, steps, lr=3e-3)
    meta = DrafterMeta.from_json({"format": "autotune.drafter/v1", "kind": kind,
                                  "geometry": geometry, "target": {"name": target.name}})
    return trained_draft(head, meta, target, f"{kind}:test", str(tmp))


@pytest.fixture(scope="module", params=[None, EOS], ids=["no-eos", "eos"])
def target(request):
    return tiny_llama(seed=3, layers=4, eos=request.param, scale=4.0)


@pytest.fixture(scope="module", params=["eagle", "medusa"])
def drafter(request, target, tmp_path_factory):
    return _trained(target, request.param, 40, tmp_path_factory.mktemp(request.param))


def _greedy(target, config, draft, prompt):
    return SpeculativeDecoder(target, config, draft).generate(prompt, MAX_NEW,
                                                              time.perf_counter)


@pytest.mark.parametrize("shape", [*POLICIES, *TREES])
def test_greedy_output_equals_greedy_ar(target, drafter, shape):
    knobs = POLICIES.get(shape) or TREES[shape]
    config = config_from_mapping({"method": drafter.kind, **knobs})
    drafted = accepted = rejected = 0
    for prompt in PROMPTS:
        ar = _greedy(target, DecodeConfig(), None, prompt).tokens
        gen = _greedy(target, config, drafter, prompt)
        assert gen.tokens == ar
        for r in gen.rounds:
            drafted += r.drafted
            accepted += r.accepted
            rejected += r.accepted < r.drafted
    # The check has teeth: drafts were made, some accepted and some rejected.
    assert drafted and accepted and rejected


def test_eagle_training_forward_is_the_drafting_pass(target, tmp_path):
    """The head's training forward over pairs (feature j, token j+1) gives the features
    its drafting pass (the compact forward over its layer, with a cache) gives."""
    draft = _trained(target, "eagle", 0, tmp_path)
    seq = _sequences(target, n=1)[0]
    head, fw = draft.hf_model, target.forward
    t = seq.ids.shape[0] - 1
    with torch.no_grad():
        trained = head(seq.features[None, :-1], torch.nn.functional.embedding(
            seq.ids[None, 1:], fw.embed), fw.cos[:t], fw.sin[:t], fw.scaling)
    drafter = EagleDrafter(draft.forward, 64, TokenChooser(0.0, 1.0, 64, None))
    drafter.target_features(seq.features[None, :-1])
    with torch.inference_mode():
        last = drafter._catch_up(seq.ids[None])
    torch.testing.assert_close(last[0, 0], trained[0, -1], atol=1e-5, rtol=1e-4)


def test_training_lowers_the_loss_and_raises_agreement(target, tmp_path, monkeypatch):
    import autotune.training.teacher as teacher
    from autotune.training.kinds import kind_loss
    monkeypatch.setattr(teacher, "CE_POSITIONS", 10**6)  # every row: a deterministic loss
    head, _ = new_head("eagle", target.forward, 3)
    train, held = split_heldout(_sequences(target), 0)
    objective = kind_loss("eagle")(head, teacher.Teacher(target.forward))
    before = objective.top1_agreement(train)
    with torch.no_grad():
        loss_before = float(objective.loss(train))
    result = train_steps(head, "eagle", target, train, held, tmp_path, 60, lr=3e-3)
    with torch.no_grad():
        assert float(objective.loss(train)) < 0.95 * loss_before
    after = objective.top1_agreement(train)
    assert after[0] / after[1] > before[0] / before[1]
    assert 0.0 <= result.heldout_top1 <= 1.0 and result.heldout_positions > 0


def test_a_checkpoint_resumes_where_it_stopped(target, tmp_path):
    head, _ = new_head("medusa", target.forward, 2)
    train, held = split_heldout(_sequences(target), 0)
    settings = TrainSettings("medusa", 600, batch_tokens=256, max_steps=5, eval_s=1e9,
                             checkpoint_s=1e9)
    first = train_head(head, "medusa", target.forward, train, held, settings, tmp_path,
                       {"run": 1}, lambda line, final: None)
    assert (tmp_path / "checkpoint.pt").is_file() and not first.resumed
    again, _ = new_head("medusa", target.forward, 2)
    settings.max_steps = 8
    second = train_head(again, "medusa", target.forward, train, held, settings, tmp_path,
                        {"run": 1}, lambda line, final: None)
    assert second.resumed and second.steps == 8
    other, _ = new_head("medusa", target.forward, 2)
    with pytest.raises(AutotuneError, match="another training run"):
        train_head(other, "medusa", target.forward, train, held, settings, tmp_path,
                   {"run": 2}, lambda line, final: None)


@pytest.mark.parametrize("kind", ["eagle", "medusa"])
def test_sampling_keeps_the_target_distribution(kind, tmp_path):
    """As test_sampling_e2e: the law of tokens 2-3 over N seeded runs against the
    target's exact law, with a power check against a verifier that accepts every draft."""
    model = e2e.llama_model(seed=3, layers=4, vocab=e2e.V, scale=3.0)
    with torch.no_grad():
        model.lm_head.weight.mul_(4.0)
    target = tiny_loaded(model)
    draft = _trained(target, kind, 0, tmp_path)
    with torch.no_grad():       # a head that differs from the target: some rejections
        for p in draft.hf_model.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=torch.Generator().manual_seed(1)))
    p1, p2, p3 = e2e._target_tables(target.hf_model)
    law = e2e._law_of_positions_2_3(p1, p2, p3)
    bound = e2e._null_bound(law, e2e.N)
    q2 = torch.stack([_first_draft_q(target, draft, a) for a in range(e2e.V)])
    assert e2e._tv(law, e2e._law_of_positions_2_3(p1, q2, p3)) > 2 * bound
    config = DecodeConfig(method=kind, k=3, temperature=1.0)
    empirical, first_rounds = e2e._run(target, config, draft=draft)
    assert all(r is not None and r.drafted == 1 for r in first_rounds)
    accepted = sum(r.accepted for r in first_rounds)
    assert 0.05 * e2e.N < accepted < 0.95 * e2e.N
    tv = e2e._tv(law, empirical)
    assert tv < bound, f"TV {tv:.4f} >= bound {bound:.4f}"


@torch.inference_mode()
def _first_draft_q(target, draft, a: int) -> torch.Tensor:
    """q(t2 | t1 = a) [V]: the head's first draft after the prompt and token a."""
    seq = torch.tensor([e2e.PROMPT + [a]])
    _, features = target.forward.forward_features(seq[:, :-1],
                                                  target.forward.new_cache(1, 16))
    if draft.kind == "eagle":
        drafter = EagleDrafter(draft.forward, 16, TokenChooser(1.0, 1.0, e2e.V, None))
        drafter.target_features(features)
        logits = target.forward.head_logits(drafter._catch_up(seq))[0, -1]
    else:
        transformed = draft.hf_model(features[:, -1:])[0, 0, 0]
        logits = target.forward.head_logits(transformed[None, None])[0, 0]
    return torch.softmax(logits.double(), -1)


def test_wrong_drafts_are_refused_in_one_line(target, tmp_path):
    eagle = _trained(target, "eagle", 0, tmp_path)
    with pytest.raises(AutotuneError, match="needs a trained medusa drafter"):
        SpeculativeDecoder(target, DecodeConfig(method="medusa"), eagle)
    with pytest.raises(AutotuneError, match="needs a draft model"):
        SpeculativeDecoder(target, DecodeConfig(method="draft_model"), eagle)
    with pytest.raises(AutotuneError, match="needs a draft model|--draft"):
        SpeculativeDecoder(target, DecodeConfig(method="eagle"), None)
    with pytest.raises(AutotuneError, match="batch size 1"):
        from autotune.decoding.batched import BatchedDecoder
        BatchedDecoder(target, DecodeConfig(method="eagle"), eagle)
    medusa = _trained(target, "medusa", 0, tmp_path / "m")
    deep = config_from_mapping({"method": "medusa", "tree_width": 2, "tree_depth": 4,
                                "exit_policy": "fixed"})
    with pytest.raises(AutotuneError, match="Medusa heads"):
        SpeculativeDecoder(target, deep, medusa).generate([1, 2], 8, time.perf_counter)


def test_training_data_is_cached_with_its_features(target, tmp_path, monkeypatch):
    """Continuations and features are made once (the features the generation's own
    passes computed equal one full pass over the sequence); a second call reads them
    back (no target pass) and a corrupted file is rebuilt."""
    import autotune.training.data as data
    from autotune.workloads.prompts import Prompt

    monkeypatch.setenv("AUTOTUNE_CACHE", str(tmp_path))
    prompts = [Prompt(" ".join(f"t{(5 * i + j) % 60 + 1}" for j in range(5)), "c", f"p{i}")
               for i in range(3)]
    first = data.training_sequences(target, prompts, 8)
    for seq in first:
        with torch.inference_mode():
            _, full = target.forward.forward_features(
                seq.ids[None], target.forward.new_cache(1, seq.ids.shape[0]))
        torch.testing.assert_close(seq.features, full[0], atol=1e-4, rtol=1e-4)
    monkeypatch.setattr(data, "_generate", lambda *a: (_ for _ in ()).throw(AssertionError))
    again = data.training_sequences(target, prompts, 8)
    for a, b in zip(first, again):
        assert a.ids.tolist() == b.ids.tolist()
        torch.testing.assert_close(a.features, b.features, rtol=0, atol=0)
    (cached,) = (tmp_path / "train").glob("*.pt")
    cached.write_bytes(b"not a torch file")
    monkeypatch.undo()
    monkeypatch.setenv("AUTOTUNE_CACHE", str(tmp_path))
    rebuilt = data.training_sequences(target, prompts, 8)
    assert [s.ids.tolist() for s in rebuilt] == [s.ids.tolist() for s in first]
