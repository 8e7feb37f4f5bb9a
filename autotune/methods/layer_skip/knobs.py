"""`layer_skip`'s config keys: the sublayers its draft pass skips.

Their indices are checked against the model's layers by their kind (`int_set`:
`DecodeConfig.validate`), whatever the method. Torch-free: the method's `SPEC` reads
this when the registry lists the methods.
"""

from __future__ import annotations

from autotune.schema.knobs import MethodKnob

KNOBS = (
    MethodKnob("attn_skip", "int_set", (),
               "layers whose attention the `layer_skip` draft skips, e.g. `12,17`", low=0),
    MethodKnob("mlp_skip", "int_set", (), "layers whose MLP the `layer_skip` draft skips",
               low=0),
)

