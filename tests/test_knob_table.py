"""docs/commands.md's table of config keys against the knobs' metadata: a knob added to
(or removed from) DecodeConfig without the docs fails here, with the rows to paste."""

from __future__ import annotations

from pathlib import Path

from autotune.schema.config import KNOBS
from autotune.schema.knob_table import DOC_PAGE, TABLE_HEADER, documented_keys, row, table

PAGE = Path(__file__).resolve().parents[1] / DOC_PAGE


def test_the_docs_list_every_knob_once() -> None:
    listed = documented_keys(PAGE.read_text(encoding="utf-8"))
    missing = [name for name in KNOBS if name not in listed]
    assert not missing, (f"{DOC_PAGE}'s knob table (`autotune measure`) lacks "
                         f"{', '.join(missing)}; add:\n" + "\n".join(map(row, missing)))
    unknown = [name for name in listed if name not in KNOBS]
    assert not unknown, f"{DOC_PAGE}'s knob table lists keys that are no knob: {unknown}"
    assert len(listed) == len(set(listed)), f"{DOC_PAGE}'s knob table lists a key twice"


def test_grouped_rows_are_read_key_by_key() -> None:
    text = "\n".join(["intro", TABLE_HEADER, "|---|---|---|",
                      "| `gamma`, `beta1` | γ and `β1` | 0.6, 0.5 |", "| `k` | k | 4 |",
                      "", "| `after` | not the table | x |"])
    assert documented_keys(text) == ["gamma", "beta1", "k"]
    assert documented_keys("no table here") == []


def test_rows_render_from_the_metadata() -> None:
    assert row("k") == f"| `k` | {KNOBS['k'].doc} | 4 |"
    assert row("exit_policy").endswith("| `fixed` |")
    assert row("attn_skip").endswith("| empty |")
    assert row("gamma").endswith("| 0.6 |")
    lines = table().splitlines()
    assert lines[0] == TABLE_HEADER and len(lines) == 2 + len(KNOBS)
    assert documented_keys(table()) == list(KNOBS)
