"""`autotune generate`: run one config on one prompt, streaming the text as it is
accepted, then print τ, acceptance and ms/token of that generation.

The figures are one generation's, after a short untimed warm-up; `autotune measure`
is the place for figures to compare.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any, Callable, TextIO

from autotune.cli.measure import frozen_defaults
from autotune.common.errors import AutotuneError
from autotune.schema.config import (
    config_from_mapping,
    load_config_file,
    parse_assignments,
)
from autotune.schema.methods import get_method
from autotune.common.files import read_json
from autotune.frozen.checks import is_frozen
from autotune.frozen.checks import load_frozen_config
from autotune.workloads.prompts import Prompt, encode_prompt

WARMUP_TOKENS = 8


class TextStream:
    """Turns token ids into text as they arrive and writes only the new part.

    Decoding the whole sequence each time (rather than token by token) keeps
    multi-token characters and leading-space rules right; a trailing U+FFFD means a
    character is still incomplete, so it waits for the next round.
    """

    def __init__(self, tokenizer: Any, out: TextIO, skip: frozenset[int]) -> None:
        self.tokenizer, self.out, self.skip = tokenizer, out, skip
        self.ids: list[int] = []
        self.shown = 0

    def __call__(self, new_ids: list[int]) -> None:
        self.ids.extend(i for i in new_ids if i not in self.skip)
        text = self.tokenizer.decode(self.ids, skip_special_tokens=True)
        if text.endswith("\ufffd"):
            return
        if len(text) > self.shown:
            self.out.write(text[self.shown:])
            self.out.flush()
            self.shown = len(text)

    def finish(self) -> str:
        text = self.tokenizer.decode(self.ids, skip_special_tokens=True)
        if len(text) > self.shown:
            self.out.write(text[self.shown:])
        self.out.write("\n")
        self.out.flush()
        return text


class _Timed:
    """Wraps the stream callback and adds up its time during the decode phase, which
    is printing, not decoding (the first call, with the prefill's token, is not)."""

    def __init__(self, inner: Callable[[list[int]], None]) -> None:
        self.inner, self.seconds, self.calls = inner, 0.0, 0

    def __call__(self, ids: list[int]) -> None:
        start = time.perf_counter()
        self.inner(ids)
        if self.calls:
            self.seconds += time.perf_counter() - start
        self.calls += 1


def generation_stats(gen: Any, streaming_s: float = 0.0) -> dict[str, Any]:
    """τ (tokens per verify round), acceptance and decode ms/token of one Generation;
    `streaming_s` (time spent writing text during decode) is taken out of ms/token."""
    rounds = gen.rounds
    drafted = sum(r.drafted for r in rounds)
    accepted = sum(r.accepted for r in rounds)
    decoded = gen.decoded
    return {
        "tokens": len(gen.tokens),
        "rounds": len(rounds),
        "tau": (accepted + len(rounds)) / len(rounds) if rounds else None,
        "acceptance_rate": accepted / drafted if drafted else None,
        "ms_per_token": (1000 * (gen.decode_s - streaming_s) / decoded
                         if decoded > 0 else None),
        "prefill_ms": 1000 * gen.prefill_s,
    }


def format_stats(stats: dict[str, Any]) -> str:
    def num(key: str, spec: str) -> str:
        value = stats.get(key)
        return "-" if value is None else format(value, spec)
    return (f"{stats['tokens']} tokens in {stats['rounds']} rounds: "
            f"tau {num('tau', '.2f')} tokens/round, acceptance {num('acceptance_rate', '.3f')}, "
            f"{num('ms_per_token', '.2f')} ms/token (decode), prefill {num('prefill_ms', '.1f')} ms")


def run_generate_command(args: argparse.Namespace) -> int:
    if not args.prompt.strip():
        raise AutotuneError("--prompt is empty")
    doc = None
    if args.config and args.config.endswith(".json") and is_frozen(read_json(args.config)):
        doc = load_frozen_config(args.config)
    frozen_defaults(args, doc)
    if args.max_new_tokens < 1:
        raise AutotuneError("--max-new-tokens must be at least 1")
    base = config_from_mapping(load_config_file(args.config)) if args.config else None
    config = config_from_mapping(parse_assignments(args.assignments), base).validate()
    get_method(config.method).require_draft(args.draft is not None)

    # torch, transformers (and optuna for `describe`) load here, once the inputs are good.
    import torch

    from autotune.decoding.decoder import SpeculativeDecoder
    from autotune.schema.label import describe
    from autotune.measure.measurement import Clock
    from autotune.models.loading import load_model
    from autotune.models.trained import load_draft
    target = load_model(args.model, args.device, args.dtype, args.trust_remote_code)
    draft = load_draft(args.draft, target, args.device, args.dtype, args.trust_remote_code)
    decoder = SpeculativeDecoder(target, config, draft)
    ids = encode_prompt(target.tokenizer, Prompt(args.prompt, "cli", "prompt"))
    clock = Clock(target.device)

    def generator() -> torch.Generator:
        return torch.Generator(device=target.device).manual_seed(args.seed)

    print(f"autotune: {describe(config.to_dict())} on {target.name}", file=sys.stderr, flush=True)
    decoder.generate(ids, min(WARMUP_TOKENS, args.max_new_tokens), clock, generator())
    stream = TextStream(target.tokenizer, sys.stdout, target.eos_token_ids)
    timed = _Timed(stream)
    gen = decoder.generate(ids, args.max_new_tokens, clock, generator(), on_tokens=timed)
    stream.finish()
    print(format_stats(generation_stats(gen, timed.seconds)), file=sys.stderr)
    return 0
