"""Why the compact forward computes projections as W @ X^T on CPU (prints figures).

Times, over the default model's own projection matrices (all layers, so the weights
stream from memory as in decoding), `F.linear(x, W)` against `_linear_cpu` (W @ X^T,
a single row duplicated to two) for 1..8 rows: a decode step is 1 row, a verify pass
k+1 rows. Interleaved, median of repeats.

    python bench/linear_kernels.py [--repeats 7]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from autotune.models.llama import _linear_cpu
from autotune.models.loading import load_model


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    forward = load_model("default", device="cpu").forward
    weights = [w for layer in forward.layers
               for w in (layer.qkv_weight, layer.o_weight, layer.gate_up_weight, layer.down_weight)]
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, "
          f"{len(weights)} matrices, {sum(w.numel() for w in weights) * 4 / 2**20:.0f} MiB")
    print(f"{'rows':>4}  {'F.linear ms':>11}  {'W@X^T ms':>9}  ratio")
    with torch.inference_mode():
        for rows in range(1, 9):
            inputs = {w.shape[1]: torch.randn(rows, w.shape[1]) for w in weights}
            times: dict[str, list[float]] = {"linear": [], "ours": []}
            for _ in range(args.repeats):
                for name, fn in (("linear", F.linear), ("ours", lambda x, w: _linear_cpu(x, w, None))):
                    start = time.perf_counter()
                    for w in weights:
                        fn(inputs[w.shape[1]], w)
                    times[name].append(time.perf_counter() - start)
            lin, ours = (1000 * statistics.median(times[k]) for k in ("linear", "ours"))
            print(f"{rows:>4}  {lin:>11.1f}  {ours:>9.1f}  {ours / lin:.2f}")


if __name__ == "__main__":
    main()
