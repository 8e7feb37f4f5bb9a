"""`llama_ngram` in autotune's decoder: llama-server's ngram-simple rule at its edges,
greedy losslessness on the default model, one-hot drafts under sampling, the config
checks and the export. (Its equality with the server's own drafts is in
tests/test_llama_server.py, which needs the binary.)"""

from __future__ import annotations

import json
import time

import pytest
import torch
from conftest import real_prompts
from test_exports import error_of, frozen

from autotune.common.errors import AutotuneError
from autotune.schema.config import DecodeConfig
from autotune.decoding.decoder import SpeculativeDecoder
from autotune.schema.llama_spec import canonical, stateful
from autotune.decoding.policies import make_policy
from autotune.exports import export, expressible
from autotune.methods.llama_ngram.drafter import LlamaNgramDrafter, ngram_simple_draft
from autotune.workloads.prompts import encode_prompt


def test_ngram_simple_takes_the_most_recent_match_with_room_after_it():
    # n = 2, m = 3: history needs more than n + m + 1 = 6 tokens.
    history = [9, 1, 2, 7, 7, 7, 1, 2, 5, 6, 8, 4, 1]
    # Pattern: last n - 1 history tokens (1) + the sampled token (2) = [1, 2]; its most
    # recent occurrence is at 6, followed by [5, 6, 8].
    assert ngram_simple_draft(history, 2, 2, 3) == [5, 6, 8]
    # The cap m.
    assert ngram_simple_draft(history, 2, 2, 2) == [5, 6]
    # Too short a history: nothing, even with a match.
    assert ngram_simple_draft(history[:6], 2, 2, 3) == []


def test_ngram_simple_never_matches_position_zero_nor_a_short_tail():
    # [1, 2] occurs only at position 0: no draft (position 0 means "no match" upstream).
    assert ngram_simple_draft([1, 2, 5, 6, 8, 9, 4, 3, 1], 2, 2, 3) == []
    # The most recent match (at 11) has one token after it (< n = 2): no draft, and no
    # fallback to the older occurrence at 1, which [5, 6, 8] follows.
    history = [0, 1, 2, 5, 6, 8, 9, 4, 3, 7, 3, 1, 2, 1]
    assert ngram_simple_draft(history, 2, 2, 3) == []


def test_types_are_checked_and_put_in_the_servers_order():
    assert canonical("ngram-mod, ngram-simple,ngram-mod") == "ngram-simple,ngram-mod"
    assert stateful("ngram-simple,ngram-mod") and not stateful("ngram-simple")
    with pytest.raises(AutotuneError, match="did you mean 'ngram-mod'"):
        DecodeConfig(method="llama_ngram", llama_spec_type="ngram-mode").validate()
    with pytest.raises(AutotuneError, match="exit_policy=fixed"):
        DecodeConfig(method="llama_ngram", exit_policy="confidence").validate()
    with pytest.raises(AutotuneError, match="runs in llama-server only"):
        LlamaNgramDrafter(DecodeConfig(method="llama_ngram", llama_spec_type="ngram-mod"),
                          64, ())


def test_greedy_llama_ngram_is_lossless_on_the_default_model(default_model, ar_reference):
    prompts = [encode_prompt(default_model.tokenizer, p) for p in real_prompts(8)]
    # The AR baseline, decoded once per prompt (conftest.py), for both configs.
    wants = ar_reference(prompts, 24)
    drafted = 0
    for n, m in ((2, 4), (3, 8)):
        config = DecodeConfig(method="llama_ngram", llama_ngram_size_n=n, k=m,
                              engine="llama_server")
        decoder = SpeculativeDecoder(default_model, config)
        for ids, want in zip(prompts, wants):
            got = decoder.generate(ids, 24, time.perf_counter)
            assert got.tokens == want
            drafted += sum(r.drafted for r in got.rounds)
    assert drafted > 0


def test_sampling_drafts_are_one_hot():
    config = DecodeConfig(method="llama_ngram", llama_ngram_size_n=2, k=3, temperature=1.0)
    drafter = LlamaNgramDrafter(config, 64, ())
    seq = torch.tensor([[9, 1, 2, 7, 7, 7, 1, 2, 5, 6, 8, 4, 1, 2]])
    draft = drafter.propose(seq, 8, make_policy(config))
    assert draft.tokens[0].tolist() == [5, 6, 8]
    assert draft.q is not None and torch.equal(draft.q.argmax(-1), draft.tokens)
    assert float(draft.q.max(-1).values.min()) == 1.0
    # The round's limit cuts it (the server's tokens-left-minus-one).
    assert drafter.propose(seq, 2, make_policy(config)).tokens[0].tolist() == [5, 6]


def test_llama_ngram_exports_to_llama_server_only():
    doc = frozen(method="llama_ngram", llama_spec_type="ngram-simple,ngram-mod", k=32,
                 llama_ngram_size_n=6, llama_ngram_mod_n_match=16, llama_ngram_mod_n_min=4,
                 engine="llama_server")
    assert expressible(doc) == ["llama_server"]
    assert "cannot express method=llama_ngram" in error_of("vllm", doc)
    data = json.loads(export(doc, "llama_server").primary())
    assert data["args"][2:] == [
        "--spec-type", "ngram-simple,ngram-mod",
        "--spec-ngram-simple-size-n", "6", "--spec-ngram-simple-size-m", "32",
        "--spec-ngram-mod-n-match", "16", "--spec-ngram-mod-n-min", "4",
        "--spec-ngram-mod-n-max", "32", "-np", "1", "--poll", "0"]
    assert data["request"]["temperature"] == 0.0 and data["request"]["top_k"] == 0
