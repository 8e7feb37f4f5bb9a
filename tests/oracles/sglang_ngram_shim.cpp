// A C ABI over SGLang's NGRAM corpus (sglang 0.5.23's ngram_corpus sources, compiled
// beside this file by tests/sglang_oracle.py), so tests can ask the engine's own code
// for its draft trees. Inserts are joined before returning, as ngram_worker.py joins
// them (synchronize) before each match.
#include <cstdint>
#include <cstring>
#include <vector>

#include "ngram.h"

using sglang::ngram::Ngram;
using sglang::ngram::Param;

extern "C" {

void* oracle_new(int64_t capacity, int64_t depth, int64_t min_breadth, int64_t max_breadth,
                 int64_t draft_token_num, int64_t prob) {
  Param param;
  param.enable = true;
  param.enable_router_mode = false;
  param.max_trie_depth = depth;
  param.min_bfs_breadth = min_breadth;
  param.max_bfs_breadth = max_breadth;
  param.draft_token_num = draft_token_num;
  param.match_type = prob ? "PROB" : "BFS";
  return new Ngram(capacity, param);
}

void oracle_free(void* corpus) { delete static_cast<Ngram*>(corpus); }

void oracle_insert(void* corpus, const int32_t* tokens, int64_t len) {
  auto* ngram = static_cast<Ngram*>(corpus);
  std::vector<std::vector<int32_t>> batch{std::vector<int32_t>(tokens, tokens + len)};
  ngram->asyncInsert(std::move(batch));
  ngram->synchronize();
}

// Writes draft_token_num tokens and draft_token_num^2 mask bytes.
void oracle_match(void* corpus, int64_t state, const int32_t* tokens, int64_t len,
                  int64_t total_len, int32_t* out_tokens, uint8_t* out_mask) {
  auto* ngram = static_cast<Ngram*>(corpus);
  auto result = ngram->batchMatch({state}, {std::vector<int32_t>(tokens, tokens + len)},
                                  {static_cast<size_t>(total_len)});
  std::memcpy(out_tokens, result.token.data(), result.token.size() * sizeof(int32_t));
  std::memcpy(out_mask, result.mask.data(), result.mask.size());
}

void oracle_erase(void* corpus, int64_t state) {
  static_cast<Ngram*>(corpus)->eraseMatchState({state});
}
}
