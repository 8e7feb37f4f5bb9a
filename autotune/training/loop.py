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
- Exits (S2D's sorted fine-tuning, Kavehzadeh et al., 2024, read for a frozen target):
  at every position j, the distribution of exit e (the target's first e layers, exit
  e's adapter, the target's final norm and LM head) against the full model's at j, soft
  cross-entropy averaged over the exits. Each batch runs the target's layers up to the
  deepest exit without grad; the full model's distribution comes from the features.
  The LM head's logits [positions, V] are made and back-propagated a chunk of
  positions and one exit at a time (a 49152-word vocabulary times a batch of positions
  times every exit would not fit otherwise).

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
import torch.nn.functional as F
from torch import nn

from autotune.common.errors import AutotuneError
from autotune.models.heads import EagleHead, ExitAdapters, MedusaHeads
from autotune.models.llama import LlamaForward
from autotune.training.data import Sequence_

CHECKPOINT = "checkpoint.pt"
DEFAULT_EXIT_RANK = 64
# Exits: positions per optimiser step. Each position costs one LM-head pass per exit
# (8 by default, 49152 words each), so a 1024-position step of 8 exits takes ~15 s on
# one CPU thread. On SmolLM2 more, smaller steps learned faster per second: 86 steps
# of 256 positions (4 min, exits 10 and 19) took exit 10's held-out top-1 from 0.06 to
# 0.14, while 17 steps of 1024 (5 min, 8 exits) left the exits' mean at 0.26.
EXIT_BATCH_TOKENS = 256
# Logits made at once: positions per chunk x vocabulary (64 MiB of float32).
LOGIT_CHUNK = 1 << 24


@dataclass
class TrainSettings:
    kind: str                    # eagle | medusa | exits
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


class _Teacher:
    """The frozen target's pieces a loss reads: embedding, LM head, rotary tables."""

    def __init__(self, forward: LlamaForward) -> None:
        self.forward = forward
        self.device = forward.device
        self.embed = forward.embed.float()
        self.lm_head = forward.lm_head.float()
        self.lm_bias = forward.lm_head_bias
        self.final_norm = forward.final_norm.float()
        self.eps = forward.eps
        self.cos, self.sin = forward.cos.float(), forward.sin.float()
        self.scaling = forward.scaling

    def logits(self, features: torch.Tensor) -> torch.Tensor:
        return F.linear(features, self.lm_head, self.lm_bias)

    def exit_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """The final norm + LM head on pre-norm hidden states [..., H] (float32):
        [..., V], the arithmetic of `LlamaForward.logits`."""
        normed = hidden * torch.rsqrt(hidden.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.logits(self.final_norm * normed)


def _soft_ce(student_logits: torch.Tensor, teacher_logits: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of the student's log-softmax under the teacher's softmax."""
    p = torch.softmax(teacher_logits, dim=-1)
    return -(p * torch.log_softmax(student_logits, dim=-1)).sum(-1).mean()


def _chunk(vocab: int) -> int:
    """Positions whose logits make one chunk (`LOGIT_CHUNK`)."""
    return max(1, LOGIT_CHUNK // max(vocab, 1))


# Positions per step whose full-vocabulary cross-entropy is computed: an LM head of
# 49152 x 576 over 1000+ rows, forward and backward, is seconds per step on 2 cores.
CE_POSITIONS = 256


def _sample_rows(n: int, limit: int) -> torch.Tensor:
    """`limit` of n row indices drawn without replacement (all of them when n <= limit),
    from torch's global generator (seeded; saved in checkpoints)."""
    return torch.arange(n) if n <= limit else torch.randperm(n)[:limit]


def _pad(rows: list[torch.Tensor], value: float = 0.0) -> torch.Tensor:
    length = max(r.shape[0] for r in rows)
    return torch.stack([F.pad(r, (0, 0) * (r.dim() - 1) + (0, length - r.shape[0]), value=value)
                        for r in rows])


class _Objective:
    """Loss and held-out agreement of one head kind over a batch of sequences."""

    def __init__(self, kind: str, head: nn.Module, teacher: _Teacher) -> None:
        self.kind, self.head, self.teacher = kind, head, teacher
        # exits: the last held-out agreement of each exit (filled by top1_agreement).
        self.by_exit: dict[int, float] = {}

    def _batch(self, seqs: list[Sequence_]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """ids [B, L], features [B, L, H] and valid [B, L] on the target's device (rows
        padded at the end)."""
        device = self.teacher.device
        ids = _pad([s.ids[:, None] for s in seqs])[..., 0].long()           # [B, L]
        features = _pad([s.features for s in seqs])                         # [B, L, H]
        lengths = torch.tensor([s.ids.shape[0] for s in seqs])
        valid = torch.arange(ids.shape[1])[None, :] < lengths[:, None]     # [B, L]
        return ids.to(device), features.to(device), valid.to(device)

    @torch.no_grad()
    def _exit_states(self, ids: torch.Tensor) -> dict[int, torch.Tensor]:
        """The target's pre-norm hidden state after each exit layer e: {e: [B, L, H]}
        (float32), one causal pass over ids [B, L] up to the deepest exit. Padding sits
        at the end of a row, so causal attention keeps it out of every valid position."""
        forward = self.teacher.forward
        step = forward.begin(ids, forward.new_cache(ids.shape[0], ids.shape[1]))
        states: dict[int, torch.Tensor] = {}
        done = 0
        for layer in self.head.layers:
            forward.run_layers(step, done, layer)
            done = layer
            states[layer] = step.hidden.to(torch.float32, copy=True)
        return states

    def _exits_loss(self, seqs: list[Sequence_], backward: bool = False) -> torch.Tensor:
        """Mean over the exits and the valid positions of the soft cross-entropy of exit
        e (through its adapter) against the full model's distribution there, a chunk of
        positions at a time: the full model's softmax [chunk, V] is made once per chunk
        and shared by the exits. `backward`: each exit's chunk is back-propagated at
        once (its logits freed before the next), and the loss comes back detached; else
        every chunk's graph is kept (use under no_grad, or on small batches)."""
        ids, features, valid = self._batch(seqs)
        states = {layer: hidden[valid] for layer, hidden in self._exit_states(ids).items()}
        targets = features[valid]                                           # [N, H]
        n = targets.shape[0]
        scale = 1.0 / max(n * len(states), 1)
        chunk = _chunk(self.teacher.lm_head.shape[0])
        total = features.new_zeros(())
        for first in range(0, n, chunk):
            rows = slice(first, first + chunk)
            with torch.no_grad():
                soft = torch.softmax(self.teacher.logits(targets[rows]), dim=-1)  # [c, V]
            for layer, hidden in states.items():
                part = self._exit_ce(layer, hidden[rows], soft) * scale
                if backward:
                    part.backward()
                    part = part.detach()
                total = total + part
        return total

    def _exit_ce(self, layer: int, hidden: torch.Tensor, soft: torch.Tensor) -> torch.Tensor:
        """Cross-entropy of exit `layer` on hidden [c, H] under soft [c, V], summed over
        the c positions."""
        logits = self.teacher.exit_logits(self.head.adapt(layer, hidden))
        return -(soft * torch.log_softmax(logits, dim=-1)).sum()

    def backward(self, seqs: list[Sequence_]) -> float:
        """The batch's loss, its gradients accumulated into the head (exits: chunk by
        chunk, so a 49152-word vocabulary never holds more than one chunk's logits)."""
        if self.kind == "exits":
            return float(self._exits_loss(seqs, backward=True))
        loss = self.loss(seqs)
        loss.backward()
        return float(loss.detach())

    @torch.no_grad()
    def _exits_agreement(self, seqs: list[Sequence_]) -> tuple[int, int]:
        """(agreements, positions) summed over the exits (so their ratio is the mean of
        the exits' agreements); each exit's own rate goes to `by_exit`."""
        teacher = self.teacher
        chunk = _chunk(teacher.lm_head.shape[0])
        agree = {layer: 0 for layer in self.head.layers}
        total = 0
        for seq in seqs:
            ids, features, _ = self._batch([seq])
            first = max(seq.prompt_len - 1, 0)          # the first continuation prediction
            states = self._exit_states(ids)
            for start in range(first, ids.shape[1], chunk):
                end = min(start + chunk, ids.shape[1])
                truth = teacher.logits(features[0, start:end]).argmax(-1)
                for layer, hidden in states.items():
                    guess = teacher.exit_logits(self.head.adapt(layer, hidden[0, start:end]))
                    agree[layer] += int((guess.argmax(-1) == truth).sum())
                total += end - start
        self.by_exit = {layer: a / total if total else 0.0 for layer, a in agree.items()}
        return sum(agree.values()), total * len(agree)

    def _eagle(self, features: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        t = features.shape[1]
        teacher = self.teacher
        embeds = F.embedding(ids, teacher.embed)
        return self.head(features, embeds, teacher.cos[:t], teacher.sin[:t], teacher.scaling)

    def loss(self, seqs: list[Sequence_]) -> torch.Tensor:
        if self.kind == "exits":
            return self._exits_loss(seqs)
        ids, features, valid = self._batch(seqs)
        teacher = self.teacher
        if self.kind == "eagle":
            # Pair j = (feature j, token j+1) -> feature j+1.
            inputs, tokens, targets = features[:, :-1], ids[:, 1:], features[:, 1:]
            mask = valid[:, 1:]
            predicted = self._eagle(inputs, tokens)
            loss = self._eagle_terms(predicted[mask], targets[mask])
            # Unrolled step: pair j+1 takes the head's own feature j+1 (as drafting does).
            if inputs.shape[1] > 2:
                fed = torch.cat((inputs[:, :1], predicted[:, :-1].detach()), dim=1)
                second = self._eagle(fed, tokens)
                m2 = mask.clone()
                m2[:, 0] = False                   # pair 0's input is the target's own
                loss = loss + self._eagle_terms(second[m2], targets[m2])
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
            rows = _sample_rows(int(mask.sum()), CE_POSITIONS)
            student = teacher.logits(transformed[:, :-shift, i][mask][rows])
            with torch.no_grad():
                target_logits = teacher.logits(features[:, shift:][mask][rows])
            total = total + _soft_ce(student, target_logits)
        return total / n_heads

    def _eagle_terms(self, predicted: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """EAGLE-1's loss over predicted and target features [N, H]: Smooth-L1 on every
        row + 0.1 x the LM head's soft cross-entropy on `CE_POSITIONS` sampled rows (the
        head over the whole vocabulary is most of a step's cost)."""
        rows = _sample_rows(predicted.shape[0], CE_POSITIONS)
        with torch.no_grad():
            teacher_logits = self.teacher.logits(targets[rows])
        return (F.smooth_l1_loss(predicted, targets)
                + 0.1 * _soft_ce(self.teacher.logits(predicted[rows]), teacher_logits))

    @torch.no_grad()
    def top1_agreement(self, seqs: list[Sequence_]) -> tuple[int, int]:
        """(agreements, positions): the head's first draft token (teacher-forced on the
        target's features) against the target's greedy token, continuation positions
        only (prompt positions are not what the decoder drafts). Exits: summed over the
        exits (`_exits_agreement`)."""
        if self.kind == "exits":
            return self._exits_agreement(seqs)
        agree = total = 0
        teacher = self.teacher
        for seq in seqs:
            ids, features, _ = self._batch([seq])
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
    # Trained in float32 beside the target (the batches are moved to its device).
    head.to(device=target.device, dtype=torch.float32).train()
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

    over = (f" (mean over exits {','.join(map(str, head.layers))})"
            if isinstance(head, ExitAdapters) else "")

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
    # Exits: agreements and positions summed over the exits; positions are counted once.
    per_position = len(head.layers) if isinstance(head, ExitAdapters) else 1
    return TrainResult(steps=step, seconds=spent, loss=last_loss,
                       heldout_top1=a / n if n else 0.0, heldout_positions=n // per_position,
                       train_positions=sum(s.ids.shape[0] - 1 for s in train), resumed=resumed,
                       heldout_by_exit=dict(objective.by_exit) if kind == "exits" else None)


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


def default_exit_layers(n_layers: int) -> tuple[int, ...]:
    """Every 3rd layer from n/4 to n-1 (7, 10, ..., 28 on a 30-layer target): S2D's
    nested sub-models at regular depths, none at n (that exit is the model itself)."""
    return tuple(range(max(1, n_layers // 4), n_layers, 3))


def check_exit_layers(layers: tuple[int, ...], n_layers: int) -> None:
    """One line for exit layers a `n_layers`-layer target cannot have adapters at."""
    if not layers:
        raise AutotuneError(f"--exit-layers names no layer; a {n_layers}-layer target takes "
                            f"exits in 1..{n_layers - 1}")
    if any(b <= a for a, b in zip(layers, layers[1:])):
        raise AutotuneError(f"--exit-layers {','.join(map(str, layers))} must be increasing")
    outside = [e for e in layers if not 1 <= e < n_layers]
    if outside:
        raise AutotuneError(f"--exit-layers {outside[0]} is outside 1..{n_layers - 1} of this "
                            f"{n_layers}-layer target (an exit at {n_layers} is the model's "
                            "own output)")


def new_head(kind: str, target: LlamaForward, medusa_heads: int,
             exit_layers: tuple[int, ...] | None = None,
             exit_rank: int = DEFAULT_EXIT_RANK) -> tuple[nn.Module, dict]:
    """A fresh head of `kind` for `target` and its geometry (drafter.json's). Exits:
    adapters at `exit_layers` (default `default_exit_layers`) of rank `exit_rank`."""
    from autotune.models.heads import head_geometry

    geometry = head_geometry(target)
    if kind == "exits":
        layers = tuple(exit_layers) if exit_layers is not None else \
            default_exit_layers(target.n_layers)
        check_exit_layers(layers, target.n_layers)
        if not 1 <= exit_rank <= geometry["hidden"]:
            raise AutotuneError(f"--exit-rank must lie in 1..{geometry['hidden']} (the hidden "
                                f"size), not {exit_rank}")
        geometry = {"hidden": geometry["hidden"], "eps": geometry["eps"],
                    "n_layers": target.n_layers, "exit_layers": list(layers),
                    "exit_rank": exit_rank}
        return ExitAdapters(geometry["hidden"], layers, exit_rank, geometry["eps"]), geometry
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
        raise AutotuneError(f"--kind {kind!r} is not one of eagle, medusa, exits")
    return head, geometry
