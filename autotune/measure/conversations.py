"""Multi-turn conversations served in order: each later user turn follows its first.

A multi-turn source (Spec-Bench's 80 MT-bench questions, two turns each) gives a prompt
its later user turns (`Prompt.follow_ups`). A later turn's prompt is the conversation so
far: the earlier user turns with the model's own answers, then the new user turn. The
answers are the target's greedy continuations of at most `max_new_tokens` tokens (what
every lossless arm emits under greedy decoding), decoded once here by plain AR
decoding, untimed. `with_later_turns` puts each later turn right after the turn before
it, so a method with state across requests (suffix decoding) serves a conversation in
order, as a server does.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Callable, Sequence

from autotune.schema.config import DecodeConfig
from autotune.decoding.decoder import SpeculativeDecoder
from autotune.models.loading import LoadedModel
from autotune.workloads.prompts import Prompt, encode_prompt

def turn_id(prompt_id: str, turn: int) -> str:
    """The id of a conversation's turn (`81`, 2 -> `81.t2`; the first turn keeps its
    prompt's id)."""
    return prompt_id if turn == 1 else f"{prompt_id}.t{turn}"


def with_later_turns(target: LoadedModel, prompts: Sequence[Prompt], max_new_tokens: int,
                     on_turn: Callable[[int, int], None] | None = None,
                     answers: dict[str, str] | None = None) -> list[Prompt]:
    """`prompts` with every later turn inserted right after the turn before it (a prompt
    without follow-ups stays as it is). `on_turn(done, total)` follows each answer
    decoded; `answers` (by turn id) keeps them across calls, so lists that share
    conversations (the held-out sample and its pool) decode each answer once."""
    decoder = SpeculativeDecoder(target, DecodeConfig())
    answers = {} if answers is None else answers
    total = sum(len(p.follow_ups) for p in prompts)
    done = 0
    out: list[Prompt] = []
    for prompt in prompts:
        turn = dataclasses.replace(prompt, follow_ups=())
        out.append(turn)
        for number, follow_up in enumerate(prompt.follow_ups, start=2):
            answered = turn_id(prompt.prompt_id, number - 1)
            if answered not in answers:
                ids = encode_prompt(target.tokenizer, turn)
                tokens = decoder.generate(ids, max_new_tokens, time.perf_counter).tokens
                answers[answered] = target.tokenizer.decode(
                    tokens, skip_special_tokens=True).strip()
            answer = answers[answered]
            turn = Prompt(text=follow_up, category=prompt.category,
                          prompt_id=turn_id(prompt.prompt_id, number),
                          history=(*turn.history, (turn.text, answer)))
            out.append(turn)
            done += 1
            if on_turn is not None:
                on_turn(done, total)
    return out
