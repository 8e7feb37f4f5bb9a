"""The `verify` knob: which configs take block verification, and what each engine's
export writes for it (vLLM's rejection_sample_method, SGLang's
speculative_use_block_verification) or names as a loss."""

from __future__ import annotations

import pytest
import yaml
from test_exports import DRAFT, frozen

from autotune.common.errors import AutotuneError
from autotune.schema.config import DecodeConfig
from autotune.exports import export


def test_verify_is_token_by_default_and_checked():
    assert DecodeConfig().verify == "token"
    with pytest.raises(AutotuneError, match="verify='blok' is not one of token, block"):
        DecodeConfig(method="ngram", verify="blok").validate()


@pytest.mark.parametrize("config, says", [
    (DecodeConfig(method="layer_skip", attn_skip=(1,), tree_width=2, tree_depth=2,
                  verify="block"), "verifies a chain"),
    (DecodeConfig(method="ngram", engine="trtllm", verify="block"),
     "TensorRT-LLM does not run block verification"),
    # vLLM's Model Runner V1 (a vLLM search on a CPU) ignores rejection_sample_method.
    (DecodeConfig(method="ngram", engine="vllm_v1", verify="block"),
     r"vLLM \(Model Runner V1\) does not run block verification"),
])
def test_block_is_refused_where_it_does_not_run(config, says):
    with pytest.raises(AutotuneError, match=says):
        config.validate()


def test_vllm_writes_rejection_sample_method_block():
    doc = frozen(DRAFT, method="draft_model", k=4, temperature=1.0, engine="vllm",
                 verify="block")
    files = export(doc, "vllm").files
    text = next(v for v in files.values() if "rejection_sample_method" in v)
    assert '"rejection_sample_method": "block"' in text
    plain = export(frozen(DRAFT, method="draft_model", k=4, temperature=1.0,
                          engine="vllm"), "vllm").files
    assert not any("rejection_sample_method" in v for v in plain.values())


def test_sglang_writes_block_for_an_eagle_chain_and_names_a_loss_elsewhere():
    doc = frozen(DRAFT, method="eagle", k=3, temperature=1.0, engine="sglang",
                 verify="block")
    args = yaml.safe_load(export(doc, "sglang").files["sglang/sglang.yaml"])
    assert args["speculative-use-block-verification"] is True
    standalone = frozen(DRAFT, method="draft_model", k=3, temperature=1.0, engine="sglang",
                        verify="block")
    with pytest.raises(AutotuneError, match="verify=block"):
        export(standalone, "sglang")
    lossy = yaml.safe_load(export(standalone, "sglang", lossy=True).files["sglang/sglang.yaml"])
    assert "speculative-use-block-verification" not in lossy
