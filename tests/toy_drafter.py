"""A toy drafting method for tests of the method registry: "repeat the last token".

Import the fixture into a test module (`from toy_drafter import RepeatLast, toy`): it
registers the method for one test and removes it afterwards.
"""

from __future__ import annotations

import pytest
import torch

from autotune.decoding.drafters.base import Draft, DraftContext, Drafter
from autotune.schema.methods import MethodSpec, register_method, unregister_method
from autotune.decoding.policies import ExitPolicy

TOY = "repeat_last"


class RepeatLast(Drafter):
    """Proposes the last token of the sequence `limit` times (confidence 1)."""

    @classmethod
    def build(cls, context: DraftContext) -> "RepeatLast":
        return cls()

    def propose(self, seq: torch.Tensor, limit: int, policy: ExitPolicy) -> Draft:
        return Draft(seq[:, -1:].repeat(1, limit), None, [1.0] * limit)


@pytest.fixture
def toy() -> MethodSpec:
    spec = register_method(MethodSpec(TOY, label="repeat last", color="#000000",
                                      drafter=lambda: RepeatLast))
    yield spec
    unregister_method(spec.name)
