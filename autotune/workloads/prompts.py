"""Prompt sets ("workloads") to tune and benchmark on.

A workload is one of the prompt sets shipped with the package (`BUILTIN_SETS`: a small
mixed set, Spec-Bench's 480 questions), the copy-heavy editing set built from Python's
own standard library (`autotune.workloads.copy_edit`), a JSONL file (Spec-Bench's
``question.jsonl`` or objects with a ``prompt``/``text`` key), or a plain-text file with
one prompt per line. Speculative decoding's speed-up depends
strongly on the kind of text generated, so prompts carry a category and sampling
with ``limit`` spreads across categories instead of taking the head of the file.
"""

from __future__ import annotations

import dataclasses

import hashlib
import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from autotune.common.errors import AutotuneError
from autotune.workloads.copy_edit import copy_edit_rows

BUILTIN = "builtin"
SPEC_BENCH = "spec_bench"
COPY_EDIT = "copy_edit"
# Named prompt sets shipped as package data: name -> (file, what error lines call it).
BUILTIN_SETS: dict[str, tuple[str, str]] = {
    BUILTIN: ("builtin_prompts.jsonl", "built-in prompt set"),
    # Spec-Bench's question.jsonl, unchanged (Apache-2.0; spec_bench_NOTICE.txt).
    SPEC_BENCH: ("spec_bench.jsonl", "built-in Spec-Bench question set"),
}
# Every name `--workload` takes besides a file path.
WORKLOAD_NAMES = (*BUILTIN_SETS, COPY_EDIT)
DEFAULT_CATEGORY = "default"
# `--turns`: a multi-turn prompt's first user turn only, or every turn in order
# (`measure.conversations`).
TURNS = ("first", "all")


@dataclass(frozen=True)
class Prompt:
    """One prompt of a workload: a user turn, after the earlier turns of its conversation.

    A multi-turn source (Spec-Bench's MT-bench questions) gives its first turn as `text`
    and keeps the later user turns in `follow_ups`; a later turn, once the earlier ones
    are answered (`measure.conversations`), is a Prompt whose `history` holds the
    earlier (user, assistant) turns.
    """

    text: str  # the user turn (first turn for multi-turn files)
    category: str  # e.g. "translation"; "default" when the source has none
    prompt_id: str  # stable id, e.g. "builtin-3" or the Spec-Bench question_id as str
    follow_ups: tuple[str, ...] = ()  # the later user turns of a multi-turn source
    history: tuple[tuple[str, str], ...] = ()  # earlier (user, assistant) turns


def load_workload(
    source: str = BUILTIN,
    categories: Sequence[str] | None = None,
    limit: int | None = None,
) -> list[Prompt]:
    """Load prompts from ``source``, optionally filtered by category and capped at ``limit``.

    ``source`` is a name of `WORKLOAD_NAMES` or a file path (``.jsonl`` or plain
    text). Raises AutotuneError with a one-line message on any bad input.
    """
    if limit is not None and limit < 1:
        raise AutotuneError(f"prompt limit must be at least 1, got {limit}")

    if source in BUILTIN_SETS:
        name, where = BUILTIN_SETS[source]
        text = resources.files("autotune.workloads").joinpath(name).read_text(encoding="utf-8")
        prompts = _parse_jsonl(text, where, id_prefix=source)
    elif source == COPY_EDIT:
        prompts = [Prompt(text=text, category=category, prompt_id=prompt_id)
                   for category, prompt_id, text in copy_edit_rows()]
        where = "copy-heavy editing set"
    else:
        path = Path(source)
        text = _read_text(path)
        where = str(path)
        if path.suffix.lower() == ".jsonl":
            prompts = _parse_jsonl(text, where, id_prefix=path.stem)
        else:
            prompts = _parse_plain(text, id_prefix=path.stem)

    if not prompts:
        raise AutotuneError(f"workload {where} contains no prompts")
    prompts = _unique_ids(prompts)

    if categories is not None:
        prompts = _filter_categories(prompts, categories, where)

    if limit is not None:
        prompts = round_robin(prompts, limit)
    return prompts


def workload_digest(prompts: Sequence[Prompt]) -> str:
    """A short hash of prompts' ids, categories and texts (and a later turn's earlier
    turns), in order (provenance: which prompts a figure was measured on)."""
    digest = hashlib.sha256()
    for p in prompts:
        row: list[Any] = [p.prompt_id, p.category, p.text]
        if p.history:                # first turns hash as they always have
            row.append([list(turn) for turn in p.history])
        digest.update(json.dumps(row).encode())
    return digest.hexdigest()[:16]


def split_workload(prompts: Sequence[Prompt], fraction: float,
                   seed: int = 0) -> tuple[list[Prompt], list[Prompt]]:
    """(search part, validation part): a seeded split, stratified by category.

    Each category gives `fraction` of its prompts (rounded half up) to validation, but
    keeps at least one for the search when it has two or more; the search part keeps
    file order within each category. The same prompts, fraction and seed give the same
    split, so a resumed search measures the same prompts it measured before.
    """
    if not 0.0 < fraction < 1.0:
        raise AutotuneError(f"validation fraction must lie strictly between 0 and 1, got {fraction}")
    by_category: dict[str, list[Prompt]] = {}
    for p in prompts:
        by_category.setdefault(p.category, []).append(p)
    held: set[int] = set()
    rng = random.Random(seed)
    for category in sorted(by_category):
        members = by_category[category]
        take = int(len(members) * fraction + 0.5)
        if len(members) >= 2:
            take = min(take, len(members) - 1)
        held.update(id(p) for p in rng.sample(members, take))
    search = [p for p in prompts if id(p) not in held]
    validation = [p for p in prompts if id(p) in held]
    if not search:
        raise AutotuneError(f"a validation fraction of {fraction} leaves no prompt to search on "
                            f"({len(prompts)} prompts); lower it or give more prompts")
    return search, validation


def without(prompts: Sequence[Prompt], held_out: Sequence[Prompt]) -> list[Prompt]:
    """`prompts` minus any whose text is one of `held_out`'s (a validation file's)."""
    texts = {p.text.strip() for p in held_out}
    return [p for p in prompts if p.text.strip() not in texts]


def encode_prompt(tokenizer: Any, prompt: Prompt) -> list[int]:
    """Token ids the model should see for ``prompt``, using the chat template when there is one."""
    if getattr(tokenizer, "chat_template", None):
        # Render to a string first: in transformers 5, tokenize=True returns a
        # BatchEncoding rather than a list of ids.
        messages = [message for user, assistant in prompt.history
                    for message in ({"role": "user", "content": user},
                                    {"role": "assistant", "content": assistant})]
        rendered = tokenizer.apply_chat_template(
            messages + [{"role": "user", "content": prompt.text}],
            add_generation_prompt=True,
            tokenize=False,
        )
        # The template already contains BOS/special markers; don't add them twice.
        ids = tokenizer(rendered, add_special_tokens=False)["input_ids"]
    else:
        earlier = "".join(f"{user}\n{assistant}\n" for user, assistant in prompt.history)
        ids = tokenizer(earlier + prompt.text, add_special_tokens=True)["input_ids"]
    if hasattr(ids, "tolist"):  # tolerate tokenizers that return tensors/arrays
        ids = ids.tolist()
    return [int(i) for i in ids]


def _unique_ids(prompts: list[Prompt]) -> list[Prompt]:
    """Ids made unique (`7`, `7#2`, ...): figures are pooled per prompt id, so two prompts
    sharing one in a user's file must not be taken for repeats of one prompt."""
    seen: dict[str, int] = {}
    out = []
    for p in prompts:
        seen[p.prompt_id] = seen.get(p.prompt_id, 0) + 1
        count = seen[p.prompt_id]
        out.append(p if count == 1 else dataclasses.replace(p, prompt_id=f"{p.prompt_id}#{count}"))
    return out


def _read_text(path: Path) -> str:
    if not path.exists():
        raise AutotuneError(f"workload file not found: {path}")
    if not path.is_file():
        raise AutotuneError(f"workload path is not a file: {path}")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise AutotuneError(f"workload file {path} is not valid UTF-8 (byte {exc.start})") from None
    except OSError as exc:
        raise AutotuneError(f"cannot read workload file {path}: {exc.strerror or exc}") from None


class _JsonlRow(BaseModel):
    """One JSONL workload line, as the sources autotune reads write it (MT-Bench's
    `question_id`/`category`/`turns`, or a `prompt`/`text` string with an `id`); any
    other key is left unread. Values are checked where they are used (a source's odd
    value falls back to a default, as it always did)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    turns: Any = None
    prompt: Any = None
    text: Any = None
    category: Any = None
    question_id: Any = None
    id: Any = None


def _parse_jsonl(text: str, where: str, id_prefix: str) -> list[Prompt]:
    prompts: list[Prompt] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise AutotuneError(f"{where} line {lineno}: invalid JSON ({exc.msg})") from None
        if not isinstance(obj, dict):
            raise AutotuneError(f"{where} line {lineno}: expected a JSON object, got {type(obj).__name__}")
        row = _JsonlRow.model_validate(obj)
        body = _prompt_text(row)
        if body is None:
            raise AutotuneError(
                f"{where} line {lineno}: no usable prompt text "
                "(expected a non-empty 'turns' list, 'prompt' or 'text' string)"
            )
        category = (str(row.category) if row.category not in (None, "")
                    else DEFAULT_CATEGORY)
        # Prefer the source's own id so results can be traced back to it.
        raw_id = row.question_id if "question_id" in row.model_fields_set else row.id
        prompt_id = str(raw_id) if raw_id not in (None, "") else f"{id_prefix}-{len(prompts)}"
        prompts.append(Prompt(text=body, category=category, prompt_id=prompt_id,
                              follow_ups=_follow_ups(row)))
    return prompts


def _follow_ups(row: _JsonlRow) -> tuple[str, ...]:
    """The later user turns of a multi-turn JSONL object (`turns[1:]`)."""
    if not isinstance(row.turns, list):
        return ()
    return tuple(t for t in row.turns[1:] if isinstance(t, str) and t.strip())


def _prompt_text(row: _JsonlRow) -> str | None:
    """The first user turn of a JSONL object, or None when it has no usable text."""
    turns = row.turns
    if isinstance(turns, list) and turns and isinstance(turns[0], str) and turns[0].strip():
        return turns[0]
    for value in (row.prompt, row.text):
        if isinstance(value, str) and value.strip():
            return value
    return None


def _parse_plain(text: str, id_prefix: str) -> list[Prompt]:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return [Prompt(text=line, category=DEFAULT_CATEGORY, prompt_id=f"{id_prefix}-{i}") for i, line in enumerate(lines)]


def _filter_categories(prompts: list[Prompt], categories: Sequence[str], where: str) -> list[Prompt]:
    available = list(dict.fromkeys(p.category for p in prompts))
    unknown = [c for c in categories if c not in available]
    if unknown:
        raise AutotuneError(
            f"unknown categor{'y' if len(unknown) == 1 else 'ies'} {', '.join(map(repr, unknown))} "
            f"in {where}; available: {', '.join(available)}"
        )
    wanted = set(categories)
    return [p for p in prompts if p.category in wanted]


def round_robin(prompts: Sequence[Prompt], limit: int) -> list[Prompt]:
    """Take up to ``limit`` prompts cycling over categories, keeping file order within each."""
    by_category: dict[str, list[Prompt]] = {}
    for p in prompts:
        by_category.setdefault(p.category, []).append(p)
    queues = list(by_category.values())
    picked: list[Prompt] = []
    depth = 0
    while len(picked) < limit and any(depth < len(q) for q in queues):
        for q in queues:
            if depth < len(q) and len(picked) < limit:
                picked.append(q[depth])
        depth += 1
    return picked


def prompt_digest(text: str) -> str:
    """A prompt's identity in drafter.json (the search checks its held-out prompts
    against these: a drafter must never have seen a validation prompt)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
