"""llama.cpp as a measurement backend, through llama-cpp-python (the optional extra
`autotune[llamacpp]`; read at 0.3.36, docs/engines/llama_cpp.md).

The GGUF file runs as given (the default model's own file for `--model default`), on as
many threads as torch uses. A config runs as `Llama(..., draft_model=
LlamaPromptLookupDecoding(max_ngram_size, num_pred_tokens))` — the binding's one drafter
(its `LlamaDraftModel` has no draft-model implementation) — and the baseline as the same
`Llama` without a drafter: one instance per config, reused across prompts. Only configs
the `llama_cpp` export writes exactly are run: what is measured is what is deployed.

Decoding is `Llama.generate` over our token ids (the same ids every backend gets), greedy
as `temp=0` (llama.cpp's greedy sampler) with repeat penalty 1.0 (its generate() default
1.0; its server's request default is 1.1), stopped after `max_new_tokens` or an
end-of-generation token (`llama_token_is_eog`, llama.cpp's own rule). Timing: the clock
before the call, at the first token (after the prompt's evaluation: the prefill; the
drafter first runs after it) and after the last.

Rounds: the drafter is wrapped to record each draft and the sequence length it was
drafted at; a draft token counts as accepted while it equals the token generated at its
position (llama-cpp-python keeps a draft token exactly while it equals the token sampled
there, `Llama.generate`). They carry no draft / verify times.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.backends.base import BackendUnavailable, Clock
from autotune.common.errors import AutotuneError
from autotune.decoding.config import DecodeConfig

if TYPE_CHECKING:
    from autotune.decoding.decoder import Generation
    from autotune.models.loading import LoadedModel

NAME = "llama_cpp"
INSTALL = "pip install 'autotune[llama_cpp]' (builds llama-cpp-python from source, ~10 min)"
# Context room per instance: llama-cpp-python keeps a scores buffer of n_ctx x vocab
# floats when drafting (logits_all), so n_ctx is sized to the workload, not the model.
CONTEXT_STEP = 256


def installed() -> bool:
    """Whether llama-cpp-python is importable here."""
    return importlib.util.find_spec("llama_cpp") is not None


def _llama_cpp() -> Any:
    if not installed():
        raise BackendUnavailable(f"llama.cpp cannot measure here: llama-cpp-python is not "
                                 f"installed ({INSTALL})")
    import llama_cpp
    return llama_cpp


def gguf_for(model_spec: str) -> Path:
    """The GGUF file llama.cpp runs for `model_spec` (default: the default model's own)."""
    from autotune.models.loading import DEFAULT_MODEL, default_gguf
    if model_spec == DEFAULT_MODEL:
        return default_gguf()
    path = Path(model_spec).expanduser()
    if path.suffix != ".gguf":
        raise BackendUnavailable(f"llama.cpp runs GGUF files and --model {model_spec} is "
                                 "not one: give --model FILE.gguf")
    return path


class _RecordingLookup:
    """LlamaPromptLookupDecoding that records (sequence length, draft) per call."""

    def __init__(self, lookup: Any) -> None:
        self.lookup = lookup
        self.calls: list[tuple[int, list[int]]] = []

    def __call__(self, input_ids: Any, /, **kwargs: Any) -> Any:
        draft = self.lookup(input_ids, **kwargs)
        self.calls.append((int(input_ids.shape[0]), [int(t) for t in draft]))
        return draft


class LlamaCppRunner:
    """One config (or the baseline) in one `Llama` instance."""

    def __init__(self, backend: "LlamaCppBackend", config: DecodeConfig) -> None:
        lib = backend.lib
        self.config = config
        self.drafter = None
        kwargs: dict[str, Any] = {}
        if config.method == "ngram":
            from llama_cpp.llama_speculative import LlamaPromptLookupDecoding
            self.drafter = _RecordingLookup(LlamaPromptLookupDecoding(
                max_ngram_size=config.ngram_max, num_pred_tokens=config.k))
            # Required with a drafter: 0.3.36 sizes its scores buffer from the argument.
            kwargs.update(draft_model=self.drafter, logits_all=True)
        self.llm = lib.Llama(model_path=str(backend.gguf), n_ctx=backend.n_ctx,
                             n_threads=backend.threads, n_threads_batch=backend.threads,
                             seed=backend.seed, verbose=False, **kwargs)
        self.vocab = self.llm._model.vocab
        self.lib = lib

    def _is_eog(self, token: int) -> bool:
        return bool(self.lib.llama_vocab_is_eog(self.vocab, token))

    def generate(self, prompt: list[int], max_new_tokens: int, clock: Clock,
                 generator: Any = None, *, category: str | None = None) -> "Generation":
        from autotune.decoding.decoder import Generation
        config = self.config
        if len(prompt) + max_new_tokens + config.k + 1 > self.llm.n_ctx():
            raise AutotuneError(f"a prompt of {len(prompt)} tokens + {max_new_tokens} "
                                f"exceeds llama.cpp's context of {self.llm.n_ctx()}")
        if generator is not None and config.temperature > 0:
            self.llm.set_seed(int(generator.initial_seed()) % 2**31)
        if self.drafter is not None:
            self.drafter.calls.clear()
        sampling = ({"temp": 0.0} if config.temperature == 0 else
                    {"temp": config.temperature, "top_p": config.top_p, "top_k": 0,
                     "min_p": 0.0})
        tokens: list[int] = []
        # No prefix reuse from the previous run (llama-cpp-python would keep a common
        # prefix's cache): every run pays its own prefill, as in our decoder.
        self.llm.reset()
        start = clock()
        first = start
        stream = self.llm.generate(prompt, repeat_penalty=1.0, reset=True, **sampling)
        try:
            for token in stream:
                if not tokens:
                    first = clock()
                tokens.append(int(token))
                if len(tokens) >= max_new_tokens or self._is_eog(int(token)):
                    break
        finally:
            stream.close()
        end = clock()
        return Generation(prompt_len=len(prompt), tokens=tokens, prefill_s=first - start,
                          decode_s=end - first, rounds=self._rounds(prompt, tokens),
                          cache_bytes=0, timed_parts=False)

    def _rounds(self, prompt: list[int], tokens: list[int]) -> list[Any]:
        from autotune.decoding.decoder import RoundTrace
        if self.drafter is None:
            return []
        sequence = prompt + tokens
        out = []
        for length, draft in self.drafter.calls:
            after = sequence[length:]
            if not after:
                break                                  # drafted past the last token
            accepted = 0
            while accepted < len(draft) and accepted < len(after) \
                    and draft[accepted] == after[accepted]:
                accepted += 1
            emitted = min(accepted + 1, len(after))
            out.append(RoundTrace(drafted=len(draft), accepted=min(accepted, emitted),
                                  emitted=emitted, confidences=[], draft_s=0.0,
                                  verify_s=0.0, verified=len(draft) + 1,
                                  draft_depth=len(draft)))
        return out

    def close(self) -> None:
        self.llm.close()


class LlamaCppBackend:
    """`Backend` over llama-cpp-python on one GGUF file."""

    name = NAME
    device = "cpu"
    memory_kind = "not measured (llama.cpp)"
    # Its batched passes (the prompt, a draft's verification) break near-ties unlike its
    # one-token passes (tests/test_backends.py shows it on the default model): its
    # speculative output may differ from its greedy output without any drafting fault.
    token_exact = False

    def __init__(self, gguf: Path, threads: int | None = None, n_ctx: int = 2048,
                 seed: int = 0) -> None:
        self.lib = _llama_cpp()
        if not gguf.is_file():
            raise BackendUnavailable(f"GGUF file not found: {gguf}")
        self.gguf = gguf
        import torch
        self.threads = threads or torch.get_num_threads() or os.cpu_count() or 1
        self.n_ctx = n_ctx
        self.seed = seed
        version = getattr(self.lib, "__version__", "?")
        self.label = f"llama.cpp (llama-cpp-python {version}, {gguf.name})"

    @classmethod
    def for_model(cls, model_spec: str, target: "LoadedModel", draft: "LoadedModel | None",
                  longest_prompt: int, max_new_tokens: int) -> "LlamaCppBackend":
        """The backend for `--model model_spec` (`target` is our copy of the same model,
        whose tokenizer encodes the prompts), its context sized to the workload."""
        if draft is not None:
            raise BackendUnavailable("llama-cpp-python offers prompt lookup only (no "
                                     "draft-model drafter): drop --draft for --target "
                                     "llama_cpp")
        backend = cls(gguf_for(model_spec))
        backend.fit_context(longest_prompt, max_new_tokens)
        return backend

    def fit_context(self, longest_prompt: int, max_new_tokens: int,
                    k: int | None = None) -> None:
        """Size each instance's context to the workload (prompt + budget + a draft of
        `k`, default the longest draft any config may propose)."""
        from autotune.decoding.decoder import MAX_DRAFT_TOKENS
        need = longest_prompt + max_new_tokens + (MAX_DRAFT_TOKENS if k is None else k) + 2
        self.n_ctx = -(-need // CONTEXT_STEP) * CONTEXT_STEP

    def runner(self, config: DecodeConfig) -> LlamaCppRunner:
        if config.method != "none":
            from autotune.exports import engine_losses
            losses = engine_losses(config, NAME, False)
            if losses:
                raise AutotuneError(f"llama.cpp cannot run it exactly: {losses[0]}")
        return LlamaCppRunner(self, config)

    def weights_bytes(self, config: DecodeConfig) -> int | None:
        return None

    def close(self) -> None:
        pass
