"""Distilling a draft head from the frozen target, under a time budget, resumable.

Losses (the target is the teacher, never a label):
- EAGLE (Li et al., 2024): at pair j (feature j, token j+1) the head predicts the
  feature of position j+1: Smooth-L1 to the target's feature there, plus 0.1 x the
  cross-entropy of the target's LM head on the prediction against the target's own
  distribution at j+1 (EAGLE-1's weights). A second, unrolled step feeds the head's
  own predictions back as the input features (as drafting does after its first token;
  HASS and EAGLE-3 train on what the head will see), with the same targets one further.
- Medusa (Cai et al., 2024): head i on feature j against the target's distribution at
  position j+1+i (soft cross-entropy; the shared LM head stays frozen).

Checkpoints (head, optimiser, step, seconds spent, RNG) are written atomically every
`checkpoint_s` and at the end, so `kill -9` loses at most that much and the next run
with the same arguments resumes. A tenth of the training sequences (at least one) is
kept aside for the held-out top-1 agreement the progress line shows: how often the
head's first draft token equals the target's greedy token, teacher-forced.
"""

from __future__ import annotations

import math
import os
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn

from autotune.errors import AutotuneError
from autotune.models.heads import EagleHead, MedusaHeads
from autotune.models.llama import LlamaForward
from autotune.training.data import Sequence_

CHECKPOINT = "checkpoint.pt"


@dataclass
class TrainSettings:
    kind: str                    # eagle | medusa
    seconds: float               # the training budget (wall clock, summed over resumes)
    lr: float = 1e-3
    batch_tokens: int = 1024     # positions per optimiser step
    seed: int = 0
    checkpoint_s: float = 30.0
    eval_s: float = 30.0
    max_steps: int | None = None # stop after this many steps as well (tests: reproducible)


@dataclass
class TrainResult:
    steps: int
    seconds: float
    loss: float
    heldout_top1: float
    heldout_positions: int
    train_positions: int
    resumed: bool


def split_heldout(sequences: list[Sequence_], seed: int) -> tuple[list[Sequence_], list[Sequence_]]:
    """(training, held-out): a tenth of the sequences, at least one, drawn by `seed`."""
    if len(sequences) < 2:
        raise AutotuneError("training needs at least 2 prompts (one is held out for the "
                            "agreement figure)")
    order = list(range(len(sequences)))
    random.Random(seed).shuffle(order)
    n_held = max(1, len(sequences) // 10)
    held = {order[i] for i in range(n_held)}
    return ([s for i, s in enumerate(sequences) if i not in held],
            [s for i, s in enumerate(sequences) if i in held])


class _Teacher:
    """The frozen target's pieces a loss reads: embedding, LM head, rotary tables."""

    def __init__(self, forward: LlamaForward) -> None:
        self.forward = forward
        self.embed = forward.embed.float()
        self.lm_head = forward.lm_head.float()
        self.lm_bias = forward.lm_head_bias
        self.cos, self.sin = forward.cos.float(), forward.sin.float()
        self.scaling = forward.scaling

    def logits(self, features: torch.Tensor) -> torch.Tensor:
        return F.linear(features, self.lm_head, self.lm_bias)


def _soft_ce(student_logits: torch.Tensor, teacher_logits: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of the student's log-softmax under the teacher's softmax."""
    p = torch.softmax(teacher_logits, dim=-1)
    return -(p * torch.log_softmax(student_logits, dim=-1)).sum(-1).mean()


def _pad(rows: list[torch.Tensor], value: float = 0.0) -> torch.Tensor:
    length = max(r.shape[0] for r in rows)
    return torch.stack([F.pad(r, (0, 0) * (r.dim() - 1) + (0, length - r.shape[0]), value=value)
                        for r in rows])


class _Objective:
    """Loss and held-out agreement of one head kind over a batch of sequences."""

    def __init__(self, kind: str, head: nn.Module, teacher: _Teacher) -> None:
        self.kind, self.head, self.teacher = kind, head, teacher

    def _batch(self, seqs: list[Sequence_]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        ids = _pad([s.ids[:, None] for s in seqs])[..., 0].long()           # [B, L]
        features = _pad([s.features for s in seqs])                         # [B, L, H]
        lengths = torch.tensor([s.ids.shape[0] for s in seqs])
        valid = torch.arange(ids.shape[1])[None, :] < lengths[:, None]     # [B, L]
        return ids, features, valid

    def _eagle(self, features: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        t = features.shape[1]
        teacher = self.teacher
        embeds = F.embedding(ids, teacher.embed)
        return self.head(features, embeds, teacher.cos[:t], teacher.sin[:t], teacher.scaling)

    def loss(self, seqs: list[Sequence_]) -> torch.Tensor:
        ids, features, valid = self._batch(seqs)
        teacher = self.teacher
        if self.kind == "eagle":
            # Pair j = (feature j, token j+1) -> feature j+1.
            inputs, tokens, targets = features[:, :-1], ids[:, 1:], features[:, 1:]
            mask = valid[:, 1:]
            predicted = self._eagle(inputs, tokens)
            with torch.no_grad():
                teacher_logits = teacher.logits(targets[mask])
            loss = (F.smooth_l1_loss(predicted[mask], targets[mask])
                    + 0.1 * _soft_ce(teacher.logits(predicted[mask]), teacher_logits))
            # Unrolled step: pair j+1 takes the head's own feature j+1 (as drafting does).
            if inputs.shape[1] > 2:
                fed = torch.cat((inputs[:, :1], predicted[:, :-1].detach()), dim=1)
                second = self._eagle(fed, tokens)
                m2 = mask.clone()
                m2[:, 0] = False                   # pair 0's input is the target's own
                loss = loss + (F.smooth_l1_loss(second[m2], targets[m2])
                               + 0.1 * _soft_ce(teacher.logits(second[m2]),
                                                teacher.logits(targets[m2]).detach()))
            return loss
        # Medusa: head i on feature j -> the target's distribution at j+1+i.
        n_heads = self.head.n_heads
        transformed = self.head(features)                                   # [B,L,N,H]
        total = features.new_zeros(())
        for i in range(n_heads):
            shift = 1 + i
            if features.shape[1] <= shift:
                break
            mask = valid[:, shift:]
            student = teacher.logits(transformed[:, :-shift, i][mask])
            with torch.no_grad():
                target_logits = teacher.logits(features[:, shift:][mask])
            total = total + _soft_ce(student, target_logits)
        return total / n_heads

    @torch.no_grad()
    def top1_agreement(self, seqs: list[Sequence_]) -> tuple[int, int]:
        """(agreements, positions): the head's first draft token (teacher-forced on the
        target's features) against the target's greedy token, continuation positions
        only (prompt positions are not what the decoder drafts)."""
        agree = total = 0
        teacher = self.teacher
        for seq in seqs:
            ids, features = seq.ids[None], seq.features[None]
            if self.kind == "eagle":
                predicted = self._eagle(features[:, :-1], ids[:, 1:])[0]     # feature j+1
                guess = teacher.logits(predicted).argmax(-1)
                truth = teacher.logits(features[0, 1:]).argmax(-1)
                first = max(seq.prompt_len - 1, 0)
            else:
                guess = teacher.logits(self.head(features)[0, :-1, 0]).argmax(-1)
                truth = teacher.logits(features[0, 1:]).argmax(-1)
                first = max(seq.prompt_len - 1, 0)
            agree += int((guess[first:] == truth[first:]).sum())
            total += int(guess[first:].numel())
        return agree, total


def _batches(seqs: list[Sequence_], batch_tokens: int, rng: random.Random) -> list[list[Sequence_]]:
    order = list(seqs)
    rng.shuffle(order)
    out: list[list[Sequence_]] = []
    current: list[Sequence_] = []
    for seq in order:
        longest = max([s.ids.shape[0] for s in current] + [seq.ids.shape[0]])
        if current and longest * (len(current) + 1) > batch_tokens:
            out.append(current)
            current = []
        current.append(seq)
    if current:
        out.append(current)
    return out


def _save_checkpoint(path: Path, state: dict[str, Any]) -> None:
    scratch = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    torch.save(state, scratch)
    os.replace(scratch, path)


def train_head(head: nn.Module, kind: str, target: LlamaForward, train: list[Sequence_],
               heldout: list[Sequence_], settings: TrainSettings, folder: Path,
               fingerprint: dict[str, Any],
               report: Callable[[str, bool], None]) -> TrainResult:
    """Train `head` in place until `settings.seconds` of training (over all resumes) are
    spent; `folder/checkpoint.pt` resumes a run with the same `fingerprint` (kind,
    target, prompts, settings). `report(line, final)` gets the progress line."""
    torch.manual_seed(settings.seed)
    rng = random.Random(settings.seed)
    head.train().float()
    teacher = _Teacher(target)
    objective = _Objective(kind, head, teacher)
    params = [p for p in head.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=settings.lr, weight_decay=0.0)
    checkpoint = folder / CHECKPOINT
    step, spent, resumed, last_loss, best = 0, 0.0, False, float("nan"), (0, 0)
    if checkpoint.is_file():
        try:
            state = torch.load(checkpoint, weights_only=False)
        except Exception as exc:
            raise AutotuneError(f"cannot read {checkpoint} ({type(exc).__name__}): remove it "
                                "to start over") from None
        if state.get("fingerprint") != fingerprint:
            raise AutotuneError(f"{checkpoint} belongs to another training run (kind, model, "
                                "prompts or settings differ): use another --out or remove it")
        head.load_state_dict(state["head"])
        optimizer.load_state_dict(state["optimizer"])
        step, spent, last_loss = state["step"], state["seconds"], state["loss"]
        rng.setstate(state["rng"])
        torch.set_rng_state(state["torch_rng"])
        resumed = True

    def save() -> None:
        _save_checkpoint(checkpoint, {
            "fingerprint": fingerprint, "head": head.state_dict(),
            "optimizer": optimizer.state_dict(), "step": step, "seconds": spent,
            "loss": last_loss, "rng": rng.getstate(), "torch_rng": torch.get_rng_state()})

    def agreement() -> tuple[int, int]:
        head.eval()
        result = objective.top1_agreement(heldout)
        head.train()
        return result

    def line(final: bool) -> None:
        a, n = best
        rate = f"{a / n:.3f}" if n else "-"
        report(f"train-draft {kind}: {_clock(spent)}/{_clock(settings.seconds)}  step {step}  "
               f"loss {last_loss:.4f}  held-out top-1 {rate}", final)

    base_lr = settings.lr
    warmup = 20
    started = time.perf_counter() - spent
    last_save = last_eval = time.perf_counter()
    best = agreement()
    line(False)
    def done() -> bool:
        return spent >= settings.seconds or (settings.max_steps is not None
                                             and step >= settings.max_steps)

    while not done():
        for batch in _batches(train, settings.batch_tokens, rng):
            fraction = min(spent / settings.seconds, 1.0)
            lr = base_lr * min(1.0, (step + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * fraction))
            for group in optimizer.param_groups:
                group["lr"] = lr
            loss = objective.loss(batch)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            optimizer.step()
            step += 1
            last_loss = float(loss.detach())
            now = time.perf_counter()
            spent = now - started
            if now - last_eval >= settings.eval_s:
                best = agreement()
                last_eval = time.perf_counter()
            if now - last_save >= settings.checkpoint_s:
                save()
                last_save = time.perf_counter()
            line(False)
            if done():
                break
        if not train:
            break
    best = agreement()
    save()
    line(True)
    head.eval()
    a, n = best
    return TrainResult(steps=step, seconds=spent, loss=last_loss,
                       heldout_top1=a / n if n else 0.0, heldout_positions=n,
                       train_positions=sum(s.ids.shape[0] - 1 for s in train), resumed=resumed)


def _clock(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 60}:{seconds % 60:02d}"


def progress_printer(stream: Any = None) -> Callable[[str, bool], None]:
    """A progress line on stderr: rewritten in place on a terminal, else one line every
    30 s and at the end."""
    stream = stream or sys.stderr
    tty = hasattr(stream, "isatty") and stream.isatty()
    last = [0.0]

    def report(text: str, final: bool) -> None:
        if tty:
            stream.write("\r" + text + ("\n" if final else ""))
            stream.flush()
            return
        now = time.monotonic()
        if final or now - last[0] >= 30:
            last[0] = now
            print(text, file=stream, flush=True)
    return report


def new_head(kind: str, target: LlamaForward, medusa_heads: int) -> tuple[nn.Module, dict]:
    """A fresh head of `kind` for `target` and its geometry (drafter.json's)."""
    from autotune.models.heads import head_geometry

    geometry = head_geometry(target)
    if kind == "eagle":
        head: nn.Module = EagleHead(geometry["hidden"], geometry["n_heads"],
                                    geometry["n_kv_heads"], geometry["head_dim"],
                                    geometry["intermediate"], geometry["eps"],
                                    geometry["attention_bias"])
        head.init_from(target)           # type: ignore[operator]
    elif kind == "medusa":
        geometry["medusa_heads"] = medusa_heads
        geometry["medusa_layers"] = 1
        head = MedusaHeads(geometry["hidden"], medusa_heads, 1)
    else:
        raise AutotuneError(f"--kind {kind!r} is not one of eagle, medusa")
    return head, geometry
