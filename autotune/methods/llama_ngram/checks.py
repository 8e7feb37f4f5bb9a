"""`llama_ngram`'s config keys: llama-server's model-free drafters' flags and defaults.

common/common.h L357-368 and common/arg.cpp L4283-4405 (PROVENANCE["llama_server"]);
`k` is each type's draft cap (--spec-ngram-*-size-m, --spec-ngram-mod-n-max). Torch-free:
the method's `SPEC` reads this when the registry lists the methods.
"""

from __future__ import annotations

from typing import Any

from autotune.common.errors import AutotuneError
from autotune.schema.knobs import MethodKnob
from autotune.schema.llama_spec import spec_types

KNOBS = (
    MethodKnob("llama_spec_type", "str", "ngram-simple",
               "llama-server --spec-type: one of "
               "ngram-simple, ngram-map-k, ngram-map-k4v, ngram-mod, ngram-cache, or a comma "
               "chain (the server tries them in its fixed order)"),
    MethodKnob("llama_ngram_size_n", "int", 12,
               "n-gram looked up by ngram-simple / -map-k / "
               "-map-k4v (--spec-ngram-*-size-n)", low=1),
    MethodKnob("llama_ngram_min_hits", "int", 1,
               "ngram-map-k4v: lookups of a key before it "
               "drafts (--spec-ngram-map-k4v-min-hits)", low=1),
    MethodKnob("llama_ngram_mod_n_match", "int", 24,
               "ngram-mod: tokens hashed per lookup "
               "(--spec-ngram-mod-n-match)", low=1),
    MethodKnob("llama_ngram_mod_n_min", "int", 48,
               "ngram-mod: a draft shorter than this is "
               "dropped (--spec-ngram-mod-n-min)", low=0),
)


def check(config: Any, n_layers: int | None) -> None:
    """Known types, drafted as the server does: no exit rule."""
    spec_types(config.llama_spec_type)             # one line for an unknown type
    if config.exit_policy != "fixed":
        raise AutotuneError("method=llama_ngram drafts as llama-server does, with no "
                            "exit policy: use exit_policy=fixed")
