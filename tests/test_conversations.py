"""Multi-turn conversations: Spec-Bench's later turns kept, each served right after the
turn before it with the model's own greedy answer as the conversation so far."""

from __future__ import annotations

import json
import time
from pathlib import Path

from tiny import one_thread, save_tiny, tiny_llama, llama_model  # noqa: F401  (autouse)

from autotune.cli.main import main
from autotune.schema.config import DecodeConfig
from autotune.decoding.decoder import SpeculativeDecoder
from autotune.measure.conversations import turn_id, with_later_turns
from autotune.workloads.prompts import Prompt, encode_prompt, load_workload, workload_digest


def test_spec_bench_keeps_the_mt_bench_second_turns():
    prompts = load_workload("spec_bench")
    multi = [p for p in prompts if p.follow_ups]
    assert len(multi) == 80 and all(len(p.follow_ups) == 1 for p in multi)
    assert {p.category for p in multi} == {"writing", "roleplay", "reasoning", "math",
                                           "coding", "extraction", "stem", "humanities"}
    first = next(p for p in prompts if p.prompt_id == "81")
    assert first.follow_ups == ("Rewrite your previous response. Start every sentence "
                                "with the letter A.",)


def test_later_turns_follow_their_first_with_the_models_answer():
    target = tiny_llama(seed=0, scale=2.0)
    prompts = [Prompt("t1 t2 t3", "chat", "a", follow_ups=("t4 t5", "t6")),
               Prompt("t7 t8", "code", "b")]
    expanded = with_later_turns(target, prompts, 6)
    assert [p.prompt_id for p in expanded] == ["a", turn_id("a", 2), turn_id("a", 3), "b"]
    assert all(not p.follow_ups for p in expanded)
    baseline = SpeculativeDecoder(target, DecodeConfig())
    answer = target.tokenizer.decode(baseline.generate(
        encode_prompt(target.tokenizer, expanded[0]), 6, time.perf_counter).tokens,
        skip_special_tokens=True).strip()
    second, third = expanded[1], expanded[2]
    assert second.history == (("t1 t2 t3", answer),) and second.text == "t4 t5"
    assert third.history[:1] == second.history and third.history[1][0] == "t4 t5"
    assert second.category == "chat"
    # The conversation so far is in the prompt the model sees.
    ids = encode_prompt(target.tokenizer, second)
    assert ids[:len(encode_prompt(target.tokenizer, expanded[0]))] == encode_prompt(
        target.tokenizer, expanded[0])
    assert len(ids) > len(encode_prompt(target.tokenizer, prompts[0]))
    # Provenance tells a later turn from the same text asked first.
    assert workload_digest([second]) != workload_digest([Prompt("t4 t5", "chat", second.prompt_id)])


def test_measure_all_turns_from_the_command_line(tmp_path: Path, capsys):
    model = save_tiny(llama_model(seed=0, layers=2, scale=2.0), tmp_path / "model")
    workload = tmp_path / "mt.jsonl"
    workload.write_text(json.dumps({"question_id": 1, "category": "chat",
                                    "turns": ["t1 t2 t3 t1", "t2 t3"]}) + "\n")
    assert main(["measure", "--model", str(model), "--workload", str(workload),
                 "--turns", "all", "--max-new-tokens", "6", "--set", "method=ngram",
                 "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["prompts"] == 2


def test_search_turns_all_keeps_each_later_turn_after_its_first(tmp_path: Path):
    from autotune.pipeline.plan import SearchRequest, plan_search
    from autotune.pipeline.run import _with_later_turns

    model = save_tiny(llama_model(seed=0, layers=2, scale=2.0), tmp_path / "model")
    workload = tmp_path / "mt.jsonl"
    rows = [{"question_id": i, "category": "chat" if i % 2 else "code",
             "turns": [f"t{i} t{i + 1} t{i}", f"t{i + 2}"]} for i in range(1, 13)]
    workload.write_text("".join(json.dumps(r) + "\n" for r in rows))
    plan = plan_search(SearchRequest.from_mapping({
        "model": str(model), "workload": str(workload), "validation": "0.5",
        "validation_pool": 6, "validation_prompts": 4, "max_new_tokens": 4,
        "turns": "all", "out": str(tmp_path / "run")}))
    target = tiny_llama(seed=0, scale=2.0)
    expanded = _with_later_turns(plan, target)
    for prompts, before in ((expanded.prompts, plan.prompts),
                            (expanded.held_out, plan.held_out),
                            (expanded.pool, plan.pool)):
        assert [p.prompt_id for p in prompts] == [
            i for p in before for i in (p.prompt_id, turn_id(p.prompt_id, 2))]
    # The measured sample is still a prefix of a random order, each conversation whole.
    assert {p.prompt_id for p in expanded.held_out} <= {p.prompt_id for p in expanded.pool}
    assert "every turn of multi-turn prompts" in expanded.split.source
