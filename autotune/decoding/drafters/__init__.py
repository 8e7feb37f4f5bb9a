"""Drafters: one interface (`base`), one module per drafting method.

The method registry (`autotune.decoding.methods`) names each method's drafter class by
"module:Class"; the decoder builds it with `spec.drafter_class().build(context)`.
"""

from autotune.decoding.drafters.base import (
                                             Draft,
                                             DraftContext,
                                             Drafter,
                                             TokenChooser,
                                             TreeHooks,
)

__all__ = ["Draft", "DraftContext", "Drafter", "TokenChooser", "TreeHooks"]
