"""The decoder loop: prefill, then rounds of draft -> verify -> accept, with a trace.

Each round is the paper's algorithm: draft, verify, accept, append. A chain round
(`_chain_round`) drafts up to k tokens under the exit policy; a tree round
(`_tree_round`, with tree knobs) drafts a tree (tree_drafting.py) that one target pass
verifies with a tree mask before the accepted path's cache entries are compacted
(tree.py). Both return the same `RoundResult`, which the loop appends and traces.

The method's drafter comes from the registry (`get_method(name).drafter_class()
.build(context)`), so the decoder names no method. What a config must satisfy on these
models is checked before anything is built, by `decoding/compatibility.py` (which the
replay tier and the agreement proxy call alone); the prefill shared between the arms of
a measurement is `decoding/prefill.PrefillMemo`. The same loop runs the AR baseline
(`NoDraft` proposes nothing, so every round is one target step) and every speculative
method, so the baseline pays exactly the loop's own overhead and nothing else. The loop
does not time itself: it reads a clock handed in by `autotune.measure.measurement`, the one module
that times anything.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Collection

import torch

from autotune.common.errors import AutotuneError
from autotune.schema.config import DecodeConfig
from autotune.decoding.compatibility import check_decodable
from autotune.decoding.drafter_choice import pick_drafter
from autotune.decoding.drafters.base import (
    Draft,
    DraftContext,
    Drafter,
    TokenChooser,
    TreeHooks,
    TreeProposer,
)
from autotune.schema.engines import EngineRules, engine_rules
from autotune.schema.methods import MethodSpec, get_method
from autotune.decoding.numerics import (
    NumericsRecorder,
    TokenNumerics,
    records,
    teacher_force,
)
from autotune.decoding.policies import ExitPolicy, make_policy
from autotune.decoding.prefill import PrefillMemo
from autotune.decoding.sampling import probabilities
from autotune.decoding.tree import DraftTree, compact_cache
from autotune.decoding.tree_drafting import TreeDrafter
from autotune.decoding.verify import (
    block_verify,
    greedy_tree_verify,
    greedy_verify,
    match_sample,
    rejection_sample,
    tree_rejection_sample,
)
from autotune.models.llama import KVCache
from autotune.models.loading import LoadedModel
from autotune.models.static_forward import StaticLlamaForward

# HF's heuristic schedule grows K without bound; a cap keeps one runaway round from
# drafting far past what any verify pass should carry.
MAX_DRAFT_TOKENS = 64


def chain_limit(policy_limit: int, budget: int, config: DecodeConfig,
                rules: EngineRules) -> int:
    """The most chain drafts a round with `budget` tokens left may propose: k drafts can
    yield k + 1 tokens, so budget - 1, unless the engine drafts a model-free method's
    tokens past the budget (transformers' prompt lookup, vLLM's n-gram and suffix
    drafters: the full K while 2+ tokens are left; the tokens past the budget are dropped
    after verification; vLLM, either runner, drafts them even when one token is left:
    `ngram_drafts_last_token`)."""
    model_free = get_method(config.method).model_free
    last_token = model_free and rules.ngram_drafts_last_token
    if budget <= 0 or (budget == 1 and not last_token):
        return 0
    if model_free and rules.ngram_ignores_budget:
        return min(policy_limit, MAX_DRAFT_TOKENS)
    return min(policy_limit, budget - 1, MAX_DRAFT_TOKENS)


@dataclass
class RoundTrace:
    """One draft/verify round: what a replay or a plot needs."""

    drafted: int                 # draft tokens proposed
    accepted: int                # of them accepted by the verifier (none past an EOS)
    emitted: int                 # tokens appended (accepted + the target's own), after EOS/limit
    confidences: list[float]     # top-1 probability of each draft token's distribution
    draft_s: float               # proposing the draft
    verify_s: float              # the target's forward over the verify tokens
    verified: int                # tokens in the verify pass (drafted + 1)
    other_s: float = 0.0         # accept/reject, cache crop, bookkeeping, streaming
    exit_layers: list[int] = field(default_factory=list)
    draft_depth: int = 0         # deepest drafted level (a chain: its length)


@dataclass
class Generation:
    """One prompt's output and timings. `tokens` are the generated ids (EOS included)."""

    prompt_len: int
    tokens: list[int]
    prefill_s: float
    decode_s: float
    rounds: list[RoundTrace]
    cache_bytes: int
    # Tokens out when the prefill phase ended (the clock split prefill_s | decode_s
    # there). Ours: 1, the prefill's own token. An engine whose first pass also verifies a
    # draft (transformers) may end it with more; they are not decode tokens.
    first_tokens: int = 1
    # Whether rounds carry draft / verify times (an engine's rounds do not).
    timed_parts: bool = True
    # (drafted, accepted) draft tokens in total, from an engine that reports no rounds
    # (llama-server's timings.draft_n / draft_n_accepted); None where rounds are kept.
    draft_totals: tuple[int, int] | None = None
    # The engine's own decode clock (llama-server's timings.predicted_ms), beside the
    # client's `decode_s`; None for our decoder.
    engine_decode_s: float | None = None
    # Per emitted token, the top-K logits of the target pass that chose it, and tier a's
    # count (decoding/numerics.py); only greedy bfloat16 / float16 runs of our decoder.
    numerics: TokenNumerics | None = None

    @property
    def decoded(self) -> int:
        """Tokens produced in the decode phase (what `decode_s` paid for)."""
        return max(len(self.tokens) - self.first_tokens, 0)


@dataclass
class RoundResult:
    """What one round drafted, verified and accepted, chain or tree alike (before the
    cut after an EOS).

    new_tokens: the accepted draft tokens, then the target's own next token.
    n_accepted: draft tokens accepted; drafted: draft tokens proposed (a tree's nodes);
    verified: tokens in the verify pass (drafted + 1); confidences, exit_layers: per
    draft token or node; depth: the deepest drafted level (a chain: its length);
    draft_done / forward_done: the clock when drafting / the verify pass ended.
    """

    new_tokens: list[int]
    n_accepted: int
    drafted: int
    verified: int
    confidences: list[float]
    exit_layers: list[int]
    depth: int
    draft_done: float
    forward_done: float
    # [len(new_tokens), V] the verify pass's logits rows that chose new_tokens (row i:
    # new_tokens[i]), kept only when the run records its numerics; else None.
    chose: torch.Tensor | None = None


@dataclass
class _Run:
    """One generation's moving parts, made fresh by `generate` (nothing outlives it)."""

    cache: KVCache
    drafter: Drafter
    tree_drafter: "TreeDrafter | _OwnTrees | None"
    policy: ExitPolicy
    generator: torch.Generator | None
    clock: Callable[[], float]
    # The drafter reads the target's features (EAGLE, Medusa): each target pass hands
    # over those of the tokens it kept.
    features: bool = False
    # Greedy low precision: the rows that chose each token (decoding/numerics.py).
    numerics: NumericsRecorder | None = None


class SpeculativeDecoder:
    """Generates with one DecodeConfig over a target (and optionally a draft) model."""

    def __init__(self, target: LoadedModel, config: DecodeConfig,
                 draft: LoadedModel | None = None) -> None:
        # Every check first (decoding/compatibility.py), in one line on a refusal.
        checked = check_decodable(target, config, draft)
        self.spec: MethodSpec = checked.spec
        # A per-category --draft folder: the member the `drafter` knob names drafts
        # (`routed`: chosen per prompt in `generate`; `all` stands in for the checks).
        self.drafters = checked.drafters
        self.target, self.draft, self.config = target, checked.draft, config
        # The engine whose drafting/verification rules this run follows (`--target`).
        self.rules: EngineRules = engine_rules(config.engine)
        self.vocab_size = checked.vocab_size
        self.eos = target.eos_token_ids
        # What the method keeps across the requests this decoder serves (None: nothing).
        self._state_factory = self.spec.shared_state_factory()
        self.shared: Any = self._state_factory(config) if self._state_factory else None
        # The target's prefills shared with other decoders serving the same prompts
        # (`share_prefills`); None: each generation runs its own.
        self.prefill_memo: PrefillMemo | None = None

    def share_prefills(self, memo: PrefillMemo) -> None:
        """Take the target's prefill from `memo` when it holds this prompt's (and leave
        it there for the next decoder): see `PrefillMemo`."""
        self.prefill_memo = memo

    @property
    def stateful(self) -> bool:
        """Whether its method keeps state across requests (earlier outputs)."""
        return self.shared is not None

    def forget(self) -> None:
        """Start afresh: a new cross-request state, as a restarted engine has."""
        if self._state_factory is not None:
            self.shared = self._state_factory(self.config)

    def absorb(self, prompt: list[int], response: list[int], max_new_tokens: int) -> None:
        """File a request served untimed (a warm history: `response` generated within
        `max_new_tokens`) into the cross-request state, as the engine would have after
        serving it; nothing for a stateless method."""
        if self.shared is not None:
            self.shared.absorb(prompt, response, max_new_tokens)

    def static_forwards(self, categories: Collection[str | None] = (None,)
                        ) -> dict[str, StaticLlamaForward]:
        """The static (graphed) forwards this decoder runs prompts of `categories` on,
        by model name: the target's and the draft's, where they are static forwards."""
        found: dict[str, StaticLlamaForward] = {}
        for model in [self.target] + [self.draft_for(c) for c in categories]:
            if model is not None and isinstance(model.forward, StaticLlamaForward):
                found.setdefault(model.name, model.forward)
        return found

    def reserve(self, prompt_len: int, max_new_tokens: int,
                categories: Collection[str | None] = (None,)) -> bool:
        """Size the static caches for generating `max_new_tokens` after a `prompt_len`
        token prompt (of `categories`), before anything is timed: a cache grown later
        drops its graphs, and they are captured again inside a timed run. Returns
        whether a cache grew."""
        max_len = self._positions_needed(prompt_len, max_new_tokens)
        grew = False
        for forward in self.static_forwards(categories).values():
            grew = forward.reserve(max_len) or grew
        return grew

    @property
    def greedy_drafts(self) -> bool:
        """Whether a model drafter proposes its argmax under sampling: the engine's rule,
        except where turning block verification on makes the engine sample its drafts
        (SGLang, `EngineRules.block_samples_drafts`)."""
        return self.rules.greedy_model_drafts and not (
            self.config.verify == "block" and self.rules.block_samples_drafts)

    def draft_for(self, category: str | None) -> LoadedModel | None:
        """The draft that drafts a prompt of `category` (differs from `self.draft` only
        under `drafter=routed` with a per-category folder)."""
        if not self.spec.uses_draft:
            return self.draft
        return pick_drafter(self.drafters, self.config.drafter, category)

    def _drafter(self, target_cache: KVCache, max_len: int, choose: TokenChooser,
                 draft: LoadedModel | None) -> Drafter:
        context = DraftContext(target=self.target, draft=draft, config=self.config,
                               target_cache=target_cache, max_len=max_len, choose=choose,
                               vocab_size=self.vocab_size, spec=self.spec,
                               shared=self.shared)
        return self.spec.drafter_class().build(context)

    def _tree_drafter(self, drafter: Drafter, device: torch.device
                      ) -> TreeDrafter | _OwnTrees | None:
        """The tree grower over `drafter` when the config drafts a tree, else None."""
        if self.spec.own_trees:
            if not isinstance(drafter, TreeProposer):
                raise AutotuneError(f"method={self.spec.name} is registered as building "
                                    "its own trees, but its drafter is no TreeProposer")
            return _OwnTrees(drafter)
        if not self.config.is_tree:
            return None
        if not isinstance(drafter, TreeHooks):
            raise AutotuneError(f"method={self.spec.name} is registered as able to draft a "
                                "tree, but its drafter has no tree hooks (TreeHooks)")
        return TreeDrafter(drafter, self.config, self.vocab_size, device)

    def _target_token(self, logits: torch.Tensor, generator: torch.Generator | None
                      ) -> torch.Tensor:
        """The target's own next token from logits [B, V]: argmax, or a sample."""
        if self.config.greedy:
            return logits.argmax(dim=-1)
        p = probabilities(logits[..., : self.vocab_size], self.config.temperature,
                          self.config.top_p)
        return torch.multinomial(p, 1, generator=generator).squeeze(1)

    def _verify(self, draft: Draft, logits: torch.Tensor, generator: torch.Generator | None
                ) -> tuple[int, int]:
        """(n_accepted, next token) for target logits [B, k+1, V]."""
        if self.config.greedy:
            n, nxt = greedy_verify(draft.tokens, logits)
        else:
            p = probabilities(logits[..., : self.vocab_size], self.config.temperature,
                              self.config.top_p)
            # A round without drafts (the AR baseline, a budget of one token, no n-gram
            # match) is rejection sampling with k = 0: a plain draw from p.
            if self.rules.match_verification:
                n, nxt = match_sample(draft.tokens, p, generator)
            else:
                q = draft.q if draft.q is not None else p[:, :0]
                rule = block_verify if self.config.verify == "block" else rejection_sample
                n, nxt = rule(draft.tokens, q, p, generator)
        return int(n[0]), int(nxt[0])

    def _chain_round(self, run: _Run, seq: torch.Tensor, budget: int) -> RoundResult:
        """Draft a chain under the exit policy, verify it in one target pass, keep the
        accepted prefix (and its cache entries) and the target's next token."""
        limit = chain_limit(run.policy.limit(), budget, self.config, self.rules)
        draft = run.drafter.propose(seq, limit, run.policy) if limit > 0 else Draft.empty(seq)
        draft_done = run.clock()
        verified_len = run.cache.length
        verify_ids = torch.cat((seq[:, -1:], draft.tokens), dim=1)
        if run.features:
            logits, features = self.target.forward.forward_features(verify_ids, run.cache,
                                                                    start=verified_len)
        else:
            logits = self.target.forward.forward(verify_ids, run.cache, start=verified_len)
        forward_done = run.clock()
        n_accepted, next_token = self._verify(draft, logits, run.generator)
        run.cache.crop(verified_len + 1 + n_accepted)
        if draft.k:
            run.drafter.observe(n_accepted)
        if run.features:
            run.drafter.target_features(features[:, :1 + n_accepted])
        run.policy.update(draft.k, n_accepted, draft.confidences)
        return RoundResult(
            new_tokens=draft.tokens[0, :n_accepted].tolist() + [next_token],
            n_accepted=n_accepted, drafted=draft.k, verified=verify_ids.shape[1],
            confidences=draft.confidences, exit_layers=draft.exit_layers, depth=draft.k,
            draft_done=draft_done, forward_done=forward_done,
            # Row j scored the slot after the j-th kept token: rows 0..n_accepted.
            chose=logits[0, :n_accepted + 1] if run.numerics is not None else None)

    def _tree_round(self, run: _Run, seq: torch.Tensor, budget: int) -> RoundResult:
        """Draft a tree, verify every node in one target pass with a tree mask, keep the
        accepted path (compacting its cache entries) and the target's next token."""
        assert run.tree_drafter is not None
        # A tree never grows deeper than the budget: a path of d nodes yields d+1.
        tree = run.tree_drafter.propose(seq, min(budget - 1, MAX_DRAFT_TOKENS))
        draft_done = run.clock()
        cache = run.cache
        base = cache.length
        verify_ids = torch.cat((seq[:, -1:], tree.tokens), dim=1)
        device = verify_ids.device
        pass_args = dict(start=base, tree_mask=tree.attention_mask(device),
                         position_ids=tree.position_ids(seq.shape[1] - 1, device))
        if run.features:
            logits, features = self.target.forward.forward_features(verify_ids, cache,
                                                                    **pass_args)
        else:
            logits = self.target.forward.forward(verify_ids, cache, **pass_args)
        forward_done = run.clock()
        children, node_tokens = tree.children(), tree.tokens[0].tolist()
        if self.config.greedy:
            path, next_token = greedy_tree_verify(children, node_tokens,
                                                  logits[0].argmax(dim=-1).tolist())
        else:
            def p_at(node: int) -> torch.Tensor:
                return probabilities(logits[0, node, : self.vocab_size],
                                     self.config.temperature, self.config.top_p)

            path, next_token = tree_rejection_sample(children, node_tokens, p_at,
                                                     run.generator)
        compact_cache(cache, base, path)
        if run.features:
            run.drafter.target_features(features[:, [0] + path])
        return RoundResult(
            new_tokens=tree.path_tokens(path) + [next_token], n_accepted=len(path),
            drafted=tree.size, verified=tree.size + 1, confidences=tree.probs,
            exit_layers=tree.exit_layers, depth=tree.depth, draft_done=draft_done,
            forward_done=forward_done,
            # The root's row chose the first path token, each path node's the next.
            chose=logits[0, [0] + path] if run.numerics is not None else None)

    @torch.inference_mode()
    def generate(self, prompt: list[int], max_new_tokens: int, clock: Callable[[], float],
                 generator: torch.Generator | None = None,
                 on_tokens: Callable[[list[int]], None] | None = None,
                 category: str | None = None) -> Generation:
        """Generate up to `max_new_tokens` after `prompt`, stopping after an EOS token.

        `on_tokens(ids)` is called with each round's new tokens (the first one, from
        the prefill, included) for streaming; its time counts as the round's `other_s`.
        `category`: the prompt's workload category (it picks the drafter under
        `drafter=routed`).
        """
        if max_new_tokens < 1:
            raise AutotuneError("max_new_tokens must be at least 1")
        max_len = self._positions_needed(len(prompt), max_new_tokens)
        run = self._new_run(max_len, clock, generator, category)
        draft_round = self._tree_round if run.tree_drafter is not None else self._chain_round
        # The sequence lives in one preallocated buffer; `seq` views its filled part.
        buffer = torch.zeros((1, max_len), dtype=torch.long, device=self.target.device)
        buffer[0, : len(prompt)] = torch.tensor(prompt, dtype=torch.long)
        length = len(prompt)

        start_time = clock()
        first, credit = self._prefill(run, buffer[:, :length], generator)
        buffer[0, length] = first
        length += 1
        generated = [first]
        if on_tokens is not None:
            on_tokens([first])
        decode_start = clock()
        rounds: list[RoundTrace] = []
        round_start = decode_start
        while len(generated) < max_new_tokens and generated[-1] not in self.eos:
            # Draft, verify, accept: at most budget tokens come back.
            result = draft_round(run, buffer[:, :length], max_new_tokens - len(generated))
            # Up to the budget (an engine may draft past it) and the first EOS.
            new_tokens = _through_first(result.new_tokens[: max_new_tokens - len(generated)],
                                        self.eos)
            if run.numerics is not None:
                assert result.chose is not None, "a recording round keeps its rows"
                run.numerics.add(result.chose[: len(new_tokens)], new_tokens)
            buffer[0, length:length + len(new_tokens)] = torch.tensor(new_tokens)
            length += len(new_tokens)
            generated.extend(new_tokens)
            if on_tokens is not None:
                on_tokens(new_tokens)
            round_end = clock()
            rounds.append(_round_trace(result, len(new_tokens), round_start, round_end))
            round_start = round_end
        run.drafter.finish(buffer[:, :length])
        end_time = clock()
        return Generation(prompt_len=len(prompt), tokens=generated,
                          prefill_s=decode_start - start_time + credit,
                          decode_s=end_time - decode_start,
                          rounds=rounds, cache_bytes=self._cache_bytes(run),
                          numerics=self._checked(run.numerics, prompt, generated))

    def _checked(self, recorder: NumericsRecorder | None, prompt: list[int],
                 tokens: list[int]) -> TokenNumerics | None:
        """The run's numerics, folded after the clock stopped (the top-K is not timed),
        with tier b's clean teacher-forced pass beside every row (numerics.py)."""
        if recorder is None:
            return None
        numerics = recorder.finish()
        teacher_force(self.target.forward, prompt, tokens, numerics)
        return numerics

    def _positions_needed(self, prompt_len: int, max_new_tokens: int) -> int:
        """Cache positions one generation needs. Drafts never run past the token budget,
        so prompt + budget suffice for a chain; a tree also needs scratch room for its
        side branches, and some drafters draft past the budget."""
        config = self.config
        max_len = prompt_len + max_new_tokens + config.shape.scratch_room()
        if self.spec.own_trees:
            max_len += config.k                            # its whole tree, every round
        elif self.spec.model_free and self.rules.ngram_ignores_budget:
            max_len += min(config.k, MAX_DRAFT_TOKENS)     # drafts verified past the budget
        return max_len

    def _new_run(self, max_len: int, clock: Callable[[], float],
                 generator: torch.Generator | None, category: str | None) -> _Run:
        """One generation's state: its decode cache, drafter(s), policy and recorder."""
        config = self.config
        cache = self.target.forward.decode_cache(max_len)
        choose = TokenChooser(config.temperature, config.top_p, self.vocab_size, generator,
                              greedy_drafts=self.greedy_drafts,
                              drafted_confidence=self.rules.drafted_token_confidence,
                              draft_top_p=not self.rules.sampled_drafts_skip_top_p)
        drafter = self._drafter(cache, max_len, choose, self.draft_for(category))
        tree_drafter = self._tree_drafter(drafter, self.target.device)
        numerics = (NumericsRecorder(self.target.dtype)
                    if records(self.target.dtype, config.greedy) else None)
        return _Run(cache, drafter, tree_drafter, make_policy(config), generator, clock,
                    features=self.spec.reads_target_features, numerics=numerics)

    def _prefill(self, run: _Run, prompt_ids: torch.Tensor,
                 generator: torch.Generator | None) -> tuple[int, float]:
        """The target's pass over `prompt_ids` [1, P] (the drafter sees it too); returns
        the first generated token and the seconds a shared prefill adds to the measured
        window (`PrefillMemo`; 0 when the pass ran here)."""
        forward = self.target.forward
        credit = 0.0
        if run.features:
            logits, features = forward.forward_features(prompt_ids, run.cache, last_only=True)
            run.drafter.target_features(features)
        elif self.prefill_memo is not None and isinstance(run.cache, KVCache):
            logits, credit = self.prefill_memo.prefill(forward, prompt_ids, run.cache,
                                                       run.clock)
        else:
            logits = forward.forward(prompt_ids, run.cache, last_only=True)
        run.drafter.prefill(prompt_ids)
        first = int(self._target_token(logits[:, -1], generator)[0])
        if run.numerics is not None:
            run.numerics.add(logits[0, -1:], [first])
        return first, credit

    @staticmethod
    def _cache_bytes(run: _Run) -> int:
        own_cache = run.drafter.own_cache()
        return run.cache.nbytes() + (own_cache.nbytes() if own_cache is not None else 0)


def _round_trace(result: RoundResult, emitted: int, round_start: float,
                 round_end: float) -> RoundTrace:
    """One round's trace. Drafts the verifier accepted past an EOS are never emitted:
    they count neither as tokens nor as accepted (acceptance, α, position acceptance)."""
    return RoundTrace(
        drafted=result.drafted, accepted=min(result.n_accepted, emitted), emitted=emitted,
        confidences=result.confidences, draft_s=result.draft_done - round_start,
        verify_s=result.forward_done - result.draft_done, verified=result.verified,
        other_s=round_end - result.forward_done, exit_layers=result.exit_layers,
        draft_depth=result.depth)


class _OwnTrees:
    """A TreeProposer as the tree round's drafter: its whole tree every round, however
    few tokens the budget leaves (the engine verifies it whole; the loop drops the
    tokens past the budget)."""

    def __init__(self, drafter: TreeProposer) -> None:
        self.drafter = drafter

    def propose(self, seq: torch.Tensor, depth_limit: int) -> DraftTree:
        return self.drafter.propose_tree(seq)


def _through_first(tokens: list[int], stops: frozenset[int]) -> list[int]:
    """`tokens` up to and including the first one in `stops` (all of them if none is)."""
    for i, token in enumerate(tokens):
        if token in stops:
            return tokens[: i + 1]
    return tokens
