"""llama-server's speculative types: names, the order it tries them in, their state.

Read in llama.cpp as vendored by the PyPI sdist of PROVENANCE["llama_server"] (its
`llama-server --version`: 0.6.0-dev, build 0, commit unknown; the sdist records no
llama.cpp commit), paths relative to its llama.cpp/:
- common/arg.cpp L4273-4282: `--spec-type` takes a comma list, appended to the default
  `none`; an unknown name is an error.
- common/speculative.cpp L2695-2707 (`common_speculative_init`): whatever order the list
  gives, the implementations are tried in one fixed order (PRIORITY); L2868-2956: per
  slot, the first one that returns a non-empty draft drafts that round.
- State across requests: ngram-simple none (speculative.cpp L1831-1874); ngram-map-k
  and -k4v one map per slot, kept across requests (L1876-1928, ngram-map.cpp
  L121-219); ngram-mod one hash table shared by every slot and request (L1930-2103);
  ngram-cache a per-slot cache that only grows (L2105-2242).
- Draft caps (`common_speculative_n_max`, L2396-2430): ngram-simple / -map-k / -map-k4v
  their size_m, ngram-mod its n_max, ngram-cache a fixed 8; `--spec-draft-n-max` caps
  only draft-model types.
Torch-free.
"""

from __future__ import annotations

from autotune.common.errors import AutotuneError
from autotune.common.yaml_source import did_you_mean

# The model-free types, in llama-server's own order of trying them.
PRIORITY = ("ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache")
# Types whose state outlives a request (the server keeps it between requests).
STATEFUL = frozenset({"ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache"})
# Types autotune's decoder drafts exactly as the server does (the rest are measured in
# the server only).
REPRODUCED = frozenset({"ngram-simple"})


def spec_types(value: str) -> tuple[str, ...]:
    """The types of a `llama_spec_type` value ("ngram-mod,ngram-simple"), in the order
    the server tries them; one-line error for an empty or unknown one."""
    names = [part.strip() for part in str(value).split(",") if part.strip()]
    if not names:
        raise AutotuneError("llama_spec_type is empty: give one of " + ", ".join(PRIORITY))
    for name in names:
        if name not in PRIORITY:
            hint = did_you_mean(name, PRIORITY, inline=True)
            raise AutotuneError(f"llama_spec_type {name!r} is not a llama-server model-free "
                                f"type{hint}; types: {', '.join(PRIORITY)}")
    return tuple(t for t in PRIORITY if t in names)


def canonical(value: str) -> str:
    """`value` as the server runs it: its types once each, in its order."""
    return ",".join(spec_types(value))


def stateful(value: str) -> bool:
    """Whether any of the types keeps state across requests."""
    return any(t in STATEFUL for t in spec_types(value))


def reproduced(value: str) -> bool:
    """Whether autotune's decoder drafts exactly as the server does for `value`."""
    return all(t in REPRODUCED for t in spec_types(value))
