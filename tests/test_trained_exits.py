"""Trained S2D exits (`train-draft --kind exits`): adapters on the target's own early
exits, read by `method=sorted_exit` over the target's stack. Greedy output equals greedy
AR for chains under every exit policy and for dynamic and static trees; untrained
adapters (zero `up`) are exactly the plain exits; the training read-out is the
drafting read-out; training lowers the loss; the decoder, the space and the hf export
keep each trained kind to its own method; the CLI writes a folder `measure` drafts with
losslessly, and refuses bad --exit-layers in one line."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import torch
from test_trained_drafters import (
    POLICIES,
    PROMPTS,
    TREES,
    _greedy,
    _sequences,
    train_steps,
)
from tiny import llama_model, one_thread, save_tiny, tiny_loaded  # noqa: F401

from autotune.cli.main import main
from autotune.common.errors import AutotuneError
from autotune.schema.config import DecodeConfig, config_from_mapping
from autotune.schema.methods import get_method
from autotune.decoding.decoder import SpeculativeDecoder
from autotune.methods.sorted_exit.drafter import (
    exit_logits,
    first_confident_exit,
    top1_probability,
)
from autotune.measure.agreement import teacher_forced_agreement
from autotune.models.heads import ExitAdapters
from autotune.models.drafter_folder import DrafterMeta
from autotune.models.trained import exit_adapters, trained_draft
from autotune.space import load_space
from autotune.training.exits_loss import ExitsLoss, default_exit_layers
from autotune.training.kinds import new_head
from autotune.training.loop import split_heldout
from autotune.training.teacher import Teacher

EOS = 52
MAX_NEW = 24
LAYERS = 6
ADAPTED = (2, 4)              # adapter layers of the tests' drafter (of 6)
# Exits at both adapter layers, and one (5) without an adapter: a plain exit.
EXITS = dict(exits=(2, 4, 5), thresholds=(0.5, 0.4))


def _exits(target, steps: int, tmp: Path, layers: tuple[int, ...] = ADAPTED, rank: int = 8):
    """Exit adapters trained for `steps` steps (0: untrained, each the plain exit)."""
    head, geometry = new_head("exits", target.forward, 0, layers, rank)
    if steps:
        train, held = split_heldout(_sequences(target), 0)
        train_steps(head, "exits", target, train, held, tmp, steps, lr=1e-2)
    meta = DrafterMeta.from_json({"format": "autotune.drafter/v1", "kind": "exits",
                                  "geometry": geometry, "target": {"name": target.name}})
    return trained_draft(head, meta, target, "exits:test", str(tmp))


def _peaked(eos: int | None = None):
    """A tiny 6-layer Llama whose LM head is scaled up: its exits' top-1 probabilities
    spread around the thresholds (random init leaves them near uniform)."""
    model = llama_model(seed=3, layers=LAYERS, eos=eos, scale=4.0)
    with torch.no_grad():
        model.lm_head.weight.mul_(4.0)
    return model


@pytest.fixture(scope="module", params=[None, EOS], ids=["no-eos", "eos"])
def target(request):
    return tiny_loaded(_peaked(request.param))


@pytest.fixture(scope="module")
def drafter(target, tmp_path_factory):
    return _exits(target, 40, tmp_path_factory.mktemp("exits"))


@pytest.mark.parametrize("shape", [*POLICIES, *TREES])
def test_greedy_output_equals_greedy_ar(target, drafter, shape):
    knobs = POLICIES.get(shape) or TREES[shape]
    config = config_from_mapping({"method": "sorted_exit", **EXITS, **knobs})
    drafted = accepted = rejected = 0
    exits_taken: set[int] = set()
    for prompt in PROMPTS:
        ar = _greedy(target, DecodeConfig(), None, prompt).tokens
        gen = _greedy(target, config, drafter, prompt)
        assert gen.tokens == ar
        for r in gen.rounds:
            drafted += r.drafted
            accepted += r.accepted
            rejected += r.accepted < r.drafted
            exits_taken.update(r.exit_layers)
    # The check has teeth: drafts were made, some accepted and some rejected, and (where
    # no early EOS cuts the generations short) some left at an adapted exit.
    assert drafted and accepted and rejected
    assert exits_taken & set(ADAPTED) or target.eos_token_ids


def test_trained_adapters_change_the_drafts(target, drafter):
    """The drafter reads its exits through the adapters (else the tests above would
    test the plain exits): the first draft of a round differs somewhere."""
    config = config_from_mapping({"method": "sorted_exit", "exits": (2,), "k": 1,
                                  "exit_policy": "fixed"})
    plain = [r.accepted for p in PROMPTS for r in _greedy(target, config, None, p).rounds]
    trained = [r.accepted for p in PROMPTS for r in _greedy(target, config, drafter, p).rounds]
    assert plain != trained


def test_untrained_adapters_are_exactly_the_plain_exits(target, tmp_path):
    draft = _exits(target, 0, tmp_path)
    adapters = exit_adapters(draft)
    assert isinstance(adapters, ExitAdapters) and adapters.layers == ADAPTED
    forward = target.forward
    ids = torch.tensor([PROMPTS[0]])
    with torch.inference_mode():
        plain = first_confident_exit(forward, forward.begin(ids, forward.new_cache(1, 16)),
                                     (2, 4, 5), (0.5, 0.4, 0.0), top1_probability(64))
        adapted = first_confident_exit(forward, forward.begin(ids, forward.new_cache(1, 16)),
                                       (2, 4, 5), (0.5, 0.4, 0.0), top1_probability(64),
                                       adapters)
    assert torch.equal(plain.logits, adapted.logits)
    assert plain.exit_layers == adapted.exit_layers
    for shape in ("confidence", "dynamic"):
        config = config_from_mapping({"method": "sorted_exit", **EXITS,
                                      **(POLICIES.get(shape) or TREES[shape])})
        for prompt in PROMPTS:
            a = _greedy(target, config, None, prompt)
            b = _greedy(target, config, draft, prompt)
            assert a.tokens == b.tokens
            assert [(r.drafted, r.accepted, r.exit_layers, r.confidences) for r in a.rounds] \
                == [(r.drafted, r.accepted, r.exit_layers, r.confidences) for r in b.rounds]
    # The agreement proxy reads the exits the same way.
    sequences = [(len(p), p + _greedy(target, DecodeConfig(), None, p).tokens)
                 for p in PROMPTS]
    config = config_from_mapping({"method": "sorted_exit", **EXITS})
    assert teacher_forced_agreement(target, config, sequences, draft) == \
        teacher_forced_agreement(target, config, sequences, None)


def test_training_read_out_is_the_drafting_read_out(target, drafter):
    """The loss's exit distribution (teacher.exit_logits over the adapted state) is the
    drafter's (`exit_logits` over the target's pass), at every adapted exit."""
    seq = _sequences(target, n=1)[0]
    objective = ExitsLoss(drafter.hf_model, Teacher(target.forward))
    forward = target.forward
    with torch.no_grad():
        states = objective._exit_states(seq.ids[None])
        for layer in ADAPTED:
            trained = objective.teacher.exit_logits(drafter.hf_model.adapt(layer, states[layer]))
            step = forward.begin(seq.ids[None], forward.new_cache(1, seq.ids.shape[0]))
            forward.run_layers(step, 0, layer)
            drafted = exit_logits(forward, step, layer, drafter.hf_model)
            torch.testing.assert_close(drafted, trained, atol=1e-4, rtol=1e-4)


def test_training_lowers_the_loss_and_raises_agreement(target, tmp_path):
    head, geometry = new_head("exits", target.forward, 0, ADAPTED, 8)
    assert geometry["exit_layers"] == list(ADAPTED) and geometry["n_layers"] == LAYERS
    train, held = split_heldout(_sequences(target), 0)
    objective = ExitsLoss(head, Teacher(target.forward))
    before = objective.top1_agreement(held)
    with torch.no_grad():
        loss_before = float(objective.loss(train))
    result = train_steps(head, "exits", target, train, held, tmp_path, 60, lr=1e-2)
    with torch.no_grad():
        assert float(objective.loss(train)) < 0.9 * loss_before
    assert result.heldout_top1 > before[0] / before[1]
    assert set(result.heldout_by_exit) == set(ADAPTED)
    assert result.heldout_positions * len(ADAPTED) == before[1]


def test_the_loss_in_chunks_is_the_loss_at_once(target, monkeypatch):
    """The training step's chunked backward (one chunk of positions and one exit at a
    time) gives the loss and gradients of the whole batch's loss at once."""
    import autotune.training.teacher as teacher
    head, _ = new_head("exits", target.forward, 0, ADAPTED, 8)
    with torch.no_grad():
        for p in head.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=torch.Generator().manual_seed(2)))
    seqs = _sequences(target, n=3)
    objective = ExitsLoss(head, Teacher(target.forward))
    head.zero_grad()
    loss = objective.loss(seqs)                # one chunk: 64 words x ~110 positions
    loss.backward()
    grads = [p.grad.clone() for p in head.parameters()]
    head.zero_grad()
    monkeypatch.setattr(teacher, "LOGIT_CHUNK", 64 * 7)  # 7 positions per chunk
    chunked = objective.backward(seqs)
    assert chunked == pytest.approx(float(loss.detach()), rel=1e-5)
    for a, b in zip(grads, [p.grad for p in head.parameters()]):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-4)


def test_default_exit_layers():
    assert default_exit_layers(30) == (7, 10, 13, 16, 19, 22, 25, 28)
    assert default_exit_layers(4) == (1,)
    assert default_exit_layers(1) == ()


def test_each_trained_kind_serves_its_own_method(target, drafter, tmp_path):
    eagle_head, geometry = new_head("eagle", target.forward, 0)
    meta = DrafterMeta.from_json({"format": "autotune.drafter/v1", "kind": "eagle",
                                  "geometry": geometry, "target": {}})
    eagle = trained_draft(eagle_head, meta,
                          target, "eagle:test", str(tmp_path))
    with pytest.raises(AutotuneError, match="a trained eagle head serves method=eagle"):
        SpeculativeDecoder(target, DecodeConfig(method="sorted_exit", exits=(2,)), eagle)
    for method in ("eagle", "medusa"):
        with pytest.raises(AutotuneError, match=f"needs a trained {method} drafter"):
            SpeculativeDecoder(target, DecodeConfig(method=method), drafter)
    with pytest.raises(AutotuneError, match="needs a draft model.*serves method=sorted_exit"):
        SpeculativeDecoder(target, DecodeConfig(method="draft_model"), drafter)
    # Methods that never draft with --draft ignore it; exits past the target's depth are
    # refused against the target's layers (the adapters live in its stack).
    SpeculativeDecoder(target, DecodeConfig(method="layer_skip", attn_skip=(1,)), drafter)
    with pytest.raises(AutotuneError, match="goes past"):
        SpeculativeDecoder(target, DecodeConfig(method="sorted_exit", exits=(2, 7)), drafter)


# Suffix decoding joins every space where arctic-inference is installed (CI requires it).
SUFFIX = ["suffix"] if get_method("suffix").available() else []


def test_the_space_keeps_sorted_exit_on_the_adapter_layers():
    joint = load_space("joint")
    assert joint.bind(30, None, "exits").knobs()[0]["choices"] == [
        "ngram", *SUFFIX, "layer_skip", "sorted_exit"]
    # An eagle or medusa head serves its own method only: sorted_exit leaves with it.
    assert joint.bind(30, None, "eagle").knobs()[0]["choices"] == [
        "ngram", *SUFFIX, "layer_skip", "eagle"]
    bound = load_space("sorted_exit").bind(30, None, "exits", exit_layers=(7, 10, 13))
    params = {r["param"] for r in bound.knobs() if r["key"] == "exits"}
    assert params == {"exits[7]", "exits[10]", "exits[13]"}
    one = load_space("sorted_exit").bind(4, None, "exits", exit_layers=(1,))
    # One adapter layer: exactly one exit, drawn as one categorical param.
    assert [(r["param"], r["choices"]) for r in one.knobs() if r["key"] == "exits"] == [
        ("exits", [1])]
    with pytest.raises(AutotuneError, match="no method that runs with a trained eagle"):
        load_space("sorted_exit").bind(30, None, "eagle")


def test_the_hf_export_names_the_loss_of_trained_exits():
    from autotune.exports._common import Source
    from autotune.exports.hf import check
    cfg = DecodeConfig(method="sorted_exit", exits=(10,), k=4, exit_policy="fixed")
    losses = check(Source(cfg=cfg, target="T", draft="/runs/exits", model_id="T"))
    assert any(loss.fatal and "trained exit adapters" in loss.why for loss in losses)
    assert not any(loss.fatal for loss in check(Source(cfg=cfg, target="T", draft=None,
                                                       model_id="T")))


# ------------------------------------------------------------------ the command line

@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A tiny 6-layer Llama folder and a 12-prompt workload in two categories."""
    root = tmp_path_factory.mktemp("train")
    model = save_tiny(_peaked(), root / "llama")
    lines = [json.dumps({"id": f"p{i}", "category": "code" if i % 2 else "chat",
                         "prompt": " ".join(f"t{(7 * i + j) % 60 + 1}" for j in range(6))})
             for i in range(12)]
    workload = root / "prompts.jsonl"
    workload.write_text("\n".join(lines) + "\n")
    return model, workload


def _args(model: Path, workload: Path, out: Path, *extra: str) -> list[str]:
    return ["train-draft", "--model", str(model), "--device", "cpu", "--workload",
            str(workload), "--kind", "exits", "--minutes", "0.05", "--out", str(out),
            "--max-new-tokens", "16", "--validation", "0.3", *extra]


def test_train_draft_exits_writes_a_drafter_that_measure_uses_losslessly(folder, tmp_path,
                                                                         capsys):
    model, workload = folder
    out = tmp_path / "exits"
    code = main(_args(model, workload, out, "--exit-layers", "2,4", "--exit-rank", "8",
                      "--lr", "1e-2"))
    err = capsys.readouterr().err
    assert code == 0, err
    assert f"exits drafter written to {out}" in err and "mean over exits" in err
    meta = json.loads((out / "drafter.json").read_text())
    assert meta["kind"] == "exits" and meta["training"]["steps"] > 0
    assert meta["geometry"]["exit_layers"] == [2, 4] and meta["geometry"]["exit_rank"] == 8
    assert meta["geometry"]["n_layers"] == LAYERS and meta["engine_checkpoints"] == []
    assert set(meta["training"]["heldout_top1_by_exit"]) == {"2", "4"}
    assert not (out / "checkpoint.pt").exists() and not (out / "vllm").exists()
    code = main(["measure", "--model", str(model), "--device", "cpu", "--workload",
                 str(workload), "--prompts", "3", "--max-new-tokens", "12", "--json",
                 "--draft", str(out), "--set", "method=sorted_exit", "--set", "exits=2,4",
                 "--set", "thresholds=0.3", "--set", "k=3"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    summary = json.loads(captured.out)
    assert summary["lossless"] is True and summary["mean_accepted_tokens"] > 1.0


@pytest.mark.parametrize("extra, message", [
    (["--exit-layers", "4,2"], "--exit-layers 4,2 must be increasing"),
    (["--exit-layers", ","], "--exit-layers ',' names no layer"),
    (["--exit-layers", "two"], "must be layer numbers separated by commas"),
    (["--exit-rank", "0"], "--exit-rank must be positive"),
])
def test_bad_exit_arguments_are_one_line(folder, tmp_path, capsys, extra, message):
    model, workload = folder
    assert main(_args(model, workload, tmp_path / "x", *extra)) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err


@pytest.mark.parametrize("layers, message", [
    ("2,6", "--exit-layers 6 is outside 1..5 of this 6-layer target"),
    ("0,2", "--exit-layers 0 is outside 1..5"),
])
def test_exit_layers_outside_the_target_are_one_line(folder, tmp_path, capsys, layers,
                                                     message):
    """Checked once the model is loaded, before any continuation is generated."""
    model, workload = folder
    assert main(_args(model, workload, tmp_path / "x", "--exit-layers", layers)) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert message in last
    assert not (tmp_path / "x").exists()


def test_exit_arguments_belong_to_kind_exits(folder, tmp_path, capsys):
    model, workload = folder
    args = _args(model, workload, tmp_path / "x", "--exit-layers", "2")
    args[args.index("exits")] = "eagle"
    assert main(args) == 2
    assert "apply to --kind exits only" in capsys.readouterr().err


def test_batched_sorted_exit_with_adapters_equals_greedy_ar(target, drafter):
    """Exit adapters draft inside the target's stack, so batched decoding (per-row
    drafters over the rows of one cache) runs them too, each row as its own AR run."""
    from autotune.decoding.batched import BatchedDecoder
    config = config_from_mapping({"method": "sorted_exit", **EXITS, **POLICIES["fixed"]})
    batch = BatchedDecoder(target, config, drafter).generate(PROMPTS, MAX_NEW,
                                                             time.perf_counter)
    for prompt, row in zip(PROMPTS, batch.rows):
        assert row.tokens == _greedy(target, DecodeConfig(), None, prompt).tokens


@pytest.mark.parametrize("knobs", [dict(exits=ADAPTED, thresholds=(0.3, 0.0), k=3),
                                   dict(exits=ADAPTED[-1:], k=4)], ids=["two", "one"])
def test_the_replay_reads_the_exits_through_their_adapters(target, drafter, knobs):
    """The replay's tables read each exit as the drafter does (through its adapter):
    its rounds equal the decoder's round by round, and differ from the plain exits'."""
    from autotune.schema.methods import get_method
    from autotune.replay.reference import Reference
    from autotune.replay.simulate import simulate

    config = config_from_mapping({"method": "sorted_exit", "exit_policy": "fixed", **knobs})
    ar = SpeculativeDecoder(target, DecodeConfig())
    refs = [Reference(f"p{i}", "c", p, ar.generate(p, MAX_NEW, time.perf_counter).tokens)
            for i, p in enumerate(PROMPTS)]

    def replayed(draft):
        source = get_method("sorted_exit").replay_factory()(target, draft)
        source.prepare(config, refs)
        return [[(r.drafted, r.accepted) for r in simulate(source.track(config, ref), config,
                                                           ref, MAX_NEW)] for ref in refs]

    decoder = SpeculativeDecoder(target, config, drafter)
    real = [[(r.drafted, r.accepted) for r in decoder.generate(
        ref.prompt, MAX_NEW, time.perf_counter).rounds] for ref in refs]
    assert replayed(drafter) == real
    assert sum(a for rows in real for _, a in rows) > 0
    assert replayed(None) != real          # the adapters matter to the replay
