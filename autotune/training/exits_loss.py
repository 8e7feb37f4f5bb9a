"""Exits: S2D's sorted fine-tuning (Kavehzadeh et al., 2024), read for a frozen target.

At every position j, the distribution of exit e (the target's first e layers, exit e's
adapter, the target's final norm and LM head) against the full model's at j, soft
cross-entropy averaged over the exits. Each batch runs the target's layers up to the
deepest exit without grad; the full model's distribution comes from the features. The
LM head's logits [positions, V] are made and back-propagated a chunk of positions and
one exit at a time (a 49152-word vocabulary times a batch of positions times every exit
would not fit otherwise). The held-out agreement is the mean over the exits of each
exit's agreement, each also recorded on its own.
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import nn

from autotune.common.errors import AutotuneError
from autotune.schema.config import check_exit_order
from autotune.models.drafter_folder import ExitsGeometry, served_method
from autotune.models.heads import head_geometry
from autotune.models.llama import LlamaForward
from autotune.training.data import Sequence_
from autotune.training.kind_loss import HeadFingerprint, HeadOptions, KindLoss
from autotune.training.teacher import Teacher, logit_chunk

DEFAULT_EXIT_RANK = 64
# Positions per optimiser step. Each position costs one LM-head pass per exit (8 by
# default, 49152 words each), so a 1024-position step of 8 exits takes ~15 s on one CPU
# thread. On SmolLM2 more, smaller steps learned faster per second: 86 steps of 256
# positions (4 min, exits 10 and 19) took exit 10's held-out top-1 from 0.06 to 0.14,
# while 17 steps of 1024 (5 min, 8 exits) left the exits' mean at 0.26.
EXIT_BATCH_TOKENS = 256


def default_exit_layers(n_layers: int) -> tuple[int, ...]:
    """Every 3rd layer from n/4 to n-1 (7, 10, ..., 28 on a 30-layer target): S2D's
    nested sub-models at regular depths, none at n (that exit is the model itself)."""
    return tuple(range(max(1, n_layers // 4), n_layers, 3))


def check_exit_layers(layers: tuple[int, ...], n_layers: int) -> None:
    """One line for exit layers a `n_layers`-layer target cannot have adapters at."""
    if not layers:
        raise AutotuneError(f"--exit-layers names no layer; a {n_layers}-layer target takes "
                            f"exits in 1..{n_layers - 1}")
    check_exit_order(layers, f"--exit-layers {','.join(map(str, layers))}")
    outside = [e for e in layers if not 1 <= e < n_layers]
    if outside:
        raise AutotuneError(f"--exit-layers {outside[0]} is outside 1..{n_layers - 1} of this "
                            f"{n_layers}-layer target (an exit at {n_layers} is the model's "
                            "own output)")


class ExitsLoss(KindLoss):
    kind: ClassVar[str] = "exits"
    batch_tokens: ClassVar[int] = EXIT_BATCH_TOKENS
    # No engine loads exit adapters (they live inside the target's own stack).
    engine_checkpoints: ClassVar[bool] = False
    summary_note: ClassVar[str] = " (mean over exits)"
    use_hint: ClassVar[str] = f" --set method={served_method(kind)}"

    def __init__(self, head: nn.Module, teacher: Teacher) -> None:
        super().__init__(head, teacher)
        # The last held-out agreement of each exit (filled by top1_agreement).
        self.by_exit: dict[int, float] = {}

    # ------------------------------------------------------------------ the head

    @classmethod
    def resolve(cls, options: HeadOptions, target: LlamaForward) -> HeadOptions:
        """Exit layers (default `default_exit_layers`) and rank (default
        `DEFAULT_EXIT_RANK`) filled in and checked against the target's depth and
        hidden size."""
        n_layers = target.n_layers
        layers = (tuple(options.exit_layers) if options.exit_layers is not None
                  else default_exit_layers(n_layers))
        check_exit_layers(layers, n_layers)
        rank = options.exit_rank if options.exit_rank is not None else DEFAULT_EXIT_RANK
        hidden = int(target.config.hidden_size)
        if not 1 <= rank <= hidden:
            raise AutotuneError(f"--exit-rank must lie in 1..{hidden} (the hidden size), "
                                f"not {rank}")
        return HeadOptions(options.medusa_heads, layers, rank)

    @classmethod
    def geometry(cls, options: HeadOptions, target: LlamaForward) -> ExitsGeometry:
        """Adapters at `options.exit_layers` of rank `options.exit_rank`."""
        shared = head_geometry(target)
        return ExitsGeometry(hidden=shared.hidden, eps=shared.eps, n_layers=target.n_layers,
                             exit_layers=list(options.exit_layers or ()),
                             exit_rank=options.exit_rank)

    @classmethod
    def fingerprint(cls, options: HeadOptions) -> HeadFingerprint:
        return HeadFingerprint(**super().fingerprint(options),
                               exit_layers=list(options.exit_layers or ()),
                               exit_rank=options.exit_rank)

    # ------------------------------------------------------------------ training

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

    def _loss(self, seqs: list[Sequence_], backward: bool) -> torch.Tensor:
        """Mean over the exits and the valid positions of the soft cross-entropy of exit
        e (through its adapter) against the full model's distribution there, a chunk of
        positions at a time: the full model's softmax [chunk, V] is made once per chunk
        and shared by the exits. `backward`: each exit's chunk is back-propagated at
        once (its logits freed before the next), and the loss comes back detached; else
        every chunk's graph is kept (use under no_grad, or on small batches)."""
        ids, features, valid = self.teacher.batch(seqs)
        states = {layer: hidden[valid] for layer, hidden in self._exit_states(ids).items()}
        targets = features[valid]                                           # [N, H]
        n = targets.shape[0]
        scale = 1.0 / max(n * len(states), 1)
        chunk = logit_chunk(self.teacher.lm_head.shape[0])
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

    def loss(self, seqs: list[Sequence_]) -> torch.Tensor:
        return self._loss(seqs, backward=False)

    def backward(self, seqs: list[Sequence_]) -> float:
        """Chunk by chunk, so a 49152-word vocabulary never holds more than one chunk's
        logits."""
        return float(self._loss(seqs, backward=True))

    @torch.no_grad()
    def top1_agreement(self, seqs: list[Sequence_]) -> tuple[int, int]:
        """(agreements, positions) summed over the exits (so their ratio is the mean of
        the exits' agreements); each exit's own rate goes to `by_exit`."""
        teacher = self.teacher
        chunk = logit_chunk(teacher.lm_head.shape[0])
        agree = {layer: 0 for layer in self.head.layers}
        total = 0
        for seq in seqs:
            ids, features, _ = teacher.batch([seq])
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

    # ------------------------------------------------------------------ reporting

    @property
    def rows_per_position(self) -> int:
        """Agreements and positions are summed over the exits; a position counts once."""
        return len(self.head.layers)

    def progress_note(self) -> str:
        return f" (mean over exits {','.join(map(str, self.head.layers))})"

    def heldout_by_exit(self) -> dict[int, float] | None:
        return dict(self.by_exit)
