"""decoding/compatibility.py: the decoder's checks, run without building a decoder
(issue 62): the same refusals, in one line, and what they settled."""

from __future__ import annotations

import pytest
from tiny import gpt2_model, one_thread, tiny_llama, tiny_loaded  # noqa: F401  (autouse fixture)

import autotune.decoding.decoder as decoder_module
from autotune.common.errors import AutotuneError
from autotune.decoding.compatibility import check_decodable
from autotune.decoding.decoder import SpeculativeDecoder
from autotune.schema.config import DecodeConfig


def test_what_the_checks_settle() -> None:
    target, draft = tiny_llama(0), tiny_llama(1, layers=2)
    ngram = check_decodable(target, DecodeConfig(method="ngram"), draft)
    assert (ngram.spec.name, ngram.draft, ngram.drafters) == ("ngram", draft, draft)
    drafting = check_decodable(target, DecodeConfig(method="draft_model"), draft)
    assert drafting.draft is draft and drafting.vocab_size == 64


@pytest.mark.parametrize("config, draft, says", [
    (DecodeConfig(method="draft_model"), None, "needs a draft model: pass --draft"),
    (DecodeConfig(method="eagle"), None, "needs a trained eagle drafter"),
    (DecodeConfig(method="layer_skip", attn_skip=(9,)), None, "attn_skip"),
    (DecodeConfig(method="ngram", ngram_min=3, ngram_max=2), None, "need 1 <= min <= max"),
])
def test_a_refusal_is_the_decoders_in_one_line(config: DecodeConfig, draft: None,
                                               says: str, monkeypatch) -> None:
    target = tiny_llama(0)
    with pytest.raises(AutotuneError, match=says) as checked:
        check_decodable(target, config, draft)
    assert "\n" not in str(checked.value)
    # The decoder refuses the same config with the same line, before it builds anything.
    monkeypatch.setattr(decoder_module, "engine_rules", _never)
    with pytest.raises(AutotuneError) as built:
        SpeculativeDecoder(target, config, draft)
    assert str(built.value) == str(checked.value)


def test_layer_and_tree_access_need_the_compact_forward() -> None:
    gpt2 = tiny_loaded(gpt2_model(0), name="tiny-gpt2")
    with pytest.raises(AutotuneError, match="needs layer access"):
        check_decodable(gpt2, DecodeConfig(method="layer_skip", attn_skip=(1,)))
    with pytest.raises(AutotuneError, match="draft trees need the compact"):
        check_decodable(gpt2, DecodeConfig(method="draft_model", tree_width=2, tree_depth=2),
                        tiny_loaded(gpt2_model(1), name="tiny-gpt2-draft"))


def _never(*args: object) -> None:
    raise AssertionError("the decoder went past its checks")
