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
    # Trained in float32 beside the target (the batches are moved to its device).
    head.to(device=target.device, dtype=torch.float32).train()
    run = _Training(head, kind, kind_loss(kind)(head, Teacher(target)), heldout, settings,
                    folder / CHECKPOINT, fingerprint, report)
    run.resume()
    run.train(train)
    head.eval()
    a, n = run.best
    return TrainResult(steps=run.step, seconds=run.spent, loss=run.last_loss,
                       heldout_top1=a / n if n else 0.0,
                       heldout_positions=n // run.objective.rows_per_position,
                       train_positions=sum(s.ids.shape[0] - 1 for s in train),
                       resumed=run.resumed, heldout_by_exit=run.objective.heldout_by_exit())


class _Training:
    """One training run's state (step, seconds spent, RNGs, optimizer) and its steps:
    resume from a checkpoint, train with a warm-up + cosine schedule, evaluate and save
    on their own clocks, report progress."""

    WARMUP_STEPS = 20

    def __init__(self, head: nn.Module, kind: str, objective: Any, heldout: list[Sequence_],
                 settings: TrainSettings, checkpoint: Path, fingerprint: dict[str, Any],
                 report: Callable[[str, bool], None]) -> None:
        self.head, self.kind, self.objective, self.heldout = head, kind, objective, heldout
        self.settings, self.checkpoint, self.fingerprint = settings, checkpoint, fingerprint
        self.report = report
        self.rng = random.Random(settings.seed)
        self.params = [p for p in head.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(self.params, lr=settings.lr, weight_decay=0.0)
        self.step, self.spent, self.resumed = 0, 0.0, False
        self.last_loss, self.best = float("nan"), (0, 0)
        self.over = objective.progress_note()

    def resume(self) -> None:
        """Continue from the checkpoint, if one exists and belongs to this run."""
        if not self.checkpoint.is_file():
            return
        try:
            state = torch.load(self.checkpoint, weights_only=False)
        except Exception as exc:
            raise AutotuneError(f"cannot read {self.checkpoint} ({type(exc).__name__}): "
                                "remove it to start over") from None
        if state.get("fingerprint") != self.fingerprint:
            raise AutotuneError(f"{self.checkpoint} belongs to another training run (kind, "
                                "model, prompts or settings differ): use another --out or "
                                "remove it")
        self.head.load_state_dict(state["head"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.step, self.spent, self.last_loss = state["step"], state["seconds"], state["loss"]
        self.rng.setstate(state["rng"])
        torch.set_rng_state(state["torch_rng"])
        self.resumed = True

    def save(self) -> None:
        _save_checkpoint(self.checkpoint, {
            "fingerprint": self.fingerprint, "head": self.head.state_dict(),
            "optimizer": self.optimizer.state_dict(), "step": self.step,
            "seconds": self.spent, "loss": self.last_loss, "rng": self.rng.getstate(),
            "torch_rng": torch.get_rng_state()})

    def agreement(self) -> tuple[int, int]:
        self.head.eval()
        result = self.objective.top1_agreement(self.heldout)
        self.head.train()
        return result

    def line(self, final: bool) -> None:
        a, n = self.best
        rate = f"{a / n:.3f}" if n else "-"
        settings = self.settings
        self.report(f"train-draft {self.kind}: {_clock(self.spent)}/{_clock(settings.seconds)}"
                    f"  step {self.step}  loss {self.last_loss:.4f}  held-out top-1 {rate}"
                    f"{self.over}", final)

    def done(self) -> bool:
        settings = self.settings
        return self.spent >= settings.seconds or (settings.max_steps is not None
                                                  and self.step >= settings.max_steps)

    def train(self, train: list[Sequence_]) -> None:
        """Steps until the time (or step) budget is spent, then a last evaluation and save."""
        started = time.perf_counter() - self.spent
        last_save = last_eval = time.perf_counter()
        self.best = self.agreement()
        self.line(False)
        while not self.done():
            for batch in _batches(train, self.settings.batch_tokens, self.rng):
                self._step(batch)
                now = time.perf_counter()
                self.spent = now - started
                if now - last_eval >= self.settings.eval_s:
                    self.best = self.agreement()
                    last_eval = time.perf_counter()
                if now - last_save >= self.settings.checkpoint_s:
                    self.save()
                    last_save = time.perf_counter()
                self.line(False)
                if self.done():
                    break
            if not train:
                break
        self.best = self.agreement()
        self.save()
        self.line(True)

    def _step(self, batch: Any) -> None:
        """One optimizer step at the schedule's rate: linear warm-up, cosine over time."""
        fraction = min(self.spent / self.settings.seconds, 1.0)
        lr = (self.settings.lr * min(1.0, (self.step + 1) / self.WARMUP_STEPS)
              * 0.5 * (1 + math.cos(math.pi * fraction)))
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.optimizer.zero_grad(set_to_none=True)
        self.last_loss = self.objective.backward(batch)
        torch.nn.utils.clip_grad_norm_(self.params, 1.0)
        self.optimizer.step()
        self.step += 1


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
