"""The one place that times decoding (its clock: `autotune.measure.timing`).

`measure` runs a candidate DecodeConfig and the autoregressive baseline over the same
prompts in the same process, interleaved prompt by prompt (alternating which goes
first, so slow drifts of a shared machine hit both alike), after an untimed warm-up of
both. Time is `perf_counter` behind a device synchronisation (`Clock`). Latency is per
generated token of the decode phase (the first token comes from the prefill, which is
reported apart), tokens counted as actually generated. Speedup is the paired statistic
of `autotune.measure.paired` (AR decode time per token over the candidate's, summed over the
same prompts), with a bootstrap interval over prompts and a split by category.

`measure_arms` times several candidates against one shared baseline in the same way
(every arm on a prompt before the next prompt, the order rotating), with repeats pooled:
what re-measures a search's finalists on its validation prompts.

What it returns (`PromptRun`, `Measurement` and the figures read off them) is declared
in `measure/results.py`. It times through the runner interface alone
(`backends/base.Runner`: a static forward's captures and reserve included), so any
engine's runner, ours among them, is measured by the same steps.
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch

from autotune.backends.base import Backend, Runner
from autotune.common.errors import AutotuneError
from autotune.schema.config import DecodeConfig
from autotune.decoding.decoder import Generation
from autotune.decoding.prefill import PrefillMemo
from autotune.measure import divergence
from autotune.measure.near_tie_baseline import chunked_ar
from autotune.measure.results import Measurement, PromptRun
from autotune.measure.timing import Clock
from autotune.models.loading import LoadedModel
from autotune.workloads.prompts import Prompt, encode_prompt

WARMUP_TOKENS = 8


def measure(target: LoadedModel, config: DecodeConfig, prompts: list[Prompt],
            max_new_tokens: int, seed: int = 0, draft: LoadedModel | None = None,
            on_prompt: Callable[[int, PromptRun, "Measurement"], None] | None = None,
            backend: Backend | None = None) -> Measurement:
    """Time `config` against the AR baseline on `prompts`, interleaved.

    `on_prompt(index, run, so_far)` is called after each prompt with the Measurement of
    the prompts done so far, so a pruner sees a metric computed as the final one is.
    `backend` runs both arms (default: our decoder on `target` / `draft`).

    Peak memory: on CUDA, the allocator's peak over the candidate's runs; on CPU, where
    no allocator keeps such a count, the bytes of the weights the candidate reads (the
    draft's only when its method runs over the draft) plus the largest KV caches a
    candidate run allocated (both exact; the caches are preallocated). An engine
    backend's memory is not measured (None).
    """
    def each(index: int, repeat: int, runs: dict[str, PromptRun],
             so_far: dict[str, Measurement]) -> None:
        if on_prompt is not None:
            on_prompt(index, runs["candidate"], so_far["candidate"])

    return measure_arms(target, {"candidate": config}, prompts, max_new_tokens, seed=seed,
                        draft=draft, on_prompt=each, backend=backend)["candidate"]


def measure_arms(target: LoadedModel, configs: dict[str, DecodeConfig],
                 prompts: list[Prompt], max_new_tokens: int, repeats: int = 1, seed: int = 0,
                 draft: LoadedModel | None = None,
                 on_prompt: Callable[[int, int, dict[str, PromptRun],
                                      dict[str, Measurement]], None] | None = None,
                 backend: Backend | None = None, history: Sequence[Prompt] = (),
                 responses: dict[str, list[int]] | None = None,
                 warm_up: bool = True, prefills: PrefillMemo | None = None
                 ) -> dict[str, Measurement]:
    """Time every config of `configs` (by arm name) against one AR baseline on `prompts`.

    All arms run on a prompt before the next prompt starts, the baseline among them, in an
    order that rotates by one per prompt and repeat, so no arm always runs first (or
    right after the baseline). Each arm's Measurement holds one PromptRun per prompt and
    repeat, paired with the baseline run of that same prompt and repeat; the summary
    pools the repeats of a prompt (sums their times and tokens), so a lucky repeat is
    never picked over an unlucky one. Every config must share one temperature and top-p
    (the baseline's). `on_prompt(index, repeat, runs, so_far)` follows each prompt.

    Our decoder's arms share the target's prefill of each prompt (the first arm to
    serve it runs the pass, the others copy its keys, values and logits:
    `decoding.prefill.PrefillMemo`): decoded exactly as with their own, each run's
    `prefill_s` the pass's measured time, and one prefill per prompt instead of one per
    arm (a prompt's prefill costs about a third of an arm's run at 32 new tokens).

    `backend` runs every arm, the baseline included (the engine's own decoding without
    speculation): default our decoder (`EmbeddedBackend(target, draft)`). `target`
    gives the tokenizer that encodes the prompts, the same token ids for every engine.

    Cross-request state (a method whose engine remembers earlier outputs: `suffix`):
    each stateful arm keeps its own, warmed only by its own requests. It starts empty
    after the warm-up (which it must not remember), then files `history`, the requests
    served before `prompts` (each prompt with the baseline's output, decoded untimed
    once and kept in `responses` by prompt id), then serves `prompts` in their order;
    every repeat starts again from that history, so no repeat drafts from its own
    earlier answers. Greedy, the baseline's timed output of a prompt is that output:
    it is kept in `responses` too, so a later call whose history holds the prompt
    decodes nothing again.

    `warm_up`: False skips the untimed warm-up, for a caller that has just measured
    the same configs in this process through our own decoder (a race's later looks):
    what a warm-up pays for (allocator growth, kernel selection, lazy imports) is paid.

    `prefills`: the timed runs' memo, for a caller that measures the same prompts
    again and again (a search's trials): its prompts' prefills, timed once in this
    process, are copied by every later measurement. Default: a memo of its own.
    """
    temperature, top_p, concurrency = _shared_sampling(configs)
    if backend is None:
        from autotune.backends.embedded import EmbeddedBackend
        backend = EmbeddedBackend(target, draft)
    _check_concurrency(backend, concurrency)
    baseline = DecodeConfig(temperature=temperature, top_p=top_p, concurrency=concurrency)
    session = _ArmSession(target, draft, backend, baseline, configs, prompts,
                          max_new_tokens, seed)
    try:
        # Caches sized for the longest prompt first: one grown later drops its graphs,
        # captured again inside a timed run (a grown cache needs a warm-up again).
        if session.reserve(history) or warm_up:
            # The runners' warm-ups share one prefill too (each still runs its own
            # drafter's); the timed runs then start from a fresh memo.
            session.share_prefills()
            session.warm_up()
        session.share_prefills(prefills)
        session.serve_repeats(repeats, history, responses, on_prompt)
        results = session.results()
        # After every clock stopped: AR against itself under another pass shape.
        judged = _near_tie_baseline(target, session, baseline.greedy)
        for measured in results.values():
            measured.near_tie_baseline = judged
        return results
    finally:
        session.close()


def _near_tie_baseline(target: LoadedModel, session: "_ArmSession", greedy: bool
                       ) -> dict[str, int] | None:
    """Runs per verdict kind of greedy AR decoded in chunks against the measured AR
    runs (repeat 0), where our decoder recorded their numerics; else None."""
    if not greedy or not session.configs:
        return None
    first = session.runs[next(iter(session.configs))][:len(session.prompts)]
    if not first or any(r.baseline.numerics is None for r in first):
        return None
    counts = {kind.value: 0 for kind in divergence.Kind}
    for ids, run in zip(session.encoded, first):
        chunked = chunked_ar(target, ids, run.baseline.tokens)
        counts[divergence.classify(run.baseline, chunked).kind.value] += 1
    return counts


def _shared_sampling(configs: dict[str, DecodeConfig]) -> tuple[float, float, int]:
    """The one (temperature, top_p, concurrency) every arm shares: one baseline pairs
    them all only if they sample alike."""
    if not configs:
        raise ValueError("measure_arms needs at least one config")
    sampling = {(c.temperature, c.top_p, c.concurrency) for c in configs.values()}
    if len(sampling) != 1:
        raise ValueError(f"arms sample differently ({sorted(sampling)}); one baseline "
                         "cannot pair them")
    return sampling.pop()


def _check_concurrency(backend: Backend, concurrency: int) -> None:
    """Refuse concurrent requests in a backend that serves one at a time (its timings
    would not be of concurrency)."""
    if concurrency > 1 and not backend.serves_concurrently:
        raise AutotuneError(f"concurrency={concurrency} is measured in llama-server (measure "
                            f"--in llama_server, search --target llama_server); "
                            f"{backend.label} serves one request at a time (batch sizes: "
                            "search --batch-sizes)")


def _rotated(arms: list[str], step: int) -> list[str]:
    """The arms' order for the `step`th prompt served: rotated by one per prompt, so no
    arm always runs first (or right after the baseline)."""
    shift = step % len(arms)
    return arms[shift:] + arms[:shift]


def _restore(runner: Runner, served: list[tuple[list[int], list[int]]],
             max_new_tokens: int) -> None:
    """Start a stateful runner's repeat from the history alone, so no repeat drafts from
    its own earlier answers."""
    runner.forget()
    for ids, response in served:
        runner.absorb(ids, response, max_new_tokens)


class _ArmSession:
    """One `measure_arms` call's runners (the baseline's first), clock, seeds, memory
    peaks and runs so far: the state its steps share."""

    def __init__(self, target: LoadedModel, draft: LoadedModel | None, backend: Backend,
                 baseline: DecodeConfig, configs: dict[str, DecodeConfig],
                 prompts: list[Prompt], max_new_tokens: int, seed: int) -> None:
        self.target, self.draft, self.backend = target, draft, backend
        self.baseline, self.configs, self.prompts = baseline, configs, prompts
        self.max_new_tokens, self.seed = max_new_tokens, seed
        self.runners: dict[str, Runner] = {"baseline": backend.runner(baseline)}
        self.runners.update({name: backend.runner(c) for name, c in configs.items()})
        self.arms = list(self.runners)
        self.device = torch.device(backend.device)
        self.clock = Clock(self.device)
        self.cuda = self.device.type == "cuda"
        self.encoded = [encode_prompt(target.tokenizer, p) for p in prompts]
        self.weights = {name: backend.weights_bytes(c) for name, c in configs.items()}
        self.peaks: dict[str, int | None] = {
            name: (0 if self.weights[name] is not None else None) for name in configs}
        self.runs: dict[str, list[PromptRun]] = {name: [] for name in configs}
        categories = {p.category for p in prompts}
        self.static = {name: forward for runner in self.runners.values()
                       for name, forward in runner.static_forwards(categories).items()}
        # Graphs captured during each arm's timed runs (the baseline's included).
        self.captures: dict[str, int] = {name: 0 for name in self.runners}

    def reserve(self, history: Sequence[Prompt]) -> bool:
        """Size the runners' static caches for the longest prompt (of `history` too:
        it is decoded after the warm-up) plus the budget; whether a cache grew."""
        lengths = [len(ids) for ids in self.encoded]
        lengths += [len(encode_prompt(self.target.tokenizer, p)) for p in history]
        categories = {p.category for p in [*self.prompts, *history]}
        grew = False
        for runner in self.runners.values():
            grew = runner.reserve(max(lengths), self.max_new_tokens, categories) or grew
        return grew

    def graph_figures(self, name: str) -> tuple[str | None, int | None]:
        """`Measurement.graphs` and `graph_captures_timed` for arm `name`."""
        if not self.static:
            return None, None
        modes = {model: forward.graph_mode() for model, forward in self.static.items()}
        said = (next(iter(modes.values())) if len(set(modes.values())) == 1
                else ", ".join(f"{model}: {mode}" for model, mode in modes.items()))
        return said, self.captures[name] + self.captures["baseline"]

    def generator(self, index: int, repeat: int) -> torch.Generator:
        # Repeat 0 seeds prompt i with seed + i, as a single measurement always has.
        return torch.Generator(device=self.device).manual_seed(
            self.seed + index + repeat * len(self.prompts))

    def result(self, name: str) -> Measurement:
        target, backend = self.target, self.backend
        graphs, captures = self.graph_figures(name)
        return Measurement(
            config=self.configs[name], model=target.name,
            draft=self.draft.name if self.draft is not None else None,
            device=backend.device, dtype=str(target.dtype).removeprefix("torch."),
            max_new_tokens=self.max_new_tokens, runs=list(self.runs[name]),
            weights_bytes=self.weights[name], peak_memory_bytes=self.peaks[name],
            memory_kind=backend.memory_kind, measured_by=backend.name,
            measured_by_label=backend.label, token_exact=backend.token_exact,
            graphs=graphs, graph_captures_timed=captures)

    def results(self) -> dict[str, Measurement]:
        return {name: self.result(name) for name in self.configs}

    def warm_up(self) -> None:
        """First calls pay for allocator growth, kernel selection and lazy imports: one
        short untimed generation per runner."""
        for runner in self.runners.values():
            runner.generate(self.encoded[0], min(WARMUP_TOKENS, self.max_new_tokens),
                            self.clock, self.generator(0, 0),
                            category=self.prompts[0].category)

    def share_prefills(self, memo: PrefillMemo | None = None) -> None:
        """From here on, the arms of a prompt share the target's prefill of it, in
        `memo` or a new one (the timed runs never inherit the warm-up's cold pass):
        decoded alike, paid once per prompt (`PrefillMemo`; a runner of another engine
        ignores it)."""
        memo = memo if memo is not None else PrefillMemo()
        for runner in self.runners.values():
            runner.share_prefills(memo)

    def history(self, history: Sequence[Prompt], responses: dict[str, list[int]] | None
                ) -> list[tuple[list[int], list[int]]]:
        """The requests served before the prompts, each with the baseline's output
        (decoded untimed once, kept in `responses` by prompt id)."""
        responses = {} if responses is None else responses
        served: list[tuple[list[int], list[int]]] = []
        for earlier in history:
            ids = encode_prompt(self.target.tokenizer, earlier)
            if earlier.prompt_id not in responses:
                responses[earlier.prompt_id] = self.runners["baseline"].generate(
                    ids, self.max_new_tokens, self.clock, self.generator(0, 0),
                    category=earlier.category).tokens
            served.append((ids, responses[earlier.prompt_id]))
        return served

    def serve_prompt(self, index: int, repeat: int, order: list[str]
                     ) -> dict[str, PromptRun]:
        """Every arm on prompt `index` in `order`; each arm's run, paired with the
        baseline's, is filed and returned."""
        results = {name: self._timed(name, index, repeat) for name in order}
        prompt = self.prompts[index]
        this = {name: PromptRun(prompt.prompt_id, prompt.category, results["baseline"],
                                results[name]) for name in self.configs}
        for name, run in this.items():
            self.runs[name].append(run)
        return this

    def serve_repeats(self, repeats: int, history: Sequence[Prompt],
                      responses: dict[str, list[int]] | None,
                      on_prompt: Callable[[int, int, dict[str, PromptRun],
                                           dict[str, Measurement]], None] | None) -> None:
        """Every prompt `repeats` times, each repeat's stateful arms restored to the
        history alone, the arms' order rotating by one per prompt served; greedy, each
        prompt's baseline output kept in `responses` (what `history` would decode)."""
        stateful = [self.runners[name] for name in self.configs
                    if self.runners[name].stateful]
        served = self.history(history, responses) if stateful else []
        step = 0
        for repeat in range(repeats):
            for runner in stateful:
                _restore(runner, served, self.max_new_tokens)
            for index, prompt in enumerate(self.prompts):
                this = self.serve_prompt(index, repeat, _rotated(self.arms, step))
                step += 1
                if responses is not None and self.baseline.greedy:
                    responses.setdefault(prompt.prompt_id,
                                         next(iter(this.values())).baseline.tokens)
                if on_prompt is not None:
                    on_prompt(index, repeat, this, self.results())

    def _timed(self, name: str, index: int, repeat: int) -> Generation:
        """One timed generation, its arm's memory peak updated (CUDA's allocator peak, or
        the weights plus the cache where no allocator reports one)."""
        if self.cuda and name != "baseline":
            torch.cuda.reset_peak_memory_stats(self.device)
        captured = sum(f.captures for f in self.static.values())
        generation = self.runners[name].generate(
            self.encoded[index], self.max_new_tokens, self.clock,
            self.generator(index, repeat), category=self.prompts[index].category)
        self.captures[name] += sum(f.captures for f in self.static.values()) - captured
        weight = self.weights.get(name)
        if name != "baseline" and weight is not None:
            self.peaks[name] = max(self.peaks[name] or 0,
                                   torch.cuda.max_memory_allocated(self.device) if self.cuda
                                   else weight + generation.cache_bytes)
        return generation

    def close(self) -> None:
        """An engine instance holds its own context and buffers: freed per measurement."""
        for runner in self.runners.values():
            runner.close()
