"""How well the replay tier predicts measurement, and how much cheaper it screens.

On the default model (a truncated copy of its first layers as the separate draft, as in
the tests) and Spec-Bench prompts: a set of configs spanning every method, exit policy
and tree shape is replayed (`autotune.replay.Replayer`, cost parts measured first) and
measured (`measure.measure_arms`: every config and one shared AR baseline interleaved per
prompt). Printed per config: τ replayed vs measured (and whether replay claims τ exact),
ms/token predicted vs measured, speedup predicted vs measured; then the Spearman rank
correlation of predicted vs measured ms/token and speedup, the median absolute error of
ms/token (raw, and with the prediction scaled by the AR baseline measured in the same
run, which removes the machine's drift between the parts' measurement and the run), a
table per method of where replay is exact, and screening throughput (configs per CPU
minute: replay vs measurement, for K/policy knobs over a known table and for new skip
masks).

Usage: python bench/replay_fidelity.py [--prompts 6] [--max-new-tokens 32] [--csv FILE]
Run it on a quiet machine: measurement shares two cores with nothing else.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _draft import truncated_draft  # noqa: E402
from _spec_bench import workload_or_spec_bench  # noqa: E402

from autotune.schema.config import DecodeConfig  # noqa: E402
from autotune.measure.measurement import measure_arms  # noqa: E402
from autotune.models.loading import load_model  # noqa: E402
from autotune.replay.run import Replayer  # noqa: E402
from autotune.workloads.prompts import load_workload, round_robin  # noqa: E402



def configs(n_layers: int, draft_layers: int) -> dict[str, DecodeConfig]:
    """Every method x policies x shapes: 36 configs."""
    upper = tuple(range(n_layers // 2, n_layers - 1, 2))
    sparse = tuple(range(n_layers // 2, n_layers - 1, 4))
    mlp = (n_layers - 6, n_layers - 3)
    d3 = (max(1, draft_layers // 3), max(2, 2 * draft_layers // 3), draft_layers)
    t3 = (n_layers // 3, 2 * n_layers // 3, n_layers - 4)
    out: dict[str, dict[str, Any]] = {
        "ngram k2 n1-3": dict(method="ngram", k=2, ngram_min=1, ngram_max=3),
        "ngram k4 n1-3": dict(method="ngram", k=4, ngram_min=1, ngram_max=3),
        "ngram k8 n2-4": dict(method="ngram", k=8, ngram_min=2, ngram_max=4),
        "ngram k5 n5 (vLLM)": dict(method="ngram", k=5, ngram_min=5, ngram_max=5),
        "ngram heur k3 n3-5": dict(method="ngram", k=3, ngram_min=3, ngram_max=5,
                                   exit_policy="heuristic"),
        "ngram adaptive k6": dict(method="ngram", k=6, ngram_min=1, ngram_max=4,
                                  exit_policy="adaptive", gamma=0.9),
        "draft k1": dict(method="draft_model", k=1),
        "draft k2": dict(method="draft_model", k=2),
        "draft k4": dict(method="draft_model", k=4),
        "draft k6": dict(method="draft_model", k=6),
        "draft heur k3": dict(method="draft_model", k=3, exit_policy="heuristic"),
        "draft conf k6 γ.5": dict(method="draft_model", k=6, exit_policy="confidence",
                                  gamma=0.5),
        "draft adaptive k8": dict(method="draft_model", k=8, exit_policy="adaptive", gamma=0.6),
        "draft static tree 5": dict(method="draft_model",
                                    tree_choices=((0,), (1,), (0, 0), (0, 1), (0, 0, 0))),
        "draft tree w2 d3": dict(method="draft_model", tree_width=2, tree_depth=3),
        "draft tree w3 d4 t8": dict(method="draft_model", tree_width=3, tree_depth=4,
                                    tree_tokens=8),
        "skip upper k1": dict(method="layer_skip", k=1, attn_skip=upper),
        "skip upper k3": dict(method="layer_skip", k=3, attn_skip=upper),
        "skip upper k6": dict(method="layer_skip", k=6, attn_skip=upper),
        "skip sparse+mlp k4": dict(method="layer_skip", k=4, attn_skip=sparse, mlp_skip=mlp),
        "skip upper heur k2": dict(method="layer_skip", k=2, attn_skip=upper,
                                   exit_policy="heuristic"),
        "skip upper conf k8 γ.6": dict(method="layer_skip", k=8, attn_skip=upper,
                                       exit_policy="confidence", gamma=0.6),
        "skip DV adaptive k8": dict(method="layer_skip", k=8, attn_skip=upper,
                                    exit_policy="adaptive", gamma=0.8, target_acceptance=0.9),
        "skip tree w2 d3": dict(method="layer_skip", attn_skip=upper, tree_width=2,
                                tree_depth=3),
        "skip static tree 5": dict(method="layer_skip", attn_skip=upper,
                                   tree_choices=((0,), (1,), (0, 0), (0, 1), (0, 0, 0))),
        "exit target k1": dict(method="sorted_exit", k=1, exits=t3, thresholds=(0.9, 0.6)),
        "exit target k3": dict(method="sorted_exit", k=3, exits=t3, thresholds=(0.9, 0.6)),
        "exit target conf k6": dict(method="sorted_exit", k=6, exits=t3, thresholds=(0.8, 0.5),
                                    exit_policy="confidence", gamma=0.5),
        "exit draft k2": dict(method="sorted_exit", k=2, exits=d3, thresholds=(0.8, 0.5)),
        "exit draft k4": dict(method="sorted_exit", k=4, exits=d3, thresholds=(0.8, 0.5)),
        "exit draft tree w2 d3": dict(method="sorted_exit", exits=d3, thresholds=(0.8, 0.5),
                                      tree_width=2, tree_depth=3),
        "exit target tree w2 d2": dict(method="sorted_exit", exits=t3, thresholds=(0.9, 0.6),
                                       tree_width=2, tree_depth=2),
    }
    return {name: DecodeConfig(**knobs) for name, knobs in out.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=6)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--draft-layers", type=int, default=10)
    parser.add_argument("--csv", default=None)
    args = parser.parse_args()

    target = load_model("default", "cpu", "float32")
    work = Path(tempfile.mkdtemp(prefix="replay-fidelity-"))
    draft = truncated_draft(target, args.draft_layers, work / "draft", "cpu", "float32")
    source = workload_or_spec_bench()
    prompts = round_robin(load_workload(source), args.prompts)
    grid = configs(target.n_layers, draft.n_layers)
    # The sorted_exit configs over the draft need --draft; those over the target cannot
    # have it (exits index the draft's stack when one is given): two replayers.
    with_draft = {n: c for n, c in grid.items() if not n.startswith("exit target")}
    no_draft = {n: c for n, c in grid.items() if n.startswith("exit target")}

    began = time.process_time()
    replayers = {True: Replayer(target, draft, prompts, args.max_new_tokens,
                                work / "parts.json", work / "refs"),
                 False: Replayer(target, None, prompts, args.max_new_tokens,
                                 work / "parts-target.json", work / "refs")}
    setup_cpu = time.process_time() - began
    predicted: dict[str, dict[str, Any]] = {}
    replay_cpu: dict[str, float] = {}
    for uses_draft, group in ((True, with_draft), (False, no_draft)):
        for name, config in group.items():
            start = time.process_time()
            predicted[name] = replayers[uses_draft].summary(config)
            replay_cpu[name] = time.process_time() - start
    # Replaying again over tables already made: the cost of a K/policy/tree knob change.
    again: dict[str, float] = {}
    for uses_draft, group in ((True, with_draft), (False, no_draft)):
        for name, config in group.items():
            start = time.process_time()
            replayers[uses_draft].summary(config)
            again[name] = time.process_time() - start

    print(f"replayed {len(grid)} configs; measuring them ({args.prompts} prompts x "
          f"{args.max_new_tokens} tokens, interleaved with one AR baseline)", flush=True)
    measured: dict[str, dict[str, Any]] = {}
    measure_cpu = 0.0
    for uses_draft, group in ((True, with_draft), (False, no_draft)):
        start = time.process_time()
        result = measure_arms(target, group, prompts, args.max_new_tokens, repeats=1,
                              draft=draft if uses_draft else None)
        measure_cpu += time.process_time() - start
        measured.update({name: m.summary() for name, m in result.items()})

    rows = []
    for name in grid:
        p, m = predicted[name], measured[name]
        rows.append({
            "config": name, "method": grid[name].method,
            "tau_replay": p["mean_accepted_tokens"], "tau_measured": m["mean_accepted_tokens"],
            "tau_equal": abs(p["mean_accepted_tokens"] - m["mean_accepted_tokens"]) < 1e-9,
            "claims_exact": p["replay_exact"],
            "ms_pred": p["latency_ms_per_token"], "ms_meas": m["latency_ms_per_token"],
            "base_ms_pred": p["baseline_latency_ms_per_token"],
            "base_ms_meas": m["baseline_latency_ms_per_token"],
            "speedup_pred": p["speedup"], "speedup_meas": m["speedup"],
            "lossless": m["lossless"], "replay_cpu_s": replay_cpu[name],
            "replay_again_cpu_s": again[name]})
    frame = pd.DataFrame(rows)
    # The machine drifts between measuring the parts and measuring the configs: the AR
    # baseline measured beside the configs gives the drift (one factor per replayer).
    frame["ms_pred_cal"] = frame["ms_pred"] * frame["base_ms_meas"] / frame["base_ms_pred"]
    frame["err"] = (frame["ms_pred"] - frame["ms_meas"]).abs() / frame["ms_meas"]
    frame["err_cal"] = (frame["ms_pred_cal"] - frame["ms_meas"]).abs() / frame["ms_meas"]
    frame["speedup_err"] = ((frame["speedup_pred"] - frame["speedup_meas"]).abs()
                            / frame["speedup_meas"])
    pd.set_option("display.width", 200)
    pd.set_option("display.max_columns", 30)
    show = frame[["config", "tau_replay", "tau_measured", "claims_exact", "ms_pred",
                  "ms_meas", "err", "err_cal", "speedup_pred", "speedup_meas", "lossless"]]
    print(show.to_string(index=False, float_format=lambda v: f"{v:.3f}"))

    def spearman(a: str, b: str) -> float:
        return float(frame[a].rank().corr(frame[b].rank()))

    print(f"\nSpearman predicted vs measured: ms/token {spearman('ms_pred', 'ms_meas'):.3f}, "
          f"speedup {spearman('speedup_pred', 'speedup_meas'):.3f}")
    print(f"median |error| ms/token: raw {frame['err'].median():.1%}, baseline-calibrated "
          f"{frame['err_cal'].median():.1%}; speedup {frame['speedup_err'].median():.1%}")
    exact = frame[frame["claims_exact"]]
    print(f"τ exact where claimed: {int(exact['tau_equal'].sum())}/{len(exact)} configs; "
          f"elsewhere equal by chance: {int(frame[~frame['claims_exact']]['tau_equal'].sum())}/"
          f"{int((~frame['claims_exact']).sum())}")
    by_method = frame.groupby("method").agg(
        configs=("config", "count"), claims_exact=("claims_exact", "sum"),
        tau_equal=("tau_equal", "sum"),
        tau_abs_err=("tau_replay", lambda s: float((s - frame.loc[s.index, "tau_measured"])
                                                   .abs().median())),
        ms_err_median=("err_cal", "median"))
    print("\nper method (err: baseline-calibrated ms/token)")
    print(by_method.to_string(float_format=lambda v: f"{v:.3f}"))

    # Throughput: CPU seconds per config. Measurement's figure is the whole interleaved
    # run (the shared baseline included) per config, as a search's trial pays it.
    per_measure = measure_cpu / len(grid)
    knob = frame[frame["method"].isin(["ngram", "draft_model"])]["replay_again_cpu_s"]
    print(f"\nCPU s per config: measured {per_measure:.1f}; replay setup (references + cost "
          f"parts, once) {setup_cpu:.1f}")
    print(f"K/policy/tree knobs over a known table: {knob.median() * 1000:.1f} ms per config "
          f"-> {60 / knob.median():.0f} configs per CPU-minute vs "
          f"{60 / per_measure:.1f} measured ({per_measure / knob.median():.0f}x)")
    # The second mask replayed: its table and rounds (the first also paid for the target's
    # full keys/values of each prompt, once per search).
    new_mask = float(frame.loc[frame["config"] == "skip sparse+mlp k4", "replay_cpu_s"].iloc[0])
    print(f"a new skip mask (its table + rounds): {new_mask:.2f} s -> "
          f"{60 / new_mask:.0f} per CPU-minute ({per_measure / new_mask:.0f}x)")
    if args.csv:
        frame.to_csv(args.csv, index=False)
        print(f"table: {args.csv}")


if __name__ == "__main__":
    main()
