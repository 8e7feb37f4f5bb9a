"""How far apart bfloat16 / float16 rounding puts the logits of a near-tie: the figures
behind `autotune.measure.divergence.ULPS`.

For each dtype, the default model (SmolLM2-135M) on the CPU decodes Spec-Bench prompts
greedily with the AR baseline and with a few speculative configs (ngram, layer_skip,
sorted_exit, a layer_skip tree). At every prompt whose output differs from AR's it prints
the first differing position and both passes' gaps in ulps of the dtype at the logits'
magnitude (AR's logit(a) - logit(b), the speculative pass's logit(b) - logit(a)), and the
verdict at the chosen ULPS. Beside them, the noise scale: the largest |difference|
between a 1-token pass and one multi-token pass over the same tokens, at the same
positions, over the top-16 logits of each row, in ulps at the row's magnitude; and per
run (AR, chunked AR, each config) the widest per-logit drift of its recorded rows from
its clean teacher-forced pass (tier b at every position, `divergence.drift`): what
`divergence.NOISE_ULPS` must cover. Chunked AR (`measure/near_tie_baseline.py`) is AR
against itself under another pass shape: the near-tie rate no bug is needed for.

    .venv/bin/python bench/near_ties.py [--prompts 16] [--tokens 48] [--dtypes bfloat16 float16]

Not a timing bench: it may run beside others.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autotune.schema.config import DecodeConfig  # noqa: E402
from autotune.decoding.decoder import SpeculativeDecoder  # noqa: E402
from autotune.measure import divergence  # noqa: E402
from autotune.measure.near_tie_baseline import chunked_ar, far_above  # noqa: E402
from autotune.models.loading import LoadedModel, load_model  # noqa: E402
from autotune.workloads.prompts import encode_prompt, load_workload  # noqa: E402

CONFIGS: dict[str, dict] = {
    "ngram": dict(method="ngram", k=5, ngram_min=1, ngram_max=3),
    "layer_skip": dict(method="layer_skip", k=4, attn_skip=(3, 8, 13, 19, 24),
                       mlp_skip=(5, 20)),
    "sorted_exit": dict(method="sorted_exit", k=6, exit_policy="confidence", gamma=0.5,
                        exits=(8, 16, 24), thresholds=(0.9, 0.6)),
    "tree": dict(method="layer_skip", attn_skip=(3, 8, 13, 19, 24), mlp_skip=(5, 20),
                 tree_width=3, tree_depth=4, tree_tokens=16),
}
NOISE_WIDTH = 8          # tokens in the multi-token pass the noise scale compares


def _no_clock() -> float:
    return 0.0


@torch.inference_mode()
def noise_scale(model: LoadedModel, ids: list[int], continuation: list[int]) -> float:
    """The largest |logit difference| in ulps (at the row's magnitude) between one pass
    over `continuation[:NOISE_WIDTH]` and one-token passes over the same tokens, after a
    shared prefill of `ids`; over each row's top 16 (the 1-token pass's)."""
    forward, dtype = model.forward, str(model.dtype).removeprefix("torch.")
    block = continuation[:NOISE_WIDTH]
    cache = forward.new_cache(1, len(ids) + len(block) + 1)
    forward.forward(torch.tensor([ids]), cache, last_only=True)
    base = cache.length
    multi = forward.forward(torch.tensor([block]), cache, start=base)[0].float()   # [n, V]
    cache.crop(base)
    worst = 0.0
    for i, token in enumerate(block):
        single = forward.forward(torch.tensor([[token]]), cache, start=base + i)[0, -1].float()
        values, top = single.topk(16)
        unit = divergence.ulp(dtype, float(values[0]))
        worst = max(worst, float((multi[i, top] - values).abs().max()) / unit)
    return worst


def run(dtype: str, n_prompts: int, tokens: int) -> dict:
    model = load_model("default", "cpu", dtype)
    prompts = load_workload("spec_bench", limit=n_prompts)
    encoded = [encode_prompt(model.tokenizer, p) for p in prompts]
    started = time.perf_counter()
    ar = SpeculativeDecoder(model, DecodeConfig())
    baseline = [ar.generate(ids, tokens, _no_clock) for ids in encoded]
    print(f"[{dtype}] AR done in {time.perf_counter() - started:.0f} s", flush=True)
    noise = [noise_scale(model, ids, g.tokens) for ids, g in zip(encoded, baseline)]
    print(f"[{dtype}] noise scale (1-token vs {NOISE_WIDTH}-token pass, top-16): max "
          f"{max(noise):.1f} ulps, median {sorted(noise)[len(noise) // 2]:.1f}", flush=True)
    ar_drift = _worst_drift(baseline)
    print(f"[{dtype}] AR drift from its teacher-forced pass: {ar_drift:.1f} ulps", flush=True)
    out: dict = {"dtype": dtype, "prompts": n_prompts, "tokens": tokens,
                 "noise_ulps_max": max(noise), "noise_ulps": noise, "ar_drift_ulps": ar_drift,
                 "configs": {}}
    chunked = [chunked_ar(model, ids, g.tokens) for ids, g in zip(encoded, baseline)]
    base_ties = None
    for name, knobs in {"chunked_ar": None, **CONFIGS}.items():
        decoder = SpeculativeDecoder(model, DecodeConfig(**knobs)) if knobs else None
        counts = {kind.value: 0 for kind in divergence.Kind}
        rows = []
        generated = 0
        runs = []
        for index, (prompt, ids, base) in enumerate(zip(prompts, encoded, baseline)):
            spec = (decoder.generate(ids, tokens, _no_clock) if decoder is not None
                    else chunked[index])
            runs.append(spec)
            generated += len(spec.tokens)
            verdict = divergence.classify(base, spec)
            counts[verdict.kind.value] += 1
            if verdict.kind is divergence.Kind.EXACT:
                continue
            p = verdict.position
            logits = [base.numerics.logit(p, t) for t in (verdict.ar_token, verdict.spec_token)] \
                if base.numerics is not None and p is not None else [None, None]
            magnitude = max(abs(x) for x in logits if x is not None) if any(
                x is not None for x in logits) else 1.0
            ar_ulps, spec_ulps = verdict.gaps_in_ulps(dtype, magnitude)
            row = {"prompt": prompt.prompt_id, "position": p, "kind": verdict.kind.value,
                   "ar_gap_ulps": ar_ulps, "spec_gap_ulps": spec_ulps,
                   "logit": magnitude, "why": verdict.why}
            rows.append(row)
            print(f"  {name:12s} {prompt.prompt_id:>6s} @{p}: AR gap {_f(ar_ulps)} ulps, "
                  f"spec gap {_f(spec_ulps)} ulps (|logit| {magnitude:.2f}, ulp "
                  f"{divergence.ulp(dtype, magnitude):.4g}) -> {verdict.kind.value}"
                  f"{' (' + verdict.why + ')' if verdict.why else ''}", flush=True)
        drift = _worst_drift(runs)
        flagged = base_ties is not None and far_above(counts["near_tie"], base_ties, n_prompts)
        base_ties = counts["near_tie"] if base_ties is None else base_ties
        print(f"[{dtype}] {name}: {counts} over {generated} tokens, drift {drift:.1f} ulps"
              f"{' FAR ABOVE chunked AR' if flagged else ''}", flush=True)
        out["configs"][name] = {"counts": counts, "divergences": rows, "tokens": generated,
                                "drift_ulps": drift, "near_ties_far_above": flagged}
    return out


def _worst_drift(runs: list) -> float:
    """The widest per-logit drift (ulps) of any run's recorded rows from its clean
    teacher-forced pass."""
    found = [divergence.drift(g.numerics) for g in runs if g.numerics is not None]
    return max((d[1] for d in found if d is not None), default=float("nan"))


def _f(x: float | None) -> str:
    return "missing" if x is None else f"{x:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--dtypes", nargs="+", default=["bfloat16", "float16"])
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args()
    print(f"ULPS = {divergence.ULPS}", flush=True)
    results = [run(d, args.prompts, args.tokens) for d in args.dtypes]
    worst = max((r for res in results for c in res["configs"].values()
                 for r in c["divergences"] if r["ar_gap_ulps"] is not None
                 and r["spec_gap_ulps"] is not None),
                key=lambda r: max(r["ar_gap_ulps"], r["spec_gap_ulps"]), default=None)
    if worst is not None:
        print(f"widest divergence gap: {max(worst['ar_gap_ulps'], worst['spec_gap_ulps']):.1f} "
              f"ulps ({worst['prompt']} @{worst['position']})")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    if any(math.isnan(n) for res in results for n in res["noise_ulps"]):
        print("warning: NaN in the noise scale")


if __name__ == "__main__":
    main()
