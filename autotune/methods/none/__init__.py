"""`none`: the AR baseline. It drafts nothing, so every round is one plain target step
through the same loop as every speculative method; every speedup is measured against it."""

from autotune.schema.method_spec import MethodSpec

SPEC = MethodSpec(
    "none", label="AR baseline", color="#7f7f7f", order=0, drafts=False,
    about="the AR baseline: plain decoding, no draft",
    drafter=f"{__name__}.drafter:NoDraft", replay=f"{__name__}.replay:source")
