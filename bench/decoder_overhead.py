"""Our decoder vs Hugging Face transformers `generate`, method by method.

In one process, on the default model (SmolLM2-135M-Instruct) and real prompts, four
pairs are timed, each (ours, HF) on the same prompt one right after the other:

  ar     DecodeConfig()                                    vs generate(do_sample=False)
  ngram  DecodeConfig(method=ngram, k=K, ngram 1..N)       vs generate(prompt_lookup_num_tokens=K,
                                                                        max_matching_ngram_size=N)
  exit   DecodeConfig(method=sorted_exit, exits=(E,),      vs generate(assistant_early_exit=E,
                      thresholds=(0,), k=K, fixed)                     num_assistant_tokens=K, constant)
  draft  DecodeConfig(method=draft_model, k=K, fixed)      vs generate(assistant_model=draft,
                                                                        num_assistant_tokens=K, constant,
                                                                        assistant_confidence_threshold=0)

The draft is a truncated copy of the default model (its first D layers + final norm +
head; bench/_draft.py), loaded once with autotune's `load_model` so both sides use the
very same weights. Greedy everywhere, so every pair should produce identical tokens;
mismatches are reported, not hidden.

HF reads the assistant's K, schedule and confidence threshold from the *assistant
model's* `generation_config` (transformers 5.23, candidate_generator.py:
AssistedCandidateGenerator.__init__), not from the generate() kwargs, and for
`assistant_early_exit` the assistant is the target model itself. So those settings are
put on that model's generation_config for the HF call (and restored after), and passed
as kwargs as well.

Interleaving: for prompt i and pair j, ours runs first when i + j is even, HF first
otherwise; both sides of every pair are warmed up (untimed) before anything is timed.

Timing (perf_counter behind a device sync: autotune.measure.measurement.Clock), the same definition
on both sides:
  total ms/token  = wall time of the whole generate call (prompt ids in, new ids out,
                    prefill included) / new tokens. The headline ratio.
  decode ms/token = (that wall time - a separately timed prompt forward of the same side's
                    target, taken right before it) / (new tokens - 1); an estimate of the
                    per-token cost after the first token, with the same subtraction on
                    both sides.
Ratios are ours / HF (below 1 means we are faster; the goal is <= 0.85).

Usage: python bench/decoder_overhead.py [--prompts 8] [--max-new-tokens 64] [--pairs ar,ngram,exit,draft] [--quiet]
                                         [--device auto|cpu|cuda] [--dtype float32|bfloat16|float16]
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import statistics
import sys
import tempfile
import time
import warnings
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _draft import truncated_draft  # noqa: E402
from _spec_bench import workload_or_spec_bench  # noqa: E402

from autotune.schema.config import DecodeConfig  # noqa: E402
from autotune.decoding.decoder import Generation, SpeculativeDecoder  # noqa: E402
from autotune.measure.measurement import Clock  # noqa: E402
from autotune.models.loading import LoadedModel, load_model  # noqa: E402
from autotune.workloads.prompts import encode_prompt, load_workload  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
WARMUP_TOKENS = 8
PAIR_NAMES = ("ar", "ngram", "exit", "draft")


# --------------------------------------------------------------------------- records
@dataclass
class Side:
    """One side's run on one prompt."""

    tokens: list[int]
    total_s: float            # wall time of the whole generate call
    prefill_s: float          # separately timed prompt forward of the same side's target
    target_calls: int         # target forward passes (prefill included)
    gen: Generation | None = None   # ours only

    @property
    def n(self) -> int:
        return len(self.tokens)


@dataclass
class PromptResult:
    prompt_id: str
    category: str
    prompt_len: int
    ours: Side
    hf: Side


@dataclass
class Pair:
    name: str
    ours_desc: str
    hf_desc: str
    decoder: SpeculativeDecoder
    hf_kwargs: dict[str, Any]
    assistant: Any = None          # HF module whose generation_config carries K etc.
    k: int | None = None
    results: list[PromptResult] = field(default_factory=list)


# --------------------------------------------------------------------------- helpers
class TargetCallCounter:
    """Counts full-depth forward calls of an HF model (an early-exit assistant call runs
    the same module with config.num_hidden_layers lowered, and is not counted)."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.base_config = getattr(model, model.base_model_prefix).config
        self.full = self.base_config.num_hidden_layers
        self.calls = 0

    def __call__(self, module: Any, args: Any, kwargs: Any) -> None:
        if self.base_config.num_hidden_layers == self.full:
            self.calls += 1


@contextmanager
def assistant_settings(model: Any, k: int | None) -> Iterator[None]:
    """Fixed K, constant schedule, no confidence stop on the assistant's generation_config."""
    if model is None or k is None:
        yield
        return
    gc = model.generation_config
    keys = ("num_assistant_tokens", "num_assistant_tokens_schedule",
            "assistant_confidence_threshold")
    saved = {key: getattr(gc, key, None) for key in keys}
    gc.num_assistant_tokens = k
    gc.num_assistant_tokens_schedule = "constant"
    gc.assistant_confidence_threshold = 0.0
    try:
        yield
    finally:
        for key, value in saved.items():
            setattr(gc, key, value)


def ours_prefill(target: LoadedModel, ids: list[int], clock: Clock) -> float:
    x = torch.tensor([ids], dtype=torch.long, device=target.device)
    cache = target.forward.new_cache(1, len(ids) + 1)
    with torch.inference_mode():
        start = clock()
        logits = target.forward.forward(x, cache, last_only=True)
        int(logits[0, -1].argmax())
        return clock() - start


def hf_prefill(target: LoadedModel, ids: list[int], clock: Clock) -> float:
    x = torch.tensor([ids], dtype=torch.long, device=target.device)
    mask = torch.ones_like(x)
    with torch.inference_mode():
        start = clock()
        out = target.hf_model(input_ids=x, attention_mask=mask, use_cache=True, logits_to_keep=1)
        int(out.logits[0, -1].argmax())
        return clock() - start


def run_ours(pair: Pair, target: LoadedModel, ids: list[int], max_new: int,
             clock: Clock) -> Side:
    prefill = ours_prefill(target, ids, clock)
    with torch.inference_mode():
        start = clock()
        gen = pair.decoder.generate(ids, max_new, clock, None)
        total = clock() - start
    return Side(gen.tokens, total, prefill, len(gen.rounds) + 1, gen)


def run_hf(pair: Pair, target: LoadedModel, ids: list[int], max_new: int,
           clock: Clock) -> Side:
    prefill = hf_prefill(target, ids, clock)
    model = target.hf_model
    eos = sorted(target.eos_token_ids)
    pad = model.generation_config.pad_token_id
    pad = eos[0] if pad is None else pad
    counter = TargetCallCounter(model)
    handle = model.register_forward_pre_hook(counter, with_kwargs=True)
    try:
        with assistant_settings(pair.assistant, pair.k), torch.inference_mode():
            start = clock()
            x = torch.tensor([ids], dtype=torch.long, device=target.device)
            out = model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=max_new,
                                 do_sample=False, eos_token_id=eos, pad_token_id=pad,
                                 **pair.hf_kwargs)
            total = clock() - start
    finally:
        handle.remove()
    tokens = out[0, len(ids):].tolist()
    return Side(tokens, total, prefill, counter.calls)


def first_difference(a: list[int], b: list[int]) -> int:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


# --------------------------------------------------------------------------- summary
def summarise(pair: Pair) -> dict[str, Any]:
    rs = pair.results

    def total_ms(side: str) -> float:
        sides = [getattr(r, side) for r in rs]
        return 1000 * sum(s.total_s for s in sides) / sum(s.n for s in sides)

    def decode_ms(side: str) -> float | None:
        sides = [getattr(r, side) for r in rs if getattr(r, side).n > 1]
        steps = sum(s.n - 1 for s in sides)
        return 1000 * sum(s.total_s - s.prefill_s for s in sides) / steps if steps else None

    per_prompt = [(r.ours.total_s / r.ours.n) / (r.hf.total_s / r.hf.n) for r in rs]
    rounds = [t for r in rs for t in r.ours.gen.rounds]
    drafted = sum(t.drafted for t in rounds)
    accepted = sum(t.accepted for t in rounds)
    ours_tot, hf_tot = total_ms("ours"), total_ms("hf")
    ours_dec, hf_dec = decode_ms("ours"), decode_ms("hf")
    mismatched = [r for r in rs if r.ours.tokens != r.hf.tokens]
    return {
        "ours_total": ours_tot, "hf_total": hf_tot, "ratio_total": ours_tot / hf_tot,
        "median_prompt_ratio": statistics.median(per_prompt),
        "ours_decode": ours_dec, "hf_decode": hf_dec,
        "ratio_decode": ours_dec / hf_dec if ours_dec and hf_dec else None,
        "ours_tokens": sum(r.ours.n for r in rs), "hf_tokens": sum(r.hf.n for r in rs),
        "mismatched": mismatched,
        "tok_per_round": (accepted + len(rounds)) / len(rounds) if rounds else None,
        "acceptance": accepted / drafted if drafted else None,
        "ours_tok_per_fwd": sum(r.ours.n for r in rs) / sum(r.ours.target_calls for r in rs),
        "hf_tok_per_fwd": sum(r.hf.n for r in rs) / max(1, sum(r.hf.target_calls for r in rs)),
        "ours_prefill": 1000 * statistics.fmean(r.ours.prefill_s for r in rs),
        "hf_prefill": 1000 * statistics.fmean(r.hf.prefill_s for r in rs),
    }


def fmt(value: float | None, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


def print_table(pairs: list[Pair]) -> None:
    head = (f"{'pair':<6} {'ours ms/tok':>11} {'HF ms/tok':>9} {'ratio':>6} {'med':>5} | "
            f"{'ours dec':>8} {'HF dec':>7} {'ratio':>6} | {'tokens o/HF':>11} {'same':>6} | "
            f"{'tok/rnd':>7} {'accept':>6} {'tok/fwd o/HF':>12}")
    print(head)
    print("-" * len(head))
    for pair in pairs:
        s = summarise(pair)
        same = "yes" if not s["mismatched"] else f"{len(s['mismatched'])}/{len(pair.results)}x"
        print(f"{pair.name:<6} {fmt(s['ours_total']):>11} {fmt(s['hf_total']):>9} "
              f"{fmt(s['ratio_total'], '.3f'):>6} {fmt(s['median_prompt_ratio'], '.2f'):>5} | "
              f"{fmt(s['ours_decode']):>8} {fmt(s['hf_decode']):>7} "
              f"{fmt(s['ratio_decode'], '.3f'):>6} | "
              f"{str(s['ours_tokens']) + '/' + str(s['hf_tokens']):>11} {same:>6} | "
              f"{fmt(s['tok_per_round']):>7} {fmt(s['acceptance']):>6} "
              f"{fmt(s['ours_tok_per_fwd']) + '/' + fmt(s['hf_tok_per_fwd']):>12}")


# --------------------------------------------------------------------------- main
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--prompts", type=int, default=8, help="prompts, round-robin over categories")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--workload", default=None,
                   help="a workload (default: Spec-Bench, $AUTOTUNE_SPEC_BENCH or the shipped copy)")
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    p.add_argument("--dtype", default=None, choices=("float32", "bfloat16", "float16"),
                   help="default: float32 on CPU, bfloat16 on CUDA")
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    p.add_argument("--pairs", default=",".join(PAIR_NAMES),
                   help=f"comma-separated subset of {','.join(PAIR_NAMES)}")
    p.add_argument("--ngram-k", type=int, default=10,
                   help="prompt-lookup draft length K (HF's default num_output_tokens is 10)")
    p.add_argument("--ngram-max", type=int, default=3, help="longest n-gram matched (N)")
    p.add_argument("--k", type=int, default=4, help="draft tokens per round for exit and draft")
    p.add_argument("--exit-layer", type=int, default=6, help="early-exit layer E")
    p.add_argument("--draft-layers", type=int, default=6, help="layers D of the truncated draft")
    p.add_argument("--quiet", action="store_true", help="no per-prompt lines")
    return p.parse_args(argv)


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: Counter[str] = Counter()

    def emit(self, record: logging.LogRecord) -> None:
        self.messages[f"[{record.name}] {record.getMessage().strip().splitlines()[0][:240]}"] += 1


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    wanted = [n.strip() for n in args.pairs.split(",") if n.strip()]
    bad = [n for n in wanted if n not in PAIR_NAMES]
    if bad or not wanted:
        sys.exit(f"--pairs: unknown {bad}; choose from {','.join(PAIR_NAMES)}")
    import transformers
    from transformers.utils import logging as hf_logging

    t_load = time.perf_counter()
    target = load_model("default", device=args.device, dtype=args.dtype)
    dtype_name = str(target.dtype).removeprefix("torch.")
    workdir = tempfile.TemporaryDirectory(prefix="autotune-draft-")
    draft = None
    if "draft" in wanted:
        draft = truncated_draft(target, args.draft_layers, Path(workdir.name) / "draft",
                                str(target.device.type), dtype_name)
    load_s = time.perf_counter() - t_load
    # load_model quietens the transformers logger; we want to see (and count) HF warnings.
    hf_logging.set_verbosity_warning()
    collector = _Collect()
    logging.getLogger("transformers").addHandler(collector)

    source = workload_or_spec_bench(args.workload)
    prompts = load_workload(source, limit=args.prompts)
    encoded = [encode_prompt(target.tokenizer, p) for p in prompts]
    clock = Clock(target.device)
    k, nk, nmax, e = args.k, args.ngram_k, args.ngram_max, args.exit_layer
    assistant_kw = {"num_assistant_tokens": k, "num_assistant_tokens_schedule": "constant",
                    "assistant_confidence_threshold": 0.0}
    all_pairs = {
        "ar": lambda: Pair("ar", "DecodeConfig()", "generate(do_sample=False)",
                           SpeculativeDecoder(target, DecodeConfig()), {}),
        "ngram": lambda: Pair(
            "ngram", f"ngram k={nk} ngram_min=1 ngram_max={nmax}",
            f"prompt_lookup_num_tokens={nk} max_matching_ngram_size={nmax}",
            SpeculativeDecoder(target, DecodeConfig(method="ngram", k=nk, ngram_min=1,
                                                    ngram_max=nmax)),
            {"prompt_lookup_num_tokens": nk, "max_matching_ngram_size": nmax}),
        "exit": lambda: Pair(
            "exit", f"sorted_exit exits=({e},) thresholds=(0,) k={k} fixed",
            f"assistant_early_exit={e} num_assistant_tokens={k} constant conf=0",
            SpeculativeDecoder(target, DecodeConfig(method="sorted_exit", exits=(e,),
                                                    thresholds=(0.0,), k=k,
                                                    exit_policy="fixed")),
            {"assistant_early_exit": e, **assistant_kw}, assistant=target.hf_model, k=k),
        "draft": lambda: Pair(
            "draft", f"draft_model ({args.draft_layers}-layer copy) k={k} fixed",
            f"assistant_model=<same {args.draft_layers}-layer copy> num_assistant_tokens={k} "
            "constant conf=0",
            SpeculativeDecoder(target, DecodeConfig(method="draft_model", k=k,
                                                    exit_policy="fixed"), draft),
            {"assistant_model": draft.hf_model if draft else None, **assistant_kw},
            assistant=draft.hf_model if draft else None, k=k),
    }
    pairs = [all_pairs[name]() for name in wanted]

    print(f"python {platform.python_version()}  torch {torch.__version__}  "
          f"transformers {transformers.__version__}  platform {platform.platform()}")
    print(f"threads: torch.get_num_threads()={torch.get_num_threads()}  "
          f"interop={torch.get_num_interop_threads()}  os.cpu_count()={os.cpu_count()}  "
          f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}")
    gpu = f" ({torch.cuda.get_device_name(target.device)})" if target.device.type == "cuda" else ""
    print(f"device {target.device}{gpu}  dtype {dtype_name}  model {target.name} "
          f"({target.n_layers} layers)  loaded in {load_s:.1f}s")
    print(f"workload {source}: {len(prompts)} prompts "
          f"({', '.join(p.category for p in prompts)}), prompt tokens "
          f"{min(map(len, encoded))}..{max(map(len, encoded))}; max_new_tokens "
          f"{args.max_new_tokens}; greedy")
    for pair in pairs:
        print(f"  {pair.name:<6} ours: {pair.ours_desc}\n  {'':<6} HF:   {pair.hf_desc}")

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        # Warm-up, untimed: allocator growth, lazy imports, HF's generation-mode set-up.
        warm = min(WARMUP_TOKENS, args.max_new_tokens)
        for pair in pairs:
            run_ours(pair, target, encoded[0], warm, clock)
            run_hf(pair, target, encoded[0], warm, clock)
        load_before = os.getloadavg()
        t_bench = time.perf_counter()
        for i, (prompt, ids) in enumerate(zip(prompts, encoded)):
            for j, pair in enumerate(pairs):
                order = ("ours", "hf") if (i + j) % 2 == 0 else ("hf", "ours")
                sides = {}
                for side in order:
                    runner = run_ours if side == "ours" else run_hf
                    sides[side] = runner(pair, target, ids, args.max_new_tokens, clock)
                result = PromptResult(prompt.prompt_id, prompt.category, len(ids),
                                      sides["ours"], sides["hf"])
                pair.results.append(result)
                if not args.quiet:
                    o, h = result.ours, result.hf
                    print(f"  prompt {prompt.prompt_id:>5} {prompt.category:<14} len {len(ids):>4} "
                          f"{pair.name:<6} first={order[0]:<4} ours {1000 * o.total_s / o.n:7.2f} "
                          f"HF {1000 * h.total_s / h.n:7.2f} ms/tok ratio "
                          f"{(o.total_s / o.n) / (h.total_s / h.n):.3f} tokens {o.n}/{h.n}"
                          f"{'' if o.tokens == h.tokens else ' MISMATCH'}", flush=True)
        bench_s = time.perf_counter() - t_bench
        load_after = os.getloadavg()
    for w in caught:
        collector.messages[f"[{w.category.__name__}] {str(w.message).strip().splitlines()[0][:240]}"] += 1

    print()
    print(f"1-min load average before/after the timed runs: {load_before[0]:.2f} / "
          f"{load_after[0]:.2f} on {os.cpu_count()} cores (this run alone keeps it near "
          f"{torch.get_num_threads()}; more means other processes shared the CPU)")
    print(f"Timed run: {bench_s:.0f}s. ms/tok = wall time of the whole generate call / new "
          "tokens (prefill included), same on both sides;")
    print("  'dec' = (that wall time - a separately timed prompt forward of the same side) / "
          "(new tokens - 1); ratio = ours / HF (goal <= 0.85);")
    print("  med = median over prompts of the per-prompt total ratio; tok/rnd = ours' mean "
          "tokens per draft/verify round (accepted + 1);")
    print("  accept = ours' accepted / drafted; tok/fwd = new tokens per target forward pass "
          "(prefill pass included), ours / HF.")
    print()
    print_table(pairs)
    print()
    for pair in pairs:
        s = summarise(pair)
        print(f"{pair.name}: prompt-forward (prefill) ms mean ours {s['ours_prefill']:.1f} / "
              f"HF {s['hf_prefill']:.1f}")

    # Losslessness: ours vs HF per pair, and each side against its own AR run.
    print()
    problems = []
    for pair in pairs:
        for r in pair.results:
            if r.ours.tokens != r.hf.tokens:
                d = first_difference(r.ours.tokens, r.hf.tokens)
                problems.append(f"  {pair.name}: prompt {r.prompt_id} ({r.category}) ours {r.ours.n} "
                                f"vs HF {r.hf.n} tokens, first difference at new token {d}")
    if "ar" in wanted:
        ar = {r.prompt_id: r for r in next(p for p in pairs if p.name == "ar").results}
        for pair in pairs:
            if pair.name == "ar":
                continue
            for r in pair.results:
                base = ar[r.prompt_id]
                for side in ("ours", "hf"):
                    a, b = getattr(r, side).tokens, getattr(base, side).tokens
                    if a != b:
                        problems.append(f"  {pair.name}: prompt {r.prompt_id} {side} differs from "
                                        f"{side} AR at new token {first_difference(a, b)}")
    if problems:
        print("Token mismatches (greedy should be lossless):")
        print("\n".join(problems))
    else:
        print("Tokens: ours == HF for every pair and prompt, and every speculative run == its AR run.")

    if collector.messages:
        print()
        print("Warnings / transformers log messages during warm-up and timed runs (count x message):")
        for message, count in collector.messages.most_common():
            print(f"  {count:>3} x {message}")
    workdir.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
