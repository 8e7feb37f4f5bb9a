"""Record how TensorRT-LLM's own n-gram pool drafts, for tests/test_ngram_pool.py.

TensorRT-LLM does not install here (its wheel needs CUDA and is gigabytes), so its pool
is checked against a transcript: this script runs `NGramPoolManager.get_draft_tokens`
from an upstream `tensorrt_llm/_torch/speculative/ngram.py` (fetched by hand at the
commit named, with `ordered_set` importable: `pip install ordered-set==4.1.0`), its
TensorRT-LLM imports stubbed, over seeded token sequences, and writes every draft and
the final pool to a JSON transcript. Nothing of the upstream file is copied here.

    python tests/oracles/trtllm_ngram_record.py PATH/TO/ngram.py COMMIT > transcript.json
"""

from __future__ import annotations

import json
import random
import sys
import types
from importlib.metadata import version
from pathlib import Path
from typing import Any

PACKAGE = "tensorrt_llm._torch.speculative"
ORDERED_SET = "4.1.0"


def _stub(name: str, **attributes: Any) -> None:
    module = types.ModuleType(name)
    module.__path__ = []                      # a package, so relative imports resolve
    module.__dict__.update(attributes)
    sys.modules[name] = module


def load_pool_manager(path: Path) -> type:
    """NGramPoolManager from the upstream file at `path`, its imports of TensorRT-LLM
    replaced by empty stand-ins (the pool's logic uses none of them)."""
    placeholder = type("Placeholder", (), {"__init__": lambda self, *a, **k: None})
    for name in ("tensorrt_llm", "tensorrt_llm._torch", "tensorrt_llm._torch.pyexecutor",
                 PACKAGE):
        _stub(name)
    _stub("tensorrt_llm.llmapi", NGramDecodingConfig=placeholder)
    _stub("tensorrt_llm.logger", logger=None)
    _stub("tensorrt_llm._torch.pyexecutor.llm_request", LlmRequest=placeholder,
          LlmRequestState=placeholder)
    _stub("tensorrt_llm._torch.pyexecutor.resource_manager",
          BaseResourceManager=placeholder, ResourceManager=placeholder)
    _stub("tensorrt_llm._torch.pyexecutor.scheduler", ScheduledRequests=placeholder)
    _stub(f"{PACKAGE}.drafter", Drafter=placeholder)
    namespace: dict[str, Any] = {"__name__": f"{PACKAGE}.ngram", "__package__": PACKAGE}
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    return namespace["NGramPoolManager"]


def cases(seed: int = 0) -> list[dict[str, Any]]:
    """Seeded inputs: per case the pool's settings and, per request in serving order,
    its token sequence, its budget and the prefix lengths its draft calls see (growing
    by 1 to k+1 tokens a round, as accepted drafts grow a sequence). Small vocabularies,
    so patterns recur and filed continuations are replaced often."""
    rng = random.Random(seed)
    out = []
    for index in range(24):
        max_ngram, max_draft = rng.randint(1, 4), rng.randint(1, 6)
        requests = []
        for _ in range(rng.randint(1, 3)):
            vocab = rng.randint(2, 5)
            prompt = rng.randint(2, 12)
            tokens = [rng.randrange(vocab) for _ in range(prompt + rng.randint(8, 40))]
            prefixes, length = [], prompt + 1
            while length < len(tokens):
                prefixes.append(length)
                length += rng.randint(1, max_draft + 1)
            requests.append({"tokens": tokens, "prompt_len": prompt,
                             "max_new_tokens": len(tokens) - prompt, "prefixes": prefixes})
        out.append({"case": index, "max_ngram": max_ngram, "max_draft": max_draft,
                    "public": index % 2 == 1, "requests": requests})
    return out


def record(manager_class: type, case: dict[str, Any]) -> dict[str, Any]:
    """Every draft of `case` and each pool at the end (patterns in filing order)."""
    config = types.SimpleNamespace(
        max_total_draft_tokens=case["max_draft"], max_draft_len=case["max_draft"],
        max_matching_ngram_size=case["max_ngram"], is_keep_all=True, is_use_oldest=True,
        is_public_pool=case["public"])
    manager = manager_class(config, 8)
    drafts = []
    for request_id, request in enumerate(case["requests"]):
        limit = request["prompt_len"] + request["max_new_tokens"]
        drafts.append([list(manager.get_draft_tokens(request["tokens"][:n], request_id,
                                                     limit))
                       for n in request["prefixes"]])
    pools = [manager.pool] if case["public"] else [manager.pool[r]
                                                   for r in range(len(case["requests"]))]
    return {**case, "drafts": drafts,
            "pools": [[[list(p), [list(m) for m in matches]] for p, matches in pool.items()]
                      for pool in pools]}


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: trtllm_ngram_record.py PATH/TO/ngram.py COMMIT", file=sys.stderr)
        return 2
    if version("ordered-set") != ORDERED_SET:
        print(f"needs ordered-set {ORDERED_SET} (TensorRT-LLM's requirement), found "
              f"{version('ordered-set')}", file=sys.stderr)
        return 2
    manager_class = load_pool_manager(Path(argv[1]))
    json.dump({"source": f"NVIDIA/TensorRT-LLM tensorrt_llm/_torch/speculative/ngram.py "
                         f"@ {argv[2]}, NGramPoolManager.get_draft_tokens",
               "ordered_set": ORDERED_SET, "is_keep_all": True, "is_use_oldest": True,
               "cases": [record(manager_class, c) for c in cases()]},
              sys.stdout, separators=(",", ":"))
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
