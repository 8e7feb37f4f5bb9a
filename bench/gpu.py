"""One short GPU run that measures what issue 40 asks of autotune on an H100 / H200.

Stages (each has its own time budget and try/except: a failure is one line, the rest
still runs and prints):

  card       the card, its memory, and its device-to-device copy bandwidth (a 2 GiB
             `copy_`, CUDA events, median of 10; bytes read + written, as KINDS.md and
             the issue count it). On a CPU: a host copy timed with perf_counter.
  default    the default model (SmolLM2-135M, bf16 on CUDA): AR ms/token through
             autotune's own decoder (`SpeculativeDecoder(target, DecodeConfig())`, 128
             new tokens after a Spec-Bench prompt, no EOS stop, median of 3 after a
             warm-up), ours with CUDA graphs and ours eager (`load_model(...,
             cuda_graphs=...)`); the verify curve (one forward over n = 1..64 tokens
             after 128 context tokens, `forward_cost_profile`); a layer-skip pass over
             half the layers against the full pass.
  big        the same on a random-weight Llama of 8B shape (hidden 4096, 32 layers,
             32/8 heads, FFN 14336, vocab 128256, bf16), made on the card in seconds.
  lossless   the default model: fp32 exact (ngram, layer_skip, sorted_exit, a tree:
             `measure` on 8 Spec-Bench prompts x 32 tokens, `summary()["lossless"]`
             must hold) and bf16 counts of exact / near-tie / real divergences.
  main_job   `python3 -m autotune.cli search --device cuda --max-new-tokens 32` with
             trimmed budgets, in a child with a timeout: wall time, answer line,
             exports, and Spearman rho of replay-predicted against measured speedups
             (trials.csv `predicted.speedup` vs `value.speedup`).
  hf         transformers' documented fastest generate (static cache + torch.compile
             reduce-overhead, https://huggingface.co/docs/transformers/llm_optims) on
             both models, in a child killed at its budget (bench/_gpu_hf.py).

The HBM floor per token is (weights read per token + KV bytes at the mean context) /
copy bandwidth; "weights read" leaves out an untied embedding table (a decode step reads
one row of it). The goals (issue 40): 8B AR <= 1.4x floor, verify(8)/verify(1) <= 1.15,
default-model AR <= 1.5 ms, ours <= HF, half-layer pass within 15% of its share of the
bytes, main job decided in <= 5 min with rho >= 0.9.

It prints progress to stderr with timestamps, a short table last on stdout, and writes
gpu.json (+ gpu_table.txt, gpu_log.txt and the main job's trials.csv / best.json /
output) to $OUT when set, else the JSON to --json PATH.

GPU run (two `run` calls on one warm machine; see ../shared/gpu/README.md):
  here, in the project root:  ../shared/gpu/pack
  run 1: carry [".device/a"], timeout_s 120:  bash .device/a/stage-a.sh
  run 2 (at once), carry [".device/b"], timeout_s 560:
         bash .device/b/stage-b.sh "OUT=$OUT python3 bench/gpu.py --device cuda"
  (double quotes: the outer shell puts $OUT's value into the command, whether or not
  stage-b's inner shell sees the variable). The script keeps to --budget (default
  450 s on CUDA) of its own wall time; $OUT gets gpu.json, gpu_table.txt, gpu_log.txt,
  hf_out.txt and the main job's search_out.txt, search_trials.csv, search_best.json.

CPU smoke test (every path but the CUDA-only figures, which print "n/a (no CUDA)"):
  python bench/gpu.py --device cpu --quick
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import inspect
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import _gpu_hf  # noqa: E402

from autotune.schema.config import DecodeConfig, config_from_mapping  # noqa: E402
from autotune.decoding.decoder import SpeculativeDecoder  # noqa: E402
from autotune.schema.methods import get_method  # noqa: E402
from autotune.measure.measurement import measure  # noqa: E402
from autotune.measure.profile import forward_cost_profile  # noqa: E402
from autotune.measure.timing import Clock, time_points  # noqa: E402
from autotune.models.llama import LlamaForward  # noqa: E402
from autotune.models.loading import LoadedModel, load_model  # noqa: E402
from autotune.workloads.prompts import Prompt, encode_prompt, load_workload, round_robin  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
NO_CUDA = "n/a (no CUDA)"
VERIFY_SIZES = (1, 2, 4, 8, 16, 32, 64)
VERIFY_CONTEXT = 128
GOALS = {"big_ar_over_floor": 1.4, "verify8_over_1": 1.15, "default_ar_ms": 1.5,
         "skip_tolerance": 0.15, "main_job_s": 300.0, "rho": 0.9}
# A fixed prompt when the default tokenizer is unavailable (the 8B shape is random anyway).
FALLBACK_PROMPT = list(range(1000, 1100))


# ---------------------------------------------------------------- settings and log
@dataclass
class Sizes:
    """How much each stage measures: the GPU run's sizes, or the CPU smoke test's."""

    ar_tokens: int
    ar_repeats: int
    verify_repeats: int
    skip_repeats: int
    lossless_prompts: int
    lossless_tokens: int
    hf_tokens: int
    hf_repeats: int
    bandwidth_bytes: int
    search_args: list[str]
    budgets: dict[str, float]

    @classmethod
    def for_run(cls, quick: bool) -> "Sizes":
        if quick:
            return cls(ar_tokens=16, ar_repeats=2, verify_repeats=2, skip_repeats=3,
                       lossless_prompts=2, lossless_tokens=8, hf_tokens=12, hf_repeats=2,
                       bandwidth_bytes=256 << 20,
                       # Measured trials only: the replay tier's cost model takes minutes
                       # on a small shared CPU.
                       search_args=["--prompts", "2", "--max-new-tokens", "8", "--trials", "2",
                                    "--fidelity", "measure", "--validation-pool", "2",
                                    "--validation-prompts", "2", "--finalists", "1"],
                       budgets={"card": 30, "default": 240, "big": 120, "lossless": 300,
                                "main_job": 420, "hf": 240})
        # The GPU run: ~450 s in all, the main job about 3 minutes of it.
        return cls(ar_tokens=128, ar_repeats=3, verify_repeats=5, skip_repeats=10,
                   lossless_prompts=8, lossless_tokens=32, hf_tokens=128, hf_repeats=3,
                   bandwidth_bytes=2 << 30,
                   search_args=["--max-new-tokens", "32", "--trials", "6", "--screen", "80",
                                "--validation-pool", "24", "--validation-prompts", "8"],
                   budgets={"card": 15, "default": 60, "big": 75, "lossless": 70,
                            "main_job": 190, "hf": 200})


class Run:
    """The run's state: settings, deadline, results, failures, and the progress log."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.device = torch.device(args.device)
        self.cuda = self.device.type == "cuda"
        self.quick: bool = args.quick
        self.sizes = Sizes.for_run(args.quick)
        self.began = time.monotonic()
        self.deadline = self.began + args.budget
        self.results: dict[str, Any] = {}
        self.failures: list[str] = []
        self.log_lines: list[str] = []
        self.models: dict[str, LoadedModel] = {}
        self.prompt_ids: list[int] = FALLBACK_PROMPT
        self.stage_end = self.deadline          # the running stage's own budget ends here
        self.out_dir = Path(os.environ["OUT"]) if os.environ.get("OUT") else None

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def log(self, message: str) -> None:
        stamp = time.strftime("%H:%M:%S")
        line = f"[{stamp} +{time.monotonic() - self.began:6.1f}s] {message}"
        self.log_lines.append(line)
        print(line, file=sys.stderr, flush=True)

    def fail(self, where: str, exc: BaseException) -> None:
        """One line for the table; the traceback goes to the log only."""
        text = str(exc).strip().splitlines()
        line = f"{where}: {type(exc).__name__}: {text[0] if text else ''}"[:240]
        self.failures.append(line)
        self.log(f"FAILED {line}")
        for tb_line in traceback.format_exc().rstrip().splitlines()[-6:]:
            self.log_lines.append("    " + tb_line)

    @contextmanager
    def attempt(self, where: str) -> Iterator[None]:
        """A sub-step whose failure is recorded and does not end its stage."""
        try:
            yield
        except KeyboardInterrupt:
            raise
        except Exception as exc:  # noqa: BLE001 - every failure is one line, then on
            self.fail(where, exc)


def stage(run: Run, name: str, body: Callable[[Run, float], None]) -> None:
    """Run one stage within min(its budget, what is left of the run's budget)."""
    budget = min(run.sizes.budgets[name], run.left())
    if budget < 5:
        run.failures.append(f"{name}: skipped, {run.left():.0f} s of the run's budget left")
        run.log(f"stage {name}: skipped (budget spent)")
        return
    run.log(f"stage {name}: start (budget {budget:.0f} s)")
    start = time.monotonic()
    run.stage_end = start + budget
    try:
        body(run, budget)
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # noqa: BLE001
        run.fail(name, exc)
    took = time.monotonic() - start
    run.results.setdefault("stage_seconds", {})[name] = round(took, 1)
    over = " (over its budget)" if took > budget else ""
    run.log(f"stage {name}: done in {took:.1f} s{over}")
    free_memory()
    # What is known so far reaches $OUT even if a later stage hangs the run.
    write_outputs(run, None)


def free_memory() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


# ------------------------------------------------------------------ models
def has_graphs_parameter() -> bool:
    return "cuda_graphs" in inspect.signature(load_model).parameters


def load(run: Run, spec: str, dtype: str | None, graphs: bool | None) -> LoadedModel:
    """`load_model(spec, ..., cuda_graphs=graphs)`, or without that parameter (with a
    note) on a tree where the CUDA-graph path has not landed yet."""
    if has_graphs_parameter():
        return load_model(spec, device=run.args.device, dtype=dtype, cuda_graphs=graphs)
    note = "load_model has no cuda_graphs parameter yet: loaded without it"
    if note not in run.results.setdefault("notes", []):
        run.results["notes"].append(note)
        run.log(note)
    return load_model(spec, device=run.args.device, dtype=dtype)


def static_class() -> type | None:
    """The static (CUDA-graph) forward class, where the tree has one."""
    try:
        from autotune.models.static_forward import StaticLlamaForward
    except ImportError:
        return None
    return StaticLlamaForward


def decode_cache(forward: Any, max_len: int) -> Any:
    """The cache a generation decodes into (the static forward's graphs are bound to it);
    a fresh cache on a tree without `decode_cache`."""
    if hasattr(forward, "decode_cache"):
        return forward.decode_cache(max_len)
    return forward.new_cache(1, max_len)


def graphs_active(model: LoadedModel) -> bool:
    """Whether `model` runs on the CUDA-graph forward (a LlamaForward subclass)."""
    return isinstance(model.forward, LlamaForward) and type(model.forward) is not LlamaForward


@dataclass
class _Endless(LoadedModel):
    """The model with no EOS: AR timing decodes exactly the asked-for tokens, as the HF
    side does (random weights may emit an EOS id at any step)."""

    @property
    def eos_token_ids(self) -> frozenset[int]:
        return frozenset()


def endless(model: LoadedModel) -> _Endless:
    return _Endless(**{f.name: getattr(model, f.name)
                       for f in dataclasses.fields(model) if f.init})


def in_memory_model(hf_model: Any, forward: LlamaForward, tokenizer: Any, name: str,
                    device: torch.device, dtype: torch.dtype) -> LoadedModel:
    return LoadedModel(name=name, path="(in memory)", hf_model=hf_model, tokenizer=tokenizer,
                       forward=forward, device=device, dtype=dtype)


# ------------------------------------------------------------------ measurements
def copy_bandwidth(device: torch.device, nbytes: int, repeats: int = 10) -> dict[str, Any]:
    """GB/s of a device-to-device `copy_` (bytes read + written), median of `repeats`."""
    src = torch.randint(0, 256, (nbytes,), dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    times: list[float] = []
    for i in range(repeats + 2):                       # two untimed warm-ups
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            dst.copy_(src)
            end.record()
            end.synchronize()
            seconds = start.elapsed_time(end) / 1000
        else:
            began = time.perf_counter()
            dst.copy_(src)
            seconds = time.perf_counter() - began
        if i >= 2:
            times.append(seconds)
    ok = bool(torch.equal(dst[:4096], src[:4096]))
    median = statistics.median(times)
    return {"bytes": nbytes, "gb_per_s": 2 * nbytes / median / 1e9,
            "ms": 1000 * median, "copy_checked": ok,
            "timer": "cuda events" if device.type == "cuda" else "perf_counter"}


def weight_bytes_read(forward: LlamaForward) -> int:
    """Bytes of weights one decode step reads: `nbytes()` (the tied head counted once)
    less an untied embedding table, of which a step reads one row."""
    total = forward.nbytes()
    if forward.lm_head.data_ptr() != forward.embed.data_ptr():
        total -= forward.embed.element_size() * forward.embed.nelement()
    return total


def kv_bytes(forward: LlamaForward, context: float) -> float:
    """Key + value bytes attention reads at `context` cached positions."""
    per_position = 2 * forward.n_layers * forward.n_kv_heads * forward.head_dim
    return per_position * context * forward.embed.element_size()


def ar_timing(model: LoadedModel, prompt: list[int], tokens: int,
              repeats: int) -> dict[str, Any]:
    """AR through autotune's decoder: decode ms/token (prefill apart) and total ms/token
    (prefill included, as a whole HF generate call is timed), median of `repeats` after
    one untimed run of the same length (it captures every graph the run needs)."""
    target = endless(model)
    decoder = SpeculativeDecoder(target, DecodeConfig())
    clock = Clock(model.device)
    decoder.generate(prompt, tokens, clock)
    captured = getattr(model.forward, "captures", 0)
    runs = [decoder.generate(prompt, tokens, clock) for _ in range(repeats)]
    return {
        "ms_per_token": 1000 * statistics.median(g.decode_s / g.decoded for g in runs),
        "total_ms_per_token": 1000 * statistics.median((g.prefill_s + g.decode_s) / len(g.tokens)
                                                       for g in runs),
        "prefill_ms": 1000 * statistics.median(g.prefill_s for g in runs),
        "new_tokens": len(runs[0].tokens), "prompt_tokens": len(prompt),
        "mean_context": len(prompt) + len(runs[0].tokens) / 2,
        "tokens": runs[0].tokens,
        "repeat_tokens_equal": all(g.tokens == runs[0].tokens for g in runs),
        # Set when CUDA graph capture failed and the static forward ran eagerly.
        "graph_error": getattr(model.forward, "graph_error", None),
        # Graphs captured inside the timed runs (must be 0: the untimed run captured all).
        "captures_in_timed_runs": getattr(model.forward, "captures", 0) - captured,
    }


def verify_curve(model: LoadedModel, repeats: int) -> dict[str, Any]:
    """Forward over n = 1..64 tokens after 128 cached ones; verify(8)/verify(1)."""
    profile = forward_cost_profile(model, VERIFY_SIZES, VERIFY_CONTEXT, repeats)
    ms = {p["tokens"]: p["ms"] for p in profile["points"]}
    return {"ms": ms, "context_tokens": profile["context_tokens"],
            "verify8_over_1": ms[8] / ms[1] if ms.get(1) else None}


def skip_cost(model: LoadedModel, repeats: int) -> dict[str, Any]:
    """One-token pass skipping attention and MLP of every other layer (half the layers,
    as a layer-skip draft step runs) against the full pass, after 128 cached tokens.

    Expected ratio: the bytes the half pass reads over the full pass's (the head and
    final norm run either way); the goal is measured/expected within 15%."""
    forward = model.forward
    n = forward.n_layers
    skipped = tuple(range(1, n, 2))
    device = model.device
    ids = torch.randint(forward.vocab_size, (1, VERIFY_CONTEXT + 1),
                        generator=torch.Generator().manual_seed(0)).to(device)
    layer_bytes = [sum(t.element_size() * t.nelement() for t in vars(layer).values()
                       if t is not None) for layer in forward.layers]
    fixed = weight_bytes_read(forward) - sum(layer_bytes)
    kept = sum(b for i, b in enumerate(layer_bytes) if i not in skipped)
    expected = (fixed + kept) / (fixed + sum(layer_bytes))
    with torch.inference_mode():
        cache = decode_cache(forward, VERIFY_CONTEXT + 1)
        forward.forward(ids[:, :VERIFY_CONTEXT], cache)

        def step(point: str) -> None:
            skip = skipped if point == "half" else ()
            forward.forward(ids[:, VERIFY_CONTEXT:], cache, start=VERIFY_CONTEXT,
                            attn_skip=skip, mlp_skip=skip, last_only=True)

        times = time_points(step, ["full", "half"], Clock(device), device, repeats,
                            reset=lambda _: cache.crop(VERIFY_CONTEXT))
    full, half = (1000 * statistics.median(times[p]) for p in ("full", "half"))
    ratio = half / full
    return {"full_ms": full, "half_ms": half, "ratio": ratio, "layers_run": n - len(skipped),
            "layers": n, "expected_ratio": expected, "ratio_over_expected": ratio / expected}


# ------------------------------------------------------------------ stages
def stage_card(run: Run, budget: float) -> None:
    info: dict[str, Any] = {"torch": torch.__version__, "python": platform.python_version(),
                            "device": str(run.device)}
    try:
        import transformers
        info["transformers"] = transformers.__version__
    except ImportError:
        pass
    info["commit"] = _git_commit()
    if run.cuda:
        props = torch.cuda.get_device_properties(run.device)
        info.update(name=torch.cuda.get_device_name(run.device),
                    memory_gib=props.total_memory / 2**30,
                    multiprocessors=props.multi_processor_count,
                    capability=f"{props.major}.{props.minor}")
    else:
        info.update(name=f"CPU ({platform.processor() or platform.machine()}, "
                         f"{os.cpu_count()} cores, {torch.get_num_threads()} threads)")
    run.results["card"] = info
    run.log(f"card: {info['name']}")
    bw = copy_bandwidth(run.device, run.sizes.bandwidth_bytes)
    run.results["bandwidth"] = bw
    run.log(f"copy bandwidth: {bw['gb_per_s']:.0f} GB/s ({bw['timer']}, "
            f"{bw['bytes'] >> 20} MiB, {bw['ms']:.2f} ms)")


def _git_commit() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, text=True,
                              capture_output=True, timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def _prompt_ids(run: Run, model: LoadedModel) -> list[int]:
    """The first Spec-Bench prompt round-robin picks, in the default model's chat form."""
    prompt = round_robin(load_workload("spec_bench"), 1)[0]
    return encode_prompt(model.tokenizer, prompt)


def measure_model(run: Run, key: str, variants: dict[str, LoadedModel]) -> None:
    """AR, the verify curve and the layer-skip pass for each variant (graphs, eager)."""
    sizes = run.sizes
    out = run.results.setdefault(key, {})
    for variant, model in variants.items():
        row = out.setdefault(variant, {})
        row["forward_class"] = type(model.forward).__name__
        with run.attempt(f"{key} {variant} AR"):
            row["ar"] = ar_timing(model, run.prompt_ids, sizes.ar_tokens, sizes.ar_repeats)
            run.log(f"{key} {variant}: AR {row['ar']['ms_per_token']:.3f} ms/token "
                    f"(total {row['ar']['total_ms_per_token']:.3f})")
            if row["ar"]["graph_error"]:
                run.failures.append(f"{key} {variant}: CUDA graph capture failed, timed "
                                    f"eagerly: {row['ar']['graph_error']}")
        with run.attempt(f"{key} {variant} verify curve"):
            row["verify"] = verify_curve(model, sizes.verify_repeats)
            run.log(f"{key} {variant}: verify ms " + ", ".join(
                f"{n}:{ms:.2f}" for n, ms in row["verify"]["ms"].items()))
        with run.attempt(f"{key} {variant} layer skip"):
            row["skip"] = skip_cost(model, sizes.skip_repeats)
            run.log(f"{key} {variant}: half-layer pass {row['skip']['ratio']:.3f} of full "
                    f"(expected {row['skip']['expected_ratio']:.3f})")
    _compare_tokens(out)
    first = next(iter(variants.values()))
    out["weights_read_bytes"] = weight_bytes_read(first.forward)
    out["kv_bytes_per_position"] = kv_bytes(first.forward, 1)
    out["label"] = first.name
    out["dtype"] = str(first.dtype).removeprefix("torch.")


def _compare_tokens(out: dict[str, Any]) -> None:
    """How far each variant's AR tokens agree with eager's (the same model: a graph or
    static path that changes tokens in fp32 is a bug; in bf16 a late near-tie flip can
    happen)."""
    eager = (out.get("eager") or {}).get("ar")
    for variant in ("graphs", "static_cpu"):
        other = (out.get(variant) or {}).get("ar")
        if eager is None or other is None:
            continue
        out[f"{variant}_tokens_agree"] = agreement(eager["tokens"], other["tokens"])


def agreement(a: list[int], b: list[int]) -> str:
    """`same/len(a)`: how many leading tokens two greedy runs share."""
    same = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return f"{same}/{len(a)}"


def _graphs_or_note(run: Run, key: str) -> bool:
    """Whether to measure a graphs variant; the table's note when not."""
    if not run.cuda:
        run.results.setdefault(key, {})["graphs"] = {"na": NO_CUDA}
        return False
    if not has_graphs_parameter():
        run.results.setdefault(key, {})["graphs"] = {"na": "n/a (no cuda_graphs in load_model)"}
        return False
    return True


def stage_default(run: Run, budget: float) -> None:
    dtype = None                                   # CUDA: bf16; CPU: fp32 (load_model's)
    variants: dict[str, LoadedModel] = {}
    with run.attempt("default eager load"):
        started = time.monotonic()
        variants["eager"] = load(run, "default", dtype, graphs=False)
        run.log(f"default eager loaded in {time.monotonic() - started:.1f} s "
                "(GGUF conversion included on a fresh machine)")
    if _graphs_or_note(run, "default"):
        with run.attempt("default graphs load"):
            model = load(run, "default", dtype, graphs=True)
            if graphs_active(model):
                variants["graphs"] = model
                run.models["default_graphs"] = model
            else:
                run.results.setdefault("default", {})["graphs"] = {
                    "na": f"n/a (cuda_graphs=True gave {type(model.forward).__name__})"}
    if not variants:
        raise RuntimeError("the default model did not load")
    if not run.cuda and "eager" in variants:
        with run.attempt("default static forward (CPU check)"):
            _add_cpu_static(variants, variants["eager"])
    run.models["default"] = variants.get("graphs") or variants["eager"]
    run.models["default_eager"] = variants["eager"] if "eager" in variants else run.models["default"]
    with run.attempt("prompt"):
        run.prompt_ids = _prompt_ids(run, run.models["default"])
        run.log(f"AR prompt: {len(run.prompt_ids)} tokens")
    measure_model(run, "default", variants)


def stage_big(run: Run, budget: float) -> None:
    dtype = torch.bfloat16
    tokenizer = run.models["default"].tokenizer if "default" in run.models else None
    name = _gpu_hf.big_label(run.quick)
    started = time.monotonic()
    hf = _gpu_hf.build_random_llama(run.quick, run.device, dtype)
    run.log(f"{name}: built in {time.monotonic() - started:.1f} s, "
            f"{sum(p.numel() for p in hf.parameters()) / 1e9:.2f} B parameters")
    eager = in_memory_model(hf, LlamaForward(hf), tokenizer, name, run.device, dtype)
    variants = {"eager": eager}
    if not run.cuda:
        with run.attempt("big static forward (CPU check)"):
            _add_cpu_static(variants, eager)
    measure_model(run, "big", variants)
    del eager, variants
    free_memory()
    if not _graphs_or_note(run, "big"):
        return
    graphs = None
    with run.attempt("big graphs forward"):
        graphs = _big_graphs(run, hf, tokenizer, name)
    if graphs is not None:
        measure_model(run, "big", {"graphs": graphs})


def _add_cpu_static(variants: dict[str, LoadedModel], eager: LoadedModel) -> None:
    """On a CPU, the static forward without capture (the code path the graphs replay,
    run eagerly): the smoke test checks it runs and decodes eager's tokens. Its
    figures are not the graphs' (JSON `static_cpu`; the table's graph rows say n/a)."""
    cls = static_class()
    if cls is not None:
        variants["static_cpu"] = dataclasses.replace(eager, forward=cls(eager.hf_model))


def _big_graphs(run: Run, hf: Any, tokenizer: Any, name: str) -> LoadedModel | None:
    """The 8B shape on the CUDA-graph forward: the default model's graph forward class
    over the in-memory model (seconds); if that class cannot be built so, the model is
    saved with the default tokenizer and loaded by `load_model(folder, cuda_graphs=True)`
    (~1 minute for 8B)."""
    template = run.models.get("default_graphs")
    cls = type(template.forward) if template is not None else static_class()
    if cls is not None:
        try:
            return in_memory_model(hf, cls(hf), tokenizer, name, run.device, torch.bfloat16)
        except TypeError as exc:
            run.log(f"{cls.__name__}(hf_model) failed ({exc}); saving the 8B shape to load it")
    if run.left() < 120 or tokenizer is None:
        run.results["big"]["graphs"] = {"na": "n/a (no time to save and load the 8B shape)"}
        return None
    folder = Path(tempfile.mkdtemp(prefix="gpu-bench-big-"))
    # A fresh model with the same seed: the one in hand has fused (shared-storage)
    # weights that save_pretrained would not write back as separate tensors.
    fresh = _gpu_hf.build_random_llama(run.quick, run.device, torch.bfloat16)
    fresh.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    del fresh
    free_memory()
    model = load(run, str(folder), "bfloat16", graphs=True)
    return model if graphs_active(model) else None


def tier_configs(n_layers: int) -> dict[str, DecodeConfig]:
    """One config per method the issue names: documented defaults where there are
    (transformers' prompt lookup drafts more often than vLLM's 5..5 n-gram, so its
    verify passes carry more tokens: more chances to catch a flip), a sorted-exit
    config at a quarter and half of the stack, and the EAGLE-2 tree over layer skip."""
    def preset(method: str, name: str) -> DecodeConfig:
        found = {p.name: p.values for p in get_method(method).presets(n_layers)}
        return config_from_mapping(found[name])

    return {"ngram": preset("ngram", "hf_prompt_lookup"),
            "layer_skip": preset("layer_skip", "dv_default"),
            "sorted_exit": DecodeConfig(method="sorted_exit",
                                        exits=(max(1, n_layers // 4), max(2, n_layers // 2)),
                                        thresholds=(0.8,), k=4),
            "tree": preset("layer_skip", "eagle2_tree")}


def stage_lossless(run: Run, budget: float) -> None:
    prompts: list[Prompt] = round_robin(load_workload("spec_bench"), run.sizes.lossless_prompts)
    tiers: dict[str, dict[str, Any]] = {}
    run.results["lossless"] = tiers
    low = "bfloat16"
    for dtype in ("float32", low):
        model: LoadedModel | None = None
        with run.attempt(f"lossless {dtype} load"):
            model = load(run, "default", dtype, graphs=None)
        if model is None:
            continue
        tier = tiers.setdefault(dtype, {"forward_class": type(model.forward).__name__})
        for method, config in tier_configs(model.n_layers).items():
            if time.monotonic() > run.stage_end:
                tier[method] = {"skipped": "the stage's budget was spent"}
                run.log(f"lossless {dtype} {method}: skipped (stage budget spent)")
                continue
            with run.attempt(f"lossless {dtype} {method}"):
                summary = measure(model, config, prompts, run.sizes.lossless_tokens).summary()
                tier[method] = _tier_row(summary)
                run.log(f"lossless {dtype} {method}: {tier[method]}")
                # The exact tier's assertion: in float32 every method is token-identical
                # to AR; in bf16, no real divergence (near-ties allowed).
                if summary.get("lossless") is not True:
                    run.failures.append(f"lossless {dtype} {method}: NOT lossless, prompts "
                                        f"{summary.get('mismatched_prompts')}")
        del model
        free_memory()


def _tier_row(summary: dict[str, Any]) -> dict[str, Any]:
    """What the table needs from `Measurement.summary()`; `divergences` and
    `near_tie_prompts` only exist once the low-precision tier has landed."""
    divergences = summary.get("divergences") or {}
    mismatched = summary.get("mismatched_prompts") or []
    return {"lossless": summary.get("lossless"), "prompts": summary.get("prompts"),
            "mismatched": len(mismatched),
            "exact": divergences.get("exact"), "near_tie": divergences.get("near_tie"),
            "real": divergences.get("real"),
            "near_tie_prompts": summary.get("near_tie_prompts"),
            "speedup": summary.get("speedup"), "tau": summary.get("mean_accepted_tokens")}


def stage_main_job(run: Run, budget: float) -> None:
    out_dir = Path(tempfile.mkdtemp(prefix="gpu-bench-search-"))
    # --timeout stops starting trials; the rest of the budget is for the finalists'
    # validation and the files.
    command = [sys.executable, "-m", "autotune.cli", "search", "--device", run.args.device,
               *run.sizes.search_args, "--timeout", str(int(budget * 0.45)),
               "--out", str(out_dir / "run")]
    record: dict[str, Any] = {"command": " ".join(command[1:]), "budget_s": budget}
    run.results["main_job"] = record
    run.log("main job: " + record["command"])
    code, seconds, text = run_child(command, budget - 5, out_dir / "search.out")
    record.update(rc=code, wall_s=seconds, timed_out=code is None)
    lines = text.splitlines()
    record["answer"] = next((ln.strip() for ln in lines if ln.startswith("answer:")), None)
    record["run_folder_line"] = next((ln.strip() for ln in lines
                                      if ln.startswith("run folder:")), None)
    record["output_tail"] = "\n".join(lines[-40:])
    run_dir = out_dir / "run"
    exports = run_dir / "exports"
    # An undecided or do-not-speculate run leaves only the folder's README.txt.
    record["exports"] = (sorted(p.name for p in exports.iterdir() if p.name != "README.txt")
                         if exports.is_dir() else [])
    record.update(spearman_from_trials(run_dir / "trials.csv"))
    run.log(f"main job: rc {code}, {seconds:.0f} s, {record['answer']}, "
            f"rho {record.get('rho')}")
    if run.out_dir is not None:
        _copy(out_dir / "search.out", run.out_dir / "search_out.txt")
        _copy(run_dir / "trials.csv", run.out_dir / "search_trials.csv")
        _copy(run_dir / "best.json", run.out_dir / "search_best.json")


def _copy(src: Path, dst: Path) -> None:
    if src.is_file():
        dst.write_bytes(src.read_bytes())


def run_child(command: list[str], timeout: float, log_path: Path) -> tuple[int | None, float, str]:
    """Run `command` (stdout+stderr to `log_path`), killed after `timeout` seconds:
    (return code or None when killed, wall seconds, its output)."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    started = time.monotonic()
    with open(log_path, "w", encoding="utf-8") as sink:
        child = subprocess.Popen(command, cwd=REPO, env=env, stdout=sink,
                                 stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code: int | None = child.wait(timeout=max(timeout, 1))
        except subprocess.TimeoutExpired:
            _kill(child)
            code = None
    return code, time.monotonic() - started, log_path.read_text(encoding="utf-8", errors="replace")


def _kill(child: subprocess.Popen) -> None:
    """End the child and whatever it started (its own session: compile workers)."""
    import signal

    try:
        os.killpg(child.pid, signal.SIGTERM)
        child.wait(timeout=10)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(child.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        child.wait()


def spearman_from_trials(path: Path) -> dict[str, Any]:
    """Spearman rho between replay-predicted and measured speedups over the trials that
    have both (multi-fidelity: the measured trials the screen sent on)."""
    if not path.is_file():
        return {"rho": None, "rho_note": "no trials.csv"}
    import pandas as pd

    frame = pd.read_csv(path)
    columns = ("predicted.speedup", "value.speedup")
    if not all(c in frame.columns for c in columns):
        return {"rho": None, "rho_note": f"trials.csv lacks {', '.join(columns)}"}
    both = frame.dropna(subset=list(columns))
    if "state" in both.columns:
        both = both[both["state"] == "COMPLETE"]
    pairs = [(float(a), float(b)) for a, b in zip(both[columns[0]], both[columns[1]])]
    if len(pairs) < 3:
        return {"rho": None, "rho_pairs": len(pairs),
                "rho_note": f"{len(pairs)} trials with both figures (3 needed)"}
    predicted = pd.Series([a for a, _ in pairs]).rank()
    measured = pd.Series([b for _, b in pairs]).rank()
    rho = float(predicted.corr(measured))
    return {"rho": rho, "rho_pairs": len(pairs), "rho_pairs_list": pairs}


def stage_hf(run: Run, budget: float) -> None:
    """transformers' recipe in a child killed at the budget (a compile cannot be stopped
    from inside). On a CPU the smoke test traces with dynamo's eager backend instead of
    compiling, so the fullgraph trace is still checked; its figures are not the recipe's."""
    backend = run.args.hf_backend or ("auto" if run.cuda else "eager")
    # Each model in the dtype our side ran it in: the default in load_model's default for
    # the device, the 8B shape in bf16.
    dtype = "bfloat16" if run.cuda else "float32"
    rows: dict[str, Any] = {"backend": backend}
    run.results["hf"] = rows
    if backend == "skip":
        rows["na"] = "n/a (--hf-backend skip)"
        return
    command = [sys.executable, str(REPO / "bench" / "_gpu_hf.py"), "--models", "big,default",
               "--device", run.args.device, "--dtype", dtype, "--big-dtype", "bfloat16",
               "--tokens", str(run.sizes.hf_tokens), "--repeats", str(run.sizes.hf_repeats),
               "--prompt-ids", ",".join(map(str, run.prompt_ids)),
               "--deadline-s", str(int(budget)), "--backend", backend,
               *(["--quick"] if run.quick else [])]
    log_path = Path(tempfile.mkdtemp(prefix="gpu-bench-hf-")) / "hf.out"
    code, seconds, text = run_child(command, budget - 3, log_path)
    rows.update(rc=code, wall_s=seconds, timed_out=code is None)
    for line in text.splitlines():
        if line.startswith("{"):
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            rows[row.pop("model")] = row
    for key in ("default", "big"):
        if key not in rows:
            rows[key] = {"error": ("compile and timing exceeded the budget" if code is None
                                   else f"no result (rc {code})")}
        row = rows[key]
        run.log(f"hf {key}: " + (f"{row['ms_per_token']:.3f} ms/token, first call "
                                 f"{row['first_call_s']:.1f} s" if "ms_per_token" in row
                                 else row.get("error") or row.get("skipped", "?")))
    if code not in (0, None):
        rows["output_tail"] = "\n".join(text.splitlines()[-20:])
    if run.out_dir is not None:
        _copy(log_path, run.out_dir / "hf_out.txt")


# ------------------------------------------------------------------ the table
def floors(run: Run) -> None:
    """The HBM floor per token of each model at its AR run's mean context, and AR/floor."""
    bw = (run.results.get("bandwidth") or {}).get("gb_per_s")
    for key in ("default", "big"):
        entry = run.results.get(key) or {}
        if not bw or "weights_read_bytes" not in entry:
            continue
        ar = next((entry[v]["ar"] for v in ("graphs", "eager")
                   if "ar" in entry.get(v, {})), None)
        context = ar["mean_context"] if ar else VERIFY_CONTEXT
        total = entry["weights_read_bytes"] + entry["kv_bytes_per_position"] * context
        entry["floor_ms"] = 1000 * total / (bw * 1e9)
        entry["floor_context"] = context
        for variant in ("graphs", "eager"):
            if "ar" in entry.get(variant, {}):
                entry[variant]["ar_over_floor"] = entry[variant]["ar"]["ms_per_token"] / entry["floor_ms"]


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _cell(entry: dict[str, Any], variant: str, pick: Callable[[dict[str, Any]], Any],
          fmt: Callable[[Any], str]) -> str:
    row = entry.get(variant) or {}
    if "na" in row:
        return row["na"]
    try:
        value = pick(row)
    except (KeyError, TypeError, ZeroDivisionError):
        return "-"
    return "-" if value is None else fmt(value)


def table(run: Run) -> str:
    r = run.results
    d, b = r.get("default") or {}, r.get("big") or {}
    hf = r.get("hf") or {}
    rows: list[tuple[str, str, str, str]] = []
    card = r.get("card") or {}
    bw = r.get("bandwidth") or {}
    mem = f", {card['memory_gib']:.1f} GiB" if "memory_gib" in card else ""
    head = (f"card: {card.get('name', '?')}{mem}; copy bandwidth "
            f"{bw['gb_per_s']:.0f} GB/s" if bw else f"card: {card.get('name', '?')}")
    gb = 1e9
    rows.append(("", d.get("label", "default"), b.get("label", "8B shape"), "goal"))
    rows.append(("weights read / token",
                 f"{d['weights_read_bytes'] / gb:.3f} GB" if "weights_read_bytes" in d else "-",
                 f"{b['weights_read_bytes'] / gb:.3f} GB" if "weights_read_bytes" in b else "-",
                 ""))
    rows.append(("HBM floor ms/token", _ms(d.get("floor_ms")), _ms(b.get("floor_ms")), ""))
    for variant, label in (("graphs", "AR ours graphs ms/tok"), ("eager", "AR ours eager ms/tok")):
        rows.append((label, _cell(d, variant, lambda x: x["ar"]["ms_per_token"], _ms),
                     _cell(b, variant, lambda x: x["ar"]["ms_per_token"], _ms),
                     f"default <= {GOALS['default_ar_ms']}" if variant == "graphs" else ""))
    rows.append(("AR ours total ms/tok*",
                 _cell(d, _best(d), lambda x: x["ar"]["total_ms_per_token"], _ms),
                 _cell(b, _best(b), lambda x: x["ar"]["total_ms_per_token"], _ms), ""))
    rows.append(("AR HF static+compile*", _hf_cell(run, hf, "default"), _hf_cell(run, hf, "big"),
                 "ours <= HF"))
    rows.append(("AR / floor", _cell(d, _best(d), lambda x: x["ar_over_floor"], lambda v: f"{v:.2f}x"),
                 _cell(b, _best(b), lambda x: x["ar_over_floor"], lambda v: f"{v:.2f}x"),
                 f"8B <= {GOALS['big_ar_over_floor']}x"))
    rows.append(("verify(8)/verify(1)",
                 _cell(d, _best(d), lambda x: x["verify"]["verify8_over_1"], lambda v: f"{v:.2f}"),
                 _cell(b, _best(b), lambda x: x["verify"]["verify8_over_1"], lambda v: f"{v:.2f}"),
                 f"<= {GOALS['verify8_over_1']}"))
    for variant in ("graphs", "eager"):
        rows.append((f"verify ms 1..64 {variant}",
                     _cell(d, variant, lambda x: _curve(x["verify"]["ms"]), str),
                     _cell(b, variant, lambda x: _curve(x["verify"]["ms"]), str), ""))
    rows.append(("half-layer pass / full",
                 _cell(d, _best(d), lambda x: _skip(x["skip"]), str),
                 _cell(b, _best(b), lambda x: _skip(x["skip"]), str),
                 f"within {GOALS['skip_tolerance']:.0%} of exp"))
    lines = [head, _format(rows)]
    agree = [f"{label} {k.split('_tokens')[0]} vs eager: {entry[k]}"
             for label, entry in (("default", d), ("8B", b))
             for k in ("graphs_tokens_agree", "static_cpu_tokens_agree") if k in entry]
    for label, key, entry in (("default", "default", d), ("8B", "big", b)):
        ours = (entry.get(_best(entry)) or {}).get("ar")
        theirs = (hf.get(key) or {}).get("tokens")
        if ours and theirs and hf.get(key, {}).get("new_tokens") == len(ours["tokens"]):
            agree.append(f"{label} HF vs ours {_best(entry)}: {agreement(ours['tokens'], theirs)}")
    if agree:
        lines.append("AR tokens matching (leading tokens shared): " + ", ".join(agree))
    cpu = [f"{label} {_ms(entry['static_cpu']['ar']['ms_per_token'])} ms/tok"
           for label, entry in (("default", d), ("8B", b))
           if "ar" in (entry.get("static_cpu") or {})]
    if cpu:
        lines.append("static forward without capture (CPU check): " + ", ".join(cpu))
    lines += _lossless_lines(r.get("lossless") or {})
    lines += _main_job_lines(r.get("main_job"))
    lines.append("* prefill included (a whole generate call over its new tokens); the AR rows "
                 "above are decode only")
    for note in r.get("notes", []):
        lines.append(f"note: {note}")
    if run.failures:
        lines.append("failures:")
        lines += [f"  {line}" for line in run.failures]
    else:
        lines.append("failures: none")
    stages = r.get("stage_seconds") or {}
    lines.append("stage seconds: " + ", ".join(f"{k} {v:.0f}" for k, v in stages.items())
                 + f"; total {time.monotonic() - run.began:.0f} s")
    return "\n".join(lines)


def _best(entry: dict[str, Any]) -> str:
    """The variant a goal is judged on: graphs when measured, else eager."""
    return "graphs" if "ar" in (entry.get("graphs") or {}) else "eager"


def _curve(ms: dict[Any, float]) -> str:
    return " ".join(f"{v:.2f}" for v in ms.values())


def _skip(skip: dict[str, Any]) -> str:
    return f"{skip['ratio']:.2f} (exp {skip['expected_ratio']:.2f})"


def _hf_cell(run: Run, hf: dict[str, Any], key: str) -> str:
    row = hf.get(key) or {}
    if "na" in hf:
        return hf["na"]
    if "ms_per_token" not in row:
        return f"n/a ({row.get('error') or row.get('skipped') or 'not run'})"[:60]
    text = f"{row['ms_per_token']:.3f} (compile {row['first_call_s']:.0f}s)"
    if not run.cuda:
        text += f" [{hf.get('backend')} backend, not the recipe]"
    return text


def _format(rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip()
                     for row in rows)


def _lossless_lines(tiers: dict[str, Any]) -> list[str]:
    if not tiers:
        return ["lossless tiers: not measured"]
    lines = []
    exact = tiers.get("float32") or {}
    parts = []
    for method in ("ngram", "layer_skip", "sorted_exit", "tree"):
        row = exact.get(method)
        parts.append(f"{method} " + ("-" if row is None else "skipped" if "skipped" in row
                                     else "ok" if row["lossless"]
                                     else f"FAIL ({row['mismatched']} prompts)"))
    lines.append(f"lossless fp32 exact ({exact.get('forward_class', '?')}): " + ", ".join(parts))
    low = tiers.get("bfloat16") or {}
    parts = []
    for method in ("ngram", "layer_skip", "sorted_exit", "tree"):
        row = low.get(method)
        if row is None or "skipped" in row:
            parts.append(f"{method} {'-' if row is None else 'skipped'}")
        elif row["exact"] is None:
            parts.append(f"{method} {row['prompts'] - row['mismatched']}/{row['prompts']} "
                         "identical (no divergences in summary yet)")
        else:
            parts.append(f"{method} {row['exact']}/{row['near_tie']}/{row['real']}")
    lines.append("bf16 exact/near-tie/real (real must be 0): " + ", ".join(parts))
    return lines


def _main_job_lines(job: dict[str, Any] | None) -> list[str]:
    if not job:
        return ["main job: not run"]
    state = ("killed at its budget" if job.get("timed_out")
             else f"rc {job.get('rc')}")
    rho = job.get("rho")
    rho_text = (f"rho {rho:.2f} over {job.get('rho_pairs')} trials (goal >= {GOALS['rho']})"
                if rho is not None else f"rho n/a ({job.get('rho_note')})")
    return [f"main job: {job.get('wall_s', 0):.0f} s ({state}; goal <= "
            f"{GOALS['main_job_s']:.0f} s); {job.get('answer') or 'no answer line'}",
            f"  exports: {', '.join(job.get('exports') or []) or 'none'}; {rho_text}"]


# ------------------------------------------------------------------ main
def write_outputs(run: Run, text: str | None) -> None:
    """gpu.json (+ the log, and the table once `text` is given) to $OUT and --json."""
    run.results["failures"] = run.failures
    run.results["total_s"] = time.monotonic() - run.began
    doc = json.dumps(run.results, indent=2, default=str)
    targets = []
    if run.out_dir is not None:
        run.out_dir.mkdir(parents=True, exist_ok=True)
        targets.append(run.out_dir / "gpu.json")
        if text is not None:
            (run.out_dir / "gpu_table.txt").write_text(text + "\n", encoding="utf-8")
        (run.out_dir / "gpu_log.txt").write_text("\n".join(run.log_lines) + "\n",
                                                 encoding="utf-8")
    if run.args.json:
        targets.append(Path(run.args.json))
    for path in targets:
        path.write_text(doc + "\n", encoding="utf-8")
    if text is not None and targets:
        run.log("wrote " + ", ".join(map(str, targets)))


STAGES: dict[str, Callable[[Run, float], None]] = {
    "card": stage_card, "default": stage_default, "big": stage_big,
    "lossless": stage_lossless, "main_job": stage_main_job, "hf": stage_hf}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                   choices=("cpu", "cuda"))
    p.add_argument("--quick", action="store_true",
                   help="the CPU smoke test's sizes (a tiny 8B-shaped stand-in, few tokens)")
    p.add_argument("--budget", type=float, default=None,
                   help="seconds for the whole run (default 450 on CUDA, 1500 with --quick)")
    p.add_argument("--stages", default=",".join(STAGES),
                   help=f"comma-separated subset of {','.join(STAGES)}")
    p.add_argument("--hf-backend", default=None, choices=("auto", "inductor", "eager", "none", "skip"),
                   help="the HF recipe's compile (default: auto on CUDA, generate's own "
                        "compile of a static cache; eager on CPU, a dynamo trace; "
                        "inductor: model.forward wrapped as well; none: static cache "
                        "without compile; skip)")
    p.add_argument("--json", default=None, help="also write the JSON here")
    args = p.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda, but torch sees no CUDA device")
    if args.device == "cpu" and not args.quick:
        print("warning: --device cpu without --quick builds the full 8B shape in host memory",
              file=sys.stderr)
    if args.budget is None:
        args.budget = 1500.0 if args.quick else 450.0
    unknown = set(args.stages.split(",")) - set(STAGES)
    if unknown:
        p.error(f"unknown stage(s): {', '.join(sorted(unknown))}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    run = Run(args)
    run.results["settings"] = {"device": args.device, "quick": args.quick,
                               "budget_s": args.budget, "sizes": dataclasses.asdict(run.sizes)}
    run.log(f"bench/gpu.py on {args.device}{' (quick)' if args.quick else ''}, "
            f"budget {args.budget:.0f} s; load_model cuda_graphs parameter: "
            f"{has_graphs_parameter()}")
    wanted = args.stages.split(",")
    for name, body in STAGES.items():
        if name not in wanted:
            continue
        if name in ("main_job", "hf"):
            # Children use the card: the parent's models go first (the prompt stays).
            run.models.clear()
            free_memory()
        stage(run, name, body)
    floors(run)
    text = table(run)
    write_outputs(run, text)
    print(text, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
