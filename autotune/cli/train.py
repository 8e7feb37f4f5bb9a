"""`autotune train-draft`: distil a draft head from the target on the search prompts.

The workload is split exactly as `autotune search` splits it (same --validation and
--seed), and only the search part is trained on: the held-out prompts a search later
validates on are never seen (drafter.json lists a digest of every training prompt, and
the search refuses a drafter that saw one of its held-out prompts). The folder is
written atomically at the end (drafter.json last); a checkpoint inside it lets a killed
run resume with the same command.

Kinds: `eagle` and `medusa` heads (their own methods), `exits`: S2D exit adapters at
`--exit-layers` of rank `--exit-rank`, which `method=sorted_exit` reads over the target.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from autotune.common.errors import AutotuneError
from autotune.workloads.split import split_prompts

DEFAULT_MAX_NEW = 96
# --per-category: the fewest search-split prompts a category needs for its own member.
MIN_MEMBER_PROMPTS = 4


def _exit_layers(text: str | None) -> tuple[int, ...] | None:
    """`--exit-layers 6,9,12` -> (6, 9, 12); its range is checked once the target's
    depth is known (`training.exits_loss.check_exit_layers`)."""
    if text is None:
        return None
    words = [w.strip() for w in text.split(",") if w.strip()]
    if not words:
        raise AutotuneError(f"--exit-layers {text!r} names no layer; give e.g. 6,9,12")
    try:
        layers = tuple(int(w) for w in words)
    except ValueError:
        raise AutotuneError(f"--exit-layers {text!r} must be layer numbers separated by "
                            "commas, e.g. 6,9,12") from None
    from autotune.schema.config import check_exit_order
    check_exit_order(layers, f"--exit-layers {text}")
    return layers


def _check(args: argparse.Namespace) -> Path:
    from autotune.models.drafter_folder import KINDS
    if args.kind not in KINDS:
        raise AutotuneError(f"--kind must be one of {', '.join(KINDS)}, not {args.kind!r}")
    if args.kind != "exits" and (args.exit_layers is not None or args.exit_rank is not None):
        raise AutotuneError("--exit-layers and --exit-rank apply to --kind exits only")
    args.exit_layer_list = _exit_layers(args.exit_layers)
    if args.exit_rank is not None and args.exit_rank < 1:
        raise AutotuneError(f"--exit-rank must be positive, not {args.exit_rank}")
    if not args.minutes > 0:
        raise AutotuneError(f"--minutes must be positive, not {args.minutes}")
    if args.max_new_tokens is not None and args.max_new_tokens < 2:
        raise AutotuneError("--max-new-tokens must be at least 2")
    if args.prompts is not None and args.prompts < 2:
        raise AutotuneError("--prompts must be at least 2 (one is held out for the "
                            "agreement figure)")
    if not 1 <= args.medusa_heads <= 16:
        raise AutotuneError(f"--medusa-heads must lie in 1..16, not {args.medusa_heads}")
    if args.max_steps is not None and args.max_steps < 1:
        raise AutotuneError(f"--max-steps must be at least 1, not {args.max_steps}")
    if not args.checkpoint_every > 0:
        raise AutotuneError(f"--checkpoint-every must be positive, not {args.checkpoint_every}")
    if not args.lr > 0:
        raise AutotuneError(f"--lr must be positive, not {args.lr}")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise AutotuneError(f"--out {out} exists and is not a folder")
    if _finished(out):
        raise AutotuneError(f"{out} already holds a trained drafter: choose another --out")
    from autotune.models.drafter_folder import SET_FILE
    if (out / SET_FILE).is_file():
        raise AutotuneError(f"{out} already holds per-category drafters: choose another --out")
    return out


def run_train_command(args: argparse.Namespace) -> int:
    out = _check(args)
    categories = ([c for c in args.categories.split(",") if c] if args.categories else None)
    # All search-split prompts unless --prompts limits them, and every held-out prompt
    # (each round-robin by category): none of those may be trained on.
    split = split_prompts(args.workload, categories, args.validation, args.seed,
                          prompts=args.prompts)
    prompts = _without_held_out_texts(split.search, split.pool)
    if len(prompts) < 2:
        raise AutotuneError(f"{args.workload} leaves {len(prompts)} prompt to train on after "
                            "the held-out split; training needs at least 2")
    max_new = args.max_new_tokens or DEFAULT_MAX_NEW

    from autotune.models.llama import LlamaForward
    from autotune.models.loading import load_model
    print(f"autotune: loading {args.model}", file=sys.stderr, flush=True)
    target = load_model(args.model, args.device, args.dtype, args.trust_remote_code)
    if not isinstance(target.forward, LlamaForward):
        raise AutotuneError(f"train-draft reads the target's features through the compact "
                            f"Llama-family forward; {target.name} "
                            f"({target.hf_model.config.model_type}) does not run on it "
                            "(llama, mistral, qwen2, qwen3 do)")
    return train(args, out, target, prompts, split.pool, max_new)


def train(args: argparse.Namespace, out: Path, target: Any, prompts: list[Any],
          held_out: list[Any], max_new: int) -> int:
    """One drafter in `out`, or with --per-category one per category and `all` (a
    DrafterSet folder), each trained for --minutes on the target's continuations of
    its prompts (generated once for all of them)."""
    from autotune.training.data import training_sequences

    # Both checked before the target's continuations.
    options = _head_options(args, target)
    members = _category_members(prompts) if getattr(args, "per_category", False) else None
    started = time.perf_counter()

    def data_progress(what: str, done: int, total: int) -> None:
        print(f"autotune: target {what} {done}/{total}", file=sys.stderr, flush=True)

    print(f"autotune: {len(prompts)} training prompts ({len(held_out)} held out for the "
          "search's validation, never trained on)", file=sys.stderr, flush=True)
    sequences = training_sequences(target, prompts, max_new, data_progress)
    data_s = time.perf_counter() - started
    if members is None:
        return _train_one(args, out, target, prompts, sequences, held_out, max_new, data_s,
                          options)
    out.mkdir(parents=True, exist_ok=True)
    for name, chosen in members.items():
        folder = out / name
        if _finished(folder):
            print(f"autotune: member {name} already trained ({folder})", file=sys.stderr)
            continue
        print(f"autotune: training member {name} on {len(chosen)} prompts",
              file=sys.stderr, flush=True)
        keep = {id(p) for p in chosen}
        subset = [seq for p, seq in zip(prompts, sequences) if id(p) in keep]
        _train_one(args, folder, target, chosen, subset, held_out, max_new, data_s, options)
    from autotune.common.files import write_atomically
    from autotune.models.drafter_folder import SET_FILE, SET_FORMAT
    index = {"format": SET_FORMAT, "kind": args.kind,
             "members": {name: name for name in members},
             "categories": {name: len(chosen) for name, chosen in members.items()}}
    write_atomically(out / SET_FILE, json.dumps(index, indent=2) + "\n")
    print(f"autotune: per-category {args.kind} drafters ({', '.join(members)}) written to "
          f"{out}; the search tunes which drafts with the `drafter` knob: --draft {out}",
          file=sys.stderr, flush=True)
    return 0


def _without_held_out_texts(prompts: list[Any], held_out: list[Any]) -> list[Any]:
    """The training prompts less those whose text is also a held-out prompt's (a
    workload that repeats a prompt under two ids): the search refuses a drafter that
    saw any held-out text, so it is never trained on one."""
    from autotune.workloads.prompts import prompt_digest
    held = {prompt_digest(p.text) for p in held_out}
    kept = [p for p in prompts if prompt_digest(p.text) not in held]
    if len(kept) < len(prompts):
        print(f"autotune: {len(prompts) - len(kept)} training prompts repeat a held-out "
              "prompt's text and are left out", file=sys.stderr, flush=True)
    return kept


def _finished(folder: Path) -> bool:
    """Whether `folder` holds a trained drafter (its drafter.json, no checkpoint left:
    a checkpoint beside it means a killed run that the same command resumes)."""
    from autotune.models.drafter_folder import DRAFTER_FILE
    from autotune.training.loop import CHECKPOINT
    return (folder / DRAFTER_FILE).is_file() and not (folder / CHECKPOINT).is_file()


def _category_members(prompts: list[Any]) -> dict[str, list[Any]]:
    """`all` (every prompt) and one member per category with at least MIN_MEMBER_PROMPTS
    prompts (fewer hold too little to distil from and nothing aside for the held-out
    agreement); refused when no category has that many."""
    by_category: dict[str, list[Any]] = {}
    for prompt in prompts:
        by_category.setdefault(prompt.category, []).append(prompt)
    members = {c: ps for c, ps in sorted(by_category.items()) if len(ps) >= MIN_MEMBER_PROMPTS}
    if not members:
        raise AutotuneError(f"--per-category needs a category with at least "
                            f"{MIN_MEMBER_PROMPTS} training prompts; the search part has "
                            + ", ".join(f"{c}: {len(ps)}" for c, ps in sorted(by_category.items())))
    from autotune.models.drafter_folder import GENERAL
    from autotune.models.trained import ROUTED
    clash = {GENERAL, ROUTED} & set(members)
    if clash:
        raise AutotuneError(f"a category named {sorted(clash)[0]!r} clashes with the "
                            "drafter knob's own values; rename it in the workload")
    return {GENERAL: list(prompts), **members}


def _head_options(args: argparse.Namespace, target: Any) -> Any:
    """The head's settings (`training.kind_loss.HeadOptions`) with the kind's defaults,
    checked against the target now that its depth is known, before its continuations."""
    from autotune.training.kind_loss import HeadOptions
    from autotune.training.kinds import kind_loss
    given = HeadOptions(medusa_heads=args.medusa_heads,
                        exit_layers=getattr(args, "exit_layer_list", None),
                        exit_rank=args.exit_rank)
    return kind_loss(args.kind).resolve(given, target.forward)


def _train_one(args: argparse.Namespace, out: Path, target: Any, prompts: list[Any],
               sequences: list[Any], held_out: list[Any], max_new: int, data_s: float,
               options: Any) -> int:
    """Train one drafter on `sequences` (those of `prompts`) and write its folder;
    `options`: the head's settings (`_head_options`)."""
    import torch

    from autotune.models.fingerprint import model_fingerprint
    from autotune.training.data import describe
    from autotune.training.kinds import kind_loss
    from autotune.training.loop import (
        TrainSettings,
        progress_printer,
        split_heldout,
        train_head,
    )
    from autotune.workloads.prompts import prompt_digest

    loss = kind_loss(args.kind)
    held_digests = {prompt_digest(p.text) for p in held_out}
    assert not held_digests & {prompt_digest(p.text) for p in prompts}
    train_set, heldout = split_heldout(sequences, args.seed)
    head, geometry = loss.new_head(target.forward, options)
    settings = TrainSettings(kind=args.kind, seconds=args.minutes * 60, lr=args.lr,
                             batch_tokens=loss.batch_tokens, seed=args.seed,
                             checkpoint_s=args.checkpoint_every, max_steps=args.max_steps)
    fingerprint = {"kind": args.kind, "target": model_fingerprint(target),
                   "prompts": sorted(prompt_digest(p.text) for p in prompts),
                   "max_new_tokens": max_new, "lr": args.lr, "seed": args.seed,
                   **loss.fingerprint(options)}
    out.mkdir(parents=True, exist_ok=True)
    result = train_head(head, args.kind, target.forward, train_set, heldout, settings, out,
                        fingerprint, progress_printer())
    meta = {
        "format": "autotune.drafter/v1", "kind": args.kind, "geometry": geometry,
        "target": {"name": target.name, "fingerprint": model_fingerprint(target),
                   "path": target.path, "dtype": str(target.dtype).replace("torch.", "")},
        "trained_on": describe(prompts, args.workload, max_new) | {
            "validation": str(args.validation), "seed": args.seed},
        "training": {"seconds": round(result.seconds, 1), "data_seconds": round(data_s, 1),
                     "steps": result.steps, "loss": round(result.loss, 5),
                     "heldout_top1": round(result.heldout_top1, 4),
                     "heldout_positions": result.heldout_positions,
                     "train_positions": result.train_positions, "lr": args.lr,
                     "resumed": result.resumed,
                     "torch": torch.__version__},
    }
    if result.heldout_by_exit is not None:
        # heldout_top1 is their mean; before training each is the plain exit's.
        meta["training"]["heldout_top1_by_exit"] = {
            str(e): round(rate, 4) for e, rate in result.heldout_by_exit.items()}
    _write_folder(out, head, meta, target, loss.engine_checkpoints)
    print(f"autotune: {args.kind} drafter written to {out} (held-out top-1 agreement"
          f"{loss.summary_note} {result.heldout_top1:.3f} over {result.heldout_positions} "
          f"positions, {result.steps} steps in {result.seconds / 60:.1f} min); use it with "
          f"--draft {out}{loss.use_hint}", file=sys.stderr, flush=True)
    return 0


def _write_folder(out: Path, head: Any, meta: dict[str, Any], target: Any,
                  engine_checkpoints: bool) -> None:
    """Weights, tokenizer, the engines' checkpoints where engines load the kind, then
    drafter.json last (a folder is a drafter only once complete); the checkpoint goes
    once everything is in place."""
    import os

    from safetensors.torch import save_file

    from autotune.common.files import write_atomically
    from autotune.models.drafter_folder import DRAFTER_FILE, WEIGHTS_FILE, file_sha256
    from autotune.training.loop import CHECKPOINT

    weights = out / WEIGHTS_FILE
    scratch = out / f".{WEIGHTS_FILE}.tmp"
    state = {k: v.detach().to("cpu").contiguous() for k, v in head.state_dict().items()}
    save_file(state, str(scratch))
    os.replace(scratch, weights)
    target.tokenizer.save_pretrained(out)
    from autotune.exports.heads import write_engine_checkpoints
    meta["engine_checkpoints"] = (write_engine_checkpoints(out, meta["kind"], head, target)
                                  if engine_checkpoints else [])
    meta["weights_sha256"] = file_sha256(weights)
    write_atomically(out / DRAFTER_FILE, json.dumps(meta, indent=2) + "\n")
    (out / CHECKPOINT).unlink(missing_ok=True)
