"""HF transformers as a measurement backend: `generate()` itself, with the config's HF
export (the files `autotune export --format hf` writes, applied as its launch.md says:
autotune/hf_assisted.py) on the target and the assistant — prompt lookup, an assistant
model, early exit, the K schedule and the confidence threshold, as transformers runs them.

One runner per config: its export is written once to a temporary folder and reused for
every prompt. A config the HF export cannot express exactly is refused (one line): what
is measured here is what `--format hf` deploys.

Timing (`Runner.generate`): the clock is read before the call, after transformers'
first pass (a StoppingCriteria sees every step, assisted rounds included) and after the
call. The first pass is the prefill; in assisted decoding it also verifies the first
draft, so the tokens it yields (`Generation.first_tokens`) are not counted as decode
tokens, and decode time per token is the rest of the call over the rest of the tokens, as
for the engine's own decoding without speculation. Rounds (drafted, num_matches) are
recorded where transformers counts them (`hf_assisted.recording`); they carry no draft /
verify times (`timed_parts` False).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import torch
import transformers
from transformers import StoppingCriteria, StoppingCriteriaList

from autotune.backends.base import BackendBase, BackendUnavailable, Clock, RunnerBase
from autotune.backends.hf_assisted import applied, recording
from autotune.common.errors import AutotuneError
from autotune.schema.config import DecodeConfig
from autotune.decoding.decoder import Generation, RoundTrace
from autotune.schema.methods import get_method
from autotune.models.loading import LoadedModel

NAME = "hf"


class _FirstStep(StoppingCriteria):
    """Reads the clock (and the length) at transformers' first step; never stops."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.at: tuple[float, int] | None = None

    def __call__(self, input_ids: torch.LongTensor, scores: Any, **kwargs: Any
                 ) -> torch.BoolTensor:
        if self.at is None:
            self.at = (self.clock(), int(input_ids.shape[-1]))
        return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)


class HFRunner(RunnerBase):
    """One config in transformers' generate(); method `none` is plain generate()."""

    def __init__(self, backend: "HFBackend", config: DecodeConfig,
                 folder: Path | None) -> None:
        self.backend = backend
        self.config = config
        self.folder = folder
        uses_draft = get_method(config.method).uses_draft and backend.draft is not None
        self.assistant = backend.draft.hf_model if uses_draft else None

    @torch.no_grad()
    def generate(self, prompt: list[int], max_new_tokens: int, clock: Clock,
                 generator: torch.Generator | None = None, *,
                 category: str | None = None) -> Generation:
        model = self.backend.target.hf_model
        ids = torch.tensor([prompt], device=model.device)
        mask = torch.ones_like(ids)
        sampling: dict[str, Any] = {"do_sample": False}
        if self.config.temperature > 0:
            sampling = {"do_sample": True, "temperature": self.config.temperature,
                        "top_p": self.config.top_p, "top_k": 0}
            if generator is not None:
                torch.manual_seed(generator.initial_seed())
        first = _FirstStep(clock)
        stop = StoppingCriteriaList([first])
        if self.folder is None:
            start = clock()
            seq = model.generate(ids, attention_mask=mask, max_new_tokens=max_new_tokens,
                                 stopping_criteria=stop, **sampling)
            end = clock()
            rounds: list[tuple[int, int]] = []
        else:
            with applied(self.folder, model, self.assistant) as kwargs:
                with recording() as rounds:
                    start = clock()
                    # The export's own sampling fields are on the target's config.
                    seq = model.generate(ids, attention_mask=mask,
                                         max_new_tokens=max_new_tokens,
                                         assistant_model=self.assistant,
                                         stopping_criteria=stop, **kwargs)
                    end = clock()
        tokens = seq[0, len(prompt):].tolist()
        first_at, first_len = first.at if first.at is not None else (end, len(prompt) + len(tokens))
        traces = [RoundTrace(drafted=d, accepted=m, emitted=m + 1, confidences=[],
                             draft_s=0.0, verify_s=0.0, verified=d + 1, draft_depth=d)
                  for d, m in rounds]
        return Generation(prompt_len=len(prompt), tokens=tokens,
                          prefill_s=first_at - start, decode_s=end - first_at,
                          rounds=traces, cache_bytes=0,
                          first_tokens=max(first_len - len(prompt), 1), timed_parts=False)


class HFBackend(BackendBase):
    """`Backend` over transformers' generate() on the loaded target (and draft)."""

    name = NAME
    memory_kind = "not measured (HF generate)"
    # Its verify pass is the same forward as its one-token passes (float32 here: the
    # assisted output equals plain greedy, tests/test_hf_client.py).
    token_exact = True

    def __init__(self, target: LoadedModel, draft: LoadedModel | None = None) -> None:
        if target.hf_model is None:
            raise BackendUnavailable(f"{target.name} has no transformers model to run "
                                     "generate() on")
        self.target = target
        self.draft = draft
        self.label = f"HF transformers {transformers.__version__} generate()"
        self.device = str(target.device)
        self._folder = tempfile.TemporaryDirectory(prefix="autotune-hf-")
        self._count = 0

    def runner(self, config: DecodeConfig) -> HFRunner:
        if config.method == "none":
            return HFRunner(self, config, None)
        from autotune.exports import engine_losses, export
        losses = engine_losses(config, "hf", self.draft is not None)
        if losses:
            raise AutotuneError(f"HF transformers cannot run it exactly: {losses[0]}")
        self._count += 1
        folder = Path(self._folder.name) / f"config{self._count}"
        for rel, text in export(self._frozen(config), "hf").files.items():
            path = folder / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        return HFRunner(self, config, folder / "hf")

    def _frozen(self, config: DecodeConfig) -> dict[str, Any]:
        from autotune.frozen.schema import SCHEMA
        doc: dict[str, Any] = {"schema": SCHEMA, "params": config.to_dict(),
                               "model": {"spec": self.target.name, "id": self.target.name,
                                         "n_layers": self.target.n_layers}}
        if self.draft is not None:
            doc["draft"] = {"spec": self.draft.name, "id": self.draft.name,
                            "n_layers": self.draft.n_layers}
        return doc

    def weights_bytes(self, config: DecodeConfig) -> int | None:
        return None

    def close(self) -> None:
        self._folder.cleanup()
