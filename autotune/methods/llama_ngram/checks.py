"""`llama_ngram`'s rules on a config: known spec types, drafted as llama-server drafts.

Its keys are `DecodeConfig` fields (`own_knob`, schema/config.py). Torch-free: the
method's `SPEC` names these checks.
"""

from __future__ import annotations

from typing import Any

from autotune.common.errors import AutotuneError
from autotune.schema.llama_spec import spec_types


def check(config: Any, n_layers: int | None) -> None:
    """Known types, drafted as the server does: no exit rule."""
    spec_types(config.llama_spec_type)             # one line for an unknown type
    if config.exit_policy != "fixed":
        raise AutotuneError("method=llama_ngram drafts as llama-server does, with no "
                            "exit policy: use exit_policy=fixed")
