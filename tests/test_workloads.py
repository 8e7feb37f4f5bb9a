"""Tests for autotune.workloads.prompts: loading prompt sets and encoding prompts."""

from __future__ import annotations

import json
import textwrap
from importlib import resources
from pathlib import Path

import pytest

from autotune.common.errors import AutotuneError
from autotune.workloads.prompts import Prompt, encode_prompt, load_workload

# The Spec-Bench question file autotune ships (`--workload spec_bench`).
SPEC_BENCH = Path(str(resources.files("autotune.workloads").joinpath("spec_bench.jsonl")))


def _write_jsonl(path: Path, objs: list[object]) -> Path:
    path.write_text("".join(json.dumps(o) + "\n" for o in objs), encoding="utf-8")
    return path


# --- built-in set -----------------------------------------------------------


def test_builtin_loads_with_many_categories() -> None:
    prompts = load_workload("builtin")
    assert len(prompts) >= 24
    cats = {p.category for p in prompts}
    assert len(cats) >= 6
    assert {"translation", "summarization", "code", "math", "chat"} <= cats
    assert all(isinstance(p, Prompt) and p.text.strip() for p in prompts)
    ids = [p.prompt_id for p in prompts]
    assert len(set(ids)) == len(ids)


def test_builtin_default_source() -> None:
    assert load_workload() == load_workload("builtin")


def test_builtin_limit_round_robin() -> None:
    n_cats = len({p.category for p in load_workload("builtin")})
    prompts = load_workload("builtin", limit=n_cats)
    assert len({p.category for p in prompts}) == n_cats


def test_builtin_category_filter() -> None:
    prompts = load_workload("builtin", categories=["code", "math"])
    assert prompts and {p.category for p in prompts} == {"code", "math"}


# --- Spec-Bench ---------------------------------------------------------------


def test_spec_bench_loads_filters_and_spans_categories() -> None:
    prompts = load_workload(str(SPEC_BENCH))
    assert len(prompts) > 100
    first = json.loads(SPEC_BENCH.read_text(encoding="utf-8").splitlines()[0])
    assert prompts[0].text == first["turns"][0]
    assert prompts[0].prompt_id == str(first["question_id"])
    assert prompts[0].category == first["category"]

    translation = load_workload(str(SPEC_BENCH), categories=["translation"])
    assert translation and {p.category for p in translation} == {"translation"}

    sample = load_workload(str(SPEC_BENCH), limit=20)
    assert len(sample) == 20
    assert len({p.category for p in sample}) >= 5


def test_spec_bench_ships_by_name_with_its_licence_notice() -> None:
    """`--workload spec_bench` is the file as a path would load it: all 480 questions."""
    named = load_workload("spec_bench")
    assert named == load_workload(str(SPEC_BENCH))
    assert len(named) == 480 and len({p.category for p in named}) == 13
    notice = SPEC_BENCH.with_name("spec_bench_NOTICE.txt").read_text(encoding="utf-8")
    assert "Apache License, Version 2.0" in notice and "hemingkx/Spec-Bench" in notice


# --- the copy-heavy editing set ---------------------------------------------------


def test_copy_edit_is_built_from_the_standard_library_the_same_each_time() -> None:
    prompts = load_workload("copy_edit")
    assert prompts == load_workload("copy_edit")             # deterministic
    assert len(prompts) >= 30
    assert {p.category for p in prompts} == {"code_rename", "code_types", "code_doc",
                                             "text_fix", "text_list"}
    assert len({p.prompt_id for p in prompts}) == len(prompts)
    # A code prompt holds its function's source as the file has it: the answer copies it.
    rename = next(p for p in prompts if p.prompt_id == "copy-code_rename-textwrap.wrap")
    assert "def wrap(text, width=70, **kwargs):" in rename.text
    assert textwrap.wrap.__doc__.splitlines()[0] in rename.text
    # The spelling task holds misspelt words; the list task keeps the text as it is.
    fix = [p for p in prompts if p.category == "text_fix"]
    assert fix and all(p.text.startswith("Correct the spelling") for p in fix)
    limited = load_workload("copy_edit", limit=5)
    assert len({p.category for p in limited}) == 5


# --- other file formats -----------------------------------------------------------


def test_plain_text_file(tmp_path: Path) -> None:
    path = tmp_path / "prompts.txt"
    path.write_text("first prompt\n\n   \nsecond prompt\n", encoding="utf-8")
    prompts = load_workload(str(path))
    assert [p.text for p in prompts] == ["first prompt", "second prompt"]
    assert {p.category for p in prompts} == {"default"}
    assert len({p.prompt_id for p in prompts}) == 2


def test_jsonl_with_prompt_and_text_keys(tmp_path: Path) -> None:
    path = _write_jsonl(
        tmp_path / "w.jsonl",
        [
            {"prompt": "hello", "category": "chat", "id": "a"},
            {"text": "2+2?", "category": "math"},
            {"prompt": "no category"},
        ],
    )
    prompts = load_workload(str(path))
    assert [p.text for p in prompts] == ["hello", "2+2?", "no category"]
    assert [p.category for p in prompts] == ["chat", "math", "default"]
    assert prompts[0].prompt_id == "a"
    assert len({p.prompt_id for p in prompts}) == 3


def test_limit_preserves_file_order_within_category(tmp_path: Path) -> None:
    objs = [{"prompt": f"a{i}", "category": "a"} for i in range(5)] + [
        {"prompt": f"b{i}", "category": "b"} for i in range(2)
    ]
    path = _write_jsonl(tmp_path / "w.jsonl", objs)
    assert [p.text for p in load_workload(str(path), limit=5)] == ["a0", "b0", "a1", "b1", "a2"]
    assert len(load_workload(str(path), limit=100)) == 7


# --- bad inputs ---------------------------------------------------------------------


def _error(source: str, **kwargs: object) -> str:
    with pytest.raises(AutotuneError) as info:
        load_workload(source, **kwargs)  # type: ignore[arg-type]
    message = str(info.value)
    assert "\n" not in message
    return message


def test_missing_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.jsonl"
    msg = _error(str(missing))
    assert "not found" in msg and str(missing) in msg


def test_non_utf8_file(tmp_path: Path) -> None:
    path = tmp_path / "bad.txt"
    path.write_bytes(b"caf\xe9\n")
    msg = _error(str(path))
    assert "UTF-8" in msg and str(path) in msg


def test_bad_json_reports_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"prompt": "ok"}\n\n{"prompt": oops}\n', encoding="utf-8")
    msg = _error(str(path))
    assert str(path) in msg and "line 3" in msg and "JSON" in msg


def test_object_without_text(tmp_path: Path) -> None:
    path = _write_jsonl(tmp_path / "w.jsonl", [{"prompt": "ok"}, {"category": "chat", "turns": []}])
    msg = _error(str(path))
    assert "line 2" in msg and "prompt" in msg


def test_non_object_line(tmp_path: Path) -> None:
    path = _write_jsonl(tmp_path / "w.jsonl", [["a list"]])
    assert "line 1" in _error(str(path))


@pytest.mark.parametrize("name,content", [("empty.txt", "\n  \n"), ("empty.jsonl", ""), ("e.txt", "")])
def test_empty_workload(tmp_path: Path, name: str, content: str) -> None:
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    assert "no prompts" in _error(str(path))


def test_unknown_category_lists_available() -> None:
    msg = _error("builtin", categories=["poetry"])
    assert "poetry" in msg and "translation" in msg and "code" in msg


@pytest.mark.parametrize("limit", [0, -3])
def test_limit_must_be_positive(limit: int) -> None:
    assert "at least 1" in _error("builtin", limit=limit)


# --- encode_prompt ----------------------------------------------------------------


def _tiny_tokenizer(chat_template: str | None):
    """A word-level tokenizer built offline, with a BOS token added around plain text."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    words = ["hello", "world", "how", "are", "you", "?", "user", "assistant", ":"]
    vocab = {"<unk>": 0, "<s>": 1, "<|user|>": 2, "<|assistant|>": 3}
    vocab.update({w: i + len(vocab) for i, w in enumerate(words)})
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    backend.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", bos_token="<s>")
    tok.add_special_tokens({"additional_special_tokens": ["<|user|>", "<|assistant|>"]})
    tok.chat_template = chat_template
    return tok


def test_encode_prompt_with_chat_template() -> None:
    template = (
        "{% for m in messages %}<|user|> {{ m['content'] }} {% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>{% endif %}"
    )
    tok = _tiny_tokenizer(template)
    ids = encode_prompt(tok, Prompt(text="hello world", category="chat", prompt_id="x"))
    assert isinstance(ids, list) and all(type(i) is int for i in ids)
    assert ids == [tok.convert_tokens_to_ids(t) for t in ["<|user|>", "hello", "world", "<|assistant|>"]]
    # The template already provides the framing; no BOS is added on top.
    assert tok.bos_token_id not in ids
    assert "<|assistant|>" in tok.decode(ids)


def test_encode_prompt_without_chat_template() -> None:
    tok = _tiny_tokenizer(None)
    ids = encode_prompt(tok, Prompt(text="how are you ?", category="chat", prompt_id="x"))
    assert isinstance(ids, list) and all(type(i) is int for i in ids)
    assert ids[0] == tok.bos_token_id
    assert ids[1:] == [tok.convert_tokens_to_ids(t) for t in ["how", "are", "you", "?"]]


def test_split_is_stratified_seeded_and_disjoint() -> None:
    from autotune.workloads.prompts import split_workload
    prompts = load_workload("builtin")
    search, held = split_workload(prompts, 0.4, seed=0)
    assert len(search) + len(held) == len(prompts)
    assert {p.prompt_id for p in search}.isdisjoint(p.prompt_id for p in held)
    for category in {p.category for p in prompts}:
        total = sum(p.category == category for p in prompts)
        taken = sum(p.category == category for p in held)
        assert taken == min(int(total * 0.4 + 0.5), total - 1)   # every category gives its share
        assert any(p.category == category for p in search)      # and keeps one to search on
    assert split_workload(prompts, 0.4, seed=0) == (search, held)
    assert split_workload(prompts, 0.4, seed=1)[1] != held
    with pytest.raises(AutotuneError, match="strictly between 0 and 1"):
        split_workload(prompts, 1.0)


def test_duplicate_ids_in_a_file_are_made_unique(tmp_path: Path) -> None:
    # Figures are pooled per prompt id: two prompts sharing one must stay two prompts.
    path = tmp_path / "dup.jsonl"
    path.write_text('{"id": 7, "prompt": "a"}\n{"id": 7, "prompt": "b"}\n')
    assert [p.prompt_id for p in load_workload(str(path))] == ["7", "7#2"]
