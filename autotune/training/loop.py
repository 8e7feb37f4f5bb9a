"""Distilling a draft head from the frozen target, under a time budget, resumable.

What is trained against what is the kind's (`kinds.KIND_LOSSES`: `eagle_loss`,
`medusa_loss`, `exits_loss`); this loop is the same for every kind: batches, a
warmed-up cosine learning rate, gradient clipping, the held-out agreement, checkpoints.

Checkpoints (head, optimiser, step, seconds spent, RNG) are written atomically every
`checkpoint_s` and at the end, so `kill -9` loses at most that much and the next run
with the same arguments resumes. A tenth of the training sequences (at least one) is
kept aside for the held-out top-1 agreement the progress line shows: how often the
head's first draft token equals the target's greedy token, teacher-forced (exits: the
mean over the exits of each exit's agreement, each also recorded on its own).
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
from torch import nn

from autotune.common.errors import AutotuneError
from autotune.models.llama import LlamaForward
from autotune.training.data import Sequence_
from autotune.training.kind_loss import KindLoss
from autotune.training.kinds import kind_loss
from autotune.training.teacher import Teacher

CHECKPOINT = "checkpoint.pt"


@dataclass
class TrainSettings:
    kind: str                    # one of models.drafter_folder.KINDS
    seconds: float               # the training budget (wall clock, summed over resumes)
    lr: float = 1e-3
    batch_tokens: int = KindLoss.batch_tokens   # positions per optimiser step
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
    # exits: each exit's held-out top-1 agreement (heldout_top1 is their mean).
    heldout_by_exit: dict[int, float] | None = None


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
    # Trained in float32 beside the target (the batches are moved to its device).
    head.to(device=target.device, dtype=torch.float32).train()
    objective = kind_loss(kind)(head, Teacher(target))
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

    over = objective.progress_note()

    def line(final: bool) -> None:
        a, n = best
        rate = f"{a / n:.3f}" if n else "-"
        report(f"train-draft {kind}: {_clock(spent)}/{_clock(settings.seconds)}  step {step}  "
               f"loss {last_loss:.4f}  held-out top-1 {rate}{over}", final)

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
            optimizer.zero_grad(set_to_none=True)
            last_loss = objective.backward(batch)
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            optimizer.step()
            step += 1
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
    return TrainResult(steps=step, seconds=spent, loss=last_loss, heldout_top1=a / n if n else 0.0,
                       heldout_positions=n // objective.rows_per_position,
                       train_positions=sum(s.ids.shape[0] - 1 for s in train), resumed=resumed,
                       heldout_by_exit=objective.heldout_by_exit())


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
