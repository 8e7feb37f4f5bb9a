"""What the low-precision lossless tier reads: per emitted token, the target pass that
chose it (DESIGN.md principle 10).

In bfloat16 / float16 a verify pass over k tokens and k one-token AR passes compute the
same mathematical logits with different rounding, so at a near-tie greedy speculative
output may leave greedy AR output with no fault in the algorithm. To tell such a flip
from a bug, a greedy low-precision run records, for every emitted token, the top-K
logits of the pass that chose it (the prefill's for the first token; the verify pass's
rows for accepted drafts and the next token; for a tree, rows [0] + the accepted path),
and checks that the emitted token is an argmax of that row (tier a: the acceptance rule
was right under that pass's numerics), independently of the verifier.
`autotune.measure.divergence` compares two runs' records.

Tier b at every position (`teacher_force`): after the clock stops, the run's whole
output is passed through the target once more, teacher-forced in one pass over prompt +
output from a fresh cache (the prefill's shape, no speculation involved), and the
logits of each recorded row's top-K ids are kept beside the recorded ones. A verify pass
with a wrong position, mask or KV entry computes other mathematical logits than that
clean pass does, at the position where it went wrong and after it, even where the
emitted token is still its own row's argmax (which tier a cannot see); rounding alone
moves them by the dtype's noise only (`divergence.NOISE_ULPS`).

Cost: float32 runs (the CPU's default) and sampling record nothing. A recording run
copies each round's emitted rows ([n, V], one small copy) inside the timed loop; the
top-K and the argmax check run on the kept rows after the generation's clock stops
(or when `FLUSH_ROWS` rows have piled up), so the timed loop pays no extra syncs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

# Logits kept per emitted token: enough that the runner-up of a near-tie is among them.
TOP_K = 16
# The dtypes whose rounding the near-tie tier explains; float32 must be exact.
LOW_PRECISION: frozenset[torch.dtype] = frozenset({torch.bfloat16, torch.float16})
# Rows kept before a top-K pass folds them (bounds the memory of a long generation).
FLUSH_ROWS = 256


@dataclass
class TokenNumerics:
    """Per emitted token i, the top-K logits of the target pass that chose it.

    values[i]: K logits as float (descending); ids[i]: their token ids; dtype: the
    target's dtype ("bfloat16"); argmax_violations: emitted tokens whose logit was
    below their row's maximum (an acceptance the pass's own argmax does not support).
    """

    dtype: str
    values: list[list[float]] = field(default_factory=list)
    ids: list[list[int]] = field(default_factory=list)
    argmax_violations: int = 0
    # teacher[i][j]: the clean teacher-forced pass's logit of ids[i][j] (`teacher_force`);
    # empty until that pass ran.
    teacher: list[list[float]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.ids)

    def logit(self, position: int, token: int) -> float | None:
        """The logit of `token` in the pass that chose the token at `position`, None
        when it is not among that pass's top K."""
        row = self.ids[position]
        return self.values[position][row.index(token)] if token in row else None


def records(dtype: torch.dtype, greedy: bool) -> bool:
    """Whether a run of a `dtype` target records its numerics: greedy, low precision."""
    return greedy and dtype in LOW_PRECISION


class NumericsRecorder:
    """Collects the rows that chose a generation's tokens; `finish` folds them."""

    def __init__(self, dtype: torch.dtype, top_k: int = TOP_K) -> None:
        self.out = TokenNumerics(dtype=str(dtype).removeprefix("torch."))
        self.top_k = top_k
        self._rows: list[torch.Tensor] = []          # each [n, V], a copy
        self._tokens: list[int] = []
        self._kept = 0

    def add(self, rows: torch.Tensor, tokens: list[int]) -> None:
        """rows: [n, V] logits, row i the pass's scores for the slot `tokens[i]` filled
        (n == len(tokens)). Copied: a static logits buffer may be overwritten."""
        if rows.shape[0] != len(tokens):
            raise ValueError(f"{rows.shape[0]} logit rows for {len(tokens)} tokens")
        self._rows.append(rows.detach().clone())
        self._tokens.extend(tokens)
        self._kept += len(tokens)
        if self._kept >= FLUSH_ROWS:
            self._fold()

    def _fold(self) -> None:
        if not self._rows:
            return
        rows = torch.cat(self._rows).float()                                   # [n, V]
        tokens = torch.tensor(self._tokens, dtype=torch.long, device=rows.device)
        k = min(self.top_k, rows.shape[-1])
        values, ids = rows.topk(k, dim=-1)                                     # [n, K]
        # Tier a, apart from the verifier: the emitted token's logit is its row's
        # maximum (a tie at the maximum is an argmax too, whichever index won).
        chosen = rows.gather(1, tokens[:, None]).squeeze(1)
        self.out.argmax_violations += int((chosen < values[:, 0]).sum())
        self.out.values.extend(values.tolist())
        self.out.ids.extend(ids.tolist())
        self._rows, self._tokens, self._kept = [], [], 0

    def finish(self) -> TokenNumerics:
        self._fold()
        return self.out


def teacher_force(forward: Any, prompt: list[int], tokens: list[int],
                  numerics: TokenNumerics) -> None:
    """Fill `numerics.teacher`: one pass of the target `forward` over `prompt` + `tokens`
    (all but the last, which no row scores) from a fresh cache, and per emitted token i
    the logits of `numerics.ids[i]` in the row that scored slot i. Runs untimed (after a
    generation's clock stopped); costs one prefill-shaped pass over prompt + output."""
    if len(numerics) != len(tokens):
        raise ValueError(f"{len(numerics)} recorded rows for {len(tokens)} tokens")
    if not tokens:
        return
    ids = prompt + tokens[:-1]
    cache = forward.new_cache(1, len(ids))
    with torch.inference_mode():
        logits = forward.forward(torch.tensor([ids], device=forward.device), cache)[0]   # [T, V]
        rows = logits[len(prompt) - 1:].float()                                  # [n, V]
        index = torch.tensor(numerics.ids, dtype=torch.long, device=rows.device)
        numerics.teacher = rows.gather(1, index).tolist()
