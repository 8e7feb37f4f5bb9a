"""SGLang: a `--config` YAML for `python -m sglang.launch_server`, and the same as flags.

Writes `sglang/sglang.yaml` and `sglang/sglang.sh` (STANDALONE chains or dynamic trees,
NGRAM's trie) and, for an EAGLE chain's schedule, `sglang/adaptive.json`.
What was read upstream, where (versions, commits, files, line references):
docs/engines/sglang.md; the versions and commits are `PROVENANCE["sglang"]` in
autotune/schema/engines.py.
"""

from __future__ import annotations

import shlex
from typing import TypedDict, Union

import yaml

from autotune.schema.shape import DYNAMIC, STATIC, DraftShape
from autotune.exports._common import (
    ExportOptions,
    STATIC_TREE_NOTE,
    Loss,
    Source,
    dump_json,
    engine_methods,
    fenced,
    fixed_k_policy_loss,
    method_loss,
    request_parameters,
    rules_loss,
    schedule_paragraph,
)
from autotune.exports.heads import SGLANG_DIR
from autotune.frozen.schedule import Schedule

NAME = "sglang"
ENGINE = "SGLang"
RULES = "sglang"
FILE = "sglang/sglang.yaml"
SHELL = "sglang/sglang.sh"
# `speculative-adaptive-config` (a path; adaptive_spec_params.py L110-112 json.load).
ADAPTIVE_FILE = "sglang/adaptive.json"
# SGLang's speculative algorithms autotune measures: STANDALONE (a separate draft model),
# NGRAM.
# EAGLE: a trained EAGLE-1 head (train-draft's `sglang/` checkpoint); SGLang has no
# Medusa (exports/heads.py).
METHODS = engine_methods("draft_model", "ngram", "sglang_ngram", "eagle")
# sglang_ngram's knobs -> SGLang's fields (arg_groups/fields/spec.py L252-275 in
# PROVENANCE["sglang"].version), pinned in tests/engine_fields.py.


def check(src: Source) -> list[Loss]:
    cfg = src.cfg
    shape = src.shape
    losses = [
        method_loss(src, METHODS,
                    "SGLang speculates with a draft model (STANDALONE/EAGLE) or n-grams, not "
                    "with the target's own layers",
                    heads="SGLang has no Medusa drafting (its SpeculativeAlgorithm: DFLASH, "
                          "UNO, DSPARK, EAGLE, EAGLE3, FROZEN_KV_MTP, STANDALONE, NGRAM); "
                          "serve Medusa heads with vLLM"),
        fixed_k_policy_loss(src, ENGINE),
    ]
    if cfg.method == "ngram":
        if cfg.ngram_min > 1:
            losses.append(Loss(f"ngram_min={cfg.ngram_min}", (),
                               "SGLang's n-gram trie matches suffixes down to one token; "
                               "exported without a minimum"))
        if cfg.engine != RULES:
            losses.append(Loss(f"ngram_max={cfg.ngram_max}", (),
                               "SGLang has no n-gram matching window; exported as "
                               f"speculative-ngram-max-trie-depth={_trie_depth(src)} "
                               "(ngram_max + k, so a longest match still leaves k draft "
                               "tokens), which also lets longer suffixes match"))
    if cfg.method in ("draft_model", "eagle") and shape.kind == STATIC and not shape.one_path:
        steps, topk, nodes = _static_tree_shape(shape)
        label, knobs = shape.loss_label()
        losses.append(Loss(label, knobs,
                           "SGLang drafts only dynamic (EAGLE-2) trees, no static one; "
                           f"exported as the dynamic tree of the same depth and width: "
                           f"speculative-num-steps={steps}, speculative-eagle-topk={topk}, "
                           f"speculative-num-draft-tokens={nodes + 1} (the best {nodes} "
                           "drafted nodes plus the root)",
                           note=STATIC_TREE_NOTE))
    losses.append(schedule_loss(src))
    losses.append(rules_loss(src, RULES))
    losses.append(_block_loss(src))
    return [loss for loss in losses if loss is not None]


def _block_loss(src: Source) -> Loss | None:
    """verify=block where SGLang cannot run it: speculative_use_block_verification takes
    EAGLE/EAGLE3/NEXTN/DFLASH/DSPARK only (speculative_hook.py L175-180),
    a chain (topk=1, eagle_worker_v2.py L196-197)."""
    chain = not src.cfg.is_tree or src.shape.one_path
    if src.cfg.verify != "block" or (src.cfg.method == "eagle" and chain):
        return None
    return Loss("verify=block", (),
                "SGLang runs block verification only for EAGLE chains "
                "(speculative_use_block_verification: EAGLE/EAGLE3/NEXTN/DFLASH/DSPARK, "
                "topk=1); exported without it, verified as SGLang verifies this method")


def runs_schedule(src: Source) -> bool:
    """SGLang runs this config's schedule: an EAGLE chain (adaptive wants EAGLE/EAGLE3
    with topk 1, adaptive_spec_params.py L61-79)."""
    return (src.schedule is not None and src.cfg.method == "eagle"
            and _tree_shape(src.shape)[1] == 1)


def schedule_loss(src: Source) -> Loss | None:
    """What SGLang does not run of the schedule (module docstring)."""
    schedule = src.schedule
    if schedule is None:
        return None
    off = [r.span() for r in schedule.ranges if r.k == 0]
    if runs_schedule(src):
        if not off:
            return None
        # eagle_worker_v2.py L1469-1506: steps 0 still verifies a one-token pass and
        # runs the draft's extend pass (unless SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND).
        return Loss("schedule K=0", (),
                    f"SGLang's step count 0 (batch sizes {', '.join(off)}) is not plain "
                    "decoding: it still runs a one-token verify pass and the EAGLE head's "
                    "draft-extend pass every step, so those ranges run slower than the "
                    "measured no-speculation figure; written as tuned")
    where = (f"; at batch sizes {', '.join(off)} it measured no speculation faster, yet "
             "SGLang will speculate there" if off else "")
    if src.cfg.method == "eagle":
        why = (f"SGLang runs per-batch-size steps (speculative-adaptive) for EAGLE only "
               f"with topk 1, and this tree has topk {_tree_shape(src.shape)[1]}")
    else:
        algorithm = "STANDALONE" if src.cfg.method == "draft_model" else "NGRAM"
        why = ("SGLang runs per-batch-size steps (speculative-adaptive) for EAGLE/EAGLE3 "
               f"only; for {algorithm} it warns and falls back to fixed steps")
    return Loss("schedule", (),
                f"{why}; the per-batch-size schedule ({schedule.describe()}) is dropped "
                f"and the batch-1 config (k={src.cfg.k}) runs at every batch size{where}")


def adaptive_config(schedule: Schedule) -> dict[str, dict[str, list[int]]]:
    """`speculative_adaptive_config`: each range's first batch size -> its one step
    count. A slot serves the batch sizes from its key up to the next key
    (adaptive_spec_params.py L356-358), so range starts are the keys."""
    return {str(r.start): {"candidate_steps": [r.k]} for r in schedule.ranges}


# SGLang's default decode CUDA-graph sizes with speculation on, before they are cut at
# the server's largest graph size (arg_groups/cuda_graph_hook.py L518-525, the same release).
SPEC_GRAPH_SIZES = (list(range(1, 9)) + list(range(10, 33, 2)) + list(range(40, 65, 4))
                    + list(range(72, 257, 8)) + list(range(272, 1025, 16)))


def padded_steps(schedule: Schedule, graph_sizes: list[int]) -> dict[int, int]:
    """The step count SGLang runs at each batch size 1..largest: padded up to a graph
    size (none above the largest: kept), then the largest key at or below it
    (adaptive_spec_params.py L342-358)."""
    keys = [r.start for r in schedule.ranges]
    steps = {r.start: r.k for r in schedule.ranges}
    out: dict[int, int] = {}
    for b in range(1, schedule.largest + 1):
        padded = next((g for g in sorted(graph_sizes) if g >= b), b)
        out[b] = steps[max([k for k in keys if k <= padded], default=keys[0])]
    return out


def _static_tree_shape(shape: DraftShape) -> tuple[int, int, int]:
    """(num_steps, eagle_topk, tree nodes) of the dynamic tree nearest a static one: as
    deep, as wide as its widest node or its highest child rank, and as many nodes as it
    has, capped at what such a dynamic tree drafts."""
    children: dict[tuple[int, ...], int] = {}
    for path in shape.choices:
        children[path[:-1]] = children.get(path[:-1], 0) + 1
    steps = shape.levels
    topk = max(max(children.values()), max(rank for path in shape.choices for rank in path) + 1)
    pool = DraftShape(DYNAMIC, width=topk, depth=steps).pool_size
    return steps, topk, min(shape.tree_nodes, pool)


def _trie_depth(src: Source) -> int:
    # A trie path holds the matched suffix and its continuation, so it must be at least
    # ngram_max + k deep for a match of ngram_max tokens to yield k draft tokens.
    return src.cfg.ngram_max + src.cfg.k


class ServerArgs(TypedDict, total=False):
    """SGLang's ServerArgs fields this export sets (model_path first), as the `--config`
    YAML and the launch command carry them: the interface is SGLang's own flags."""

    model_path: str
    speculative_algorithm: str
    speculative_draft_model_path: str | None
    speculative_num_steps: int
    speculative_eagle_topk: int
    speculative_num_draft_tokens: int
    speculative_use_block_verification: bool
    speculative_adaptive: bool
    speculative_adaptive_config: str
    speculative_ngram_max_trie_depth: int
    speculative_ngram_min_bfs_breadth: int
    speculative_ngram_max_bfs_breadth: int
    speculative_ngram_match_type: str
    speculative_ngram_capacity: int


# A ServerArgs value as YAML and the command line write it.
FlagValue = Union[str, int, bool, None]


def server_args(src: Source) -> ServerArgs:
    """ServerArgs field -> value for this config (model_path first)."""
    cfg = src.cfg
    args: ServerArgs = {"model_path": src.target}
    if cfg.method in ("draft_model", "eagle"):
        steps, topk, nodes = _tree_shape(src.shape)
        eagle = cfg.method == "eagle"
        args.update({
            # EAGLE: the head checkpoint train-draft wrote for SGLang (exports/heads.py).
            "speculative_algorithm": "EAGLE" if eagle else "STANDALONE",
            "speculative_draft_model_path": f"{src.draft}/{SGLANG_DIR}" if eagle else src.draft,
            "speculative_num_steps": steps,
            "speculative_eagle_topk": topk,
            # The verify pass: the root (last verified token) plus the kept tree nodes.
            "speculative_num_draft_tokens": nodes + 1,
        })
        if cfg.verify == "block" and eagle and topk == 1:
            # fields/spec.py L120-124; it turns speculative_use_rejection_sampling on
            # (speculative_hook.py L181-195), under which EAGLE samples its drafts.
            args["speculative_use_block_verification"] = True
        if runs_schedule(src):
            assert src.schedule is not None
            # The start step must be a candidate (speculative_hook.py L1416-1421); the
            # largest sizes the buffers, and each batch switches to its slot first
            # (eagle_worker_v2.py L1445). num_draft_tokens = steps + 1 (L1423-1427).
            args.update({"speculative_num_steps": src.schedule.max_k,
                         "speculative_num_draft_tokens": src.schedule.max_k + 1,
                         "speculative_adaptive": True,
                         "speculative_adaptive_config": ADAPTIVE_FILE})
    elif cfg.method == "sglang_ngram":
        # SGLang's trie as measured: k tree nodes plus the root per verify pass.
        args.update({"speculative_algorithm": "NGRAM",
                     "speculative_num_draft_tokens": cfg.k + 1})
        args.update({"speculative_ngram_max_trie_depth": cfg.sglang_ngram_max_trie_depth,
                     "speculative_ngram_min_bfs_breadth": cfg.sglang_ngram_min_bfs_breadth,
                     "speculative_ngram_max_bfs_breadth": cfg.sglang_ngram_max_bfs_breadth,
                     "speculative_ngram_match_type": cfg.sglang_ngram_match_type,
                     "speculative_ngram_capacity": cfg.sglang_ngram_capacity})
    else:
        # NGRAM sets eagle_topk to max_bfs_breadth itself; num_draft_tokens counts the
        # root plus num_draft_tokens - 1 = k proposed nodes.
        args.update({
            "speculative_algorithm": "NGRAM",
            "speculative_num_draft_tokens": cfg.k + 1,
            "speculative_ngram_min_bfs_breadth": 1,
            "speculative_ngram_max_bfs_breadth": 1,
            "speculative_ngram_max_trie_depth": _trie_depth(src),
        })
    return args


def flag(field_name: str) -> str:
    """A ServerArgs field's flag name without the dashes in front (`model-path`)."""
    return field_name.replace("_", "-")


def config_yaml(args: ServerArgs) -> dict[str, FlagValue]:
    """The `--config` mapping: dashed flag names (ConfigArgumentMerger passes each key
    verbatim as `--key`)."""
    return {flag(key): value for key, value in args.items()}


def _tree_shape(shape: DraftShape) -> tuple[int, int, int]:
    """(speculative_num_steps, speculative_eagle_topk, tree nodes excluding the root)."""
    if not shape.is_tree or shape.one_path:
        # A chain draft: one candidate per step (topk 1). SGLang then requires
        # num_draft_tokens = num_steps + 1 (the verified root plus the drafts) and
        # overrides any other value with a warning, so we write it consistently.
        n = shape.chain_length
        return n, 1, n
    if shape.kind == STATIC:
        return _static_tree_shape(shape)     # the lossy approximation (see check)
    return shape.depth, shape.width, shape.tree_nodes


def command_line(args: ServerArgs) -> str:
    """`python -m sglang.launch_server --model-path ... --speculative-...`, shell-quoted."""
    words = ["python", "-m", "sglang.launch_server"]
    for key, value in args.items():
        # A bool field is a store_true flag (arg_groups/arg_utils.py L393-399): bare.
        words += ["--" + flag(key)] if value is True else ["--" + flag(key), str(value)]
    return " ".join(shlex.quote(word) for word in words)


def render(src: Source, options: ExportOptions) -> dict[str, str]:
    args = server_args(src)
    text = yaml.safe_dump(config_yaml(args), sort_keys=False)
    files = {FILE: text, SHELL: command_line(args) + "\n"}
    if runs_schedule(src):
        assert src.schedule is not None
        files[ADAPTIVE_FILE] = dump_json(adaptive_config(src.schedule))
    return files


def launch(src: Source, files: dict[str, str]) -> str:
    notes = [note for note in (_schedule_text(src), _start_conditions(src),
                               _rocm_text(src)) if note]
    return (fenced(f"python -m sglang.launch_server --config {shlex.quote(FILE)}", "sh")
            + "\nor, the same as flags (`" + SHELL + "`):\n\n"
            + fenced(files[SHELL], "sh") + "\n"
            + "".join(note + "\n" for note in notes)
            + request_parameters(src.cfg) + "\n")


def _start_conditions(src: Source) -> str:
    """What SGLang (PROVENANCE["sglang"].version) checks at start-up for this config
    (arg_groups/speculative_hook.py)."""
    args = server_args(src)
    if args["speculative_algorithm"] == "NGRAM":
        # L1312: NGRAM's topk is max_bfs_breadth; L1356-1366 refuse topk > 1 with
        # page_size > 1 off flashinfer; L1294-1302 cap max_running_requests.
        breadth = args["speculative_ngram_max_bfs_breadth"]
        tree = (f"With speculative-ngram-max-bfs-breadth {breadth} (> 1) SGLang sets topk "
                f"to {breadth} and refuses to start when `--page-size` > 1 unless "
                "`--attention-backend flashinfer`. " if breadth > 1 else "")
        return (tree + "NGRAM caps `--max-running-requests` at 48 when it is unset: set "
                "it to serve more requests at once.\n")
    if args["speculative_eagle_topk"] > 1:
        # L1268-1282: EAGLE/STANDALONE trees with page_size > 1.
        return ("With speculative-eagle-topk > 1 SGLang refuses to start when "
                "`--page-size` > 1 unless the attention backend is flashinfer, fa3 or "
                "triton.\n")
    return ""


def _rocm_text(src: Source) -> str:
    """Sampled EAGLE chains on ROCm: SGLang (PROVENANCE["sglang"].version,
    arg_groups/speculative_hook.py L29-62 and L1182-1206) turns
    speculative_use_rejection_sampling on by itself on HIP for algorithm EAGLE with topk
    1, no token map and accept thresholds 1.0 (what autotune writes), so sampled drafts
    are verified another way than was measured."""
    args = server_args(src)
    if (src.cfg.greedy or args.get("speculative_algorithm") != "EAGLE"
            or args["speculative_eagle_topk"] != 1):
        return ""
    return ("On ROCm (AMD GPUs) SGLang turns `speculative_use_rejection_sampling` on by "
            "itself for this config (\"ROCm needs rejection sampling for EAGLE "
            "spec-decode to sample at all\"), so sampled drafts are verified by rejection "
            "sampling there, not by the target-only kernel measured: these sampled figures "
            "hold on CUDA only; re-tune on ROCm.\n")


def _schedule_text(src: Source) -> str:
    """The launch.md paragraph of a schedule SGLang runs (EAGLE chains only)."""
    if not runs_schedule(src):
        return ""
    schedule = src.schedule
    assert schedule is not None
    text = schedule_paragraph(
        schedule,
        f"`speculative-adaptive` with `{ADAPTIVE_FILE}` (one step count per range, keyed "
        "by its first batch size), started at the largest K",
        f"SGLang keeps the last range's K={schedule.ranges[-1].k}")
    wanted = {b: r.k for r in schedule.ranges for b in range(r.start, r.end + 1)}
    runs = padded_steps(schedule, SPEC_GRAPH_SIZES)
    moved = [b for b in wanted if runs[b] != wanted[b]]
    if moved:
        text += ("\nSGLang pads a batch size up to a CUDA-graph size before choosing its "
                 "step count: with the default speculative graph sizes, batch "
                 f"size{'s' if len(moved) > 1 else ''} {', '.join(map(str, moved))} "
                 "run the next range's K. Add every range's "
                 "last batch size to `--cuda-graph-bs-decode` to run the schedule "
                 "exactly.\n")
    return (text + "\nSGLang turns adaptive off (a warning, then "
            f"speculative-num-steps={schedule.max_k} at every batch size) under attention data parallelism, "
            "multi-layer EAGLE, two-batch overlap or PD multiplexing.\n")
