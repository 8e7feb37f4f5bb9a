"""Drafters: the one interface every drafting method implements (`base`).

Each method's own drafter lives in its package (`autotune/methods/<name>/drafter.py`);
the method registry (`autotune.schema.methods`) names its class by "module:Class" and
the decoder builds it with `spec.drafter_class().build(context)`.
"""

from autotune.decoding.drafters.base import (
                                             Draft,
                                             DraftContext,
                                             Drafter,
                                             TokenChooser,
                                             TreeHooks,
)

__all__ = ["Draft", "DraftContext", "Drafter", "TokenChooser", "TreeHooks"]
