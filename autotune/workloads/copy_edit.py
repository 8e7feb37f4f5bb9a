"""A copy-heavy workload: editing and rewriting text and code the prompt gives.

This is the work where model-free drafters (prompt lookup, suffix decoding) pay most:
the answer repeats long stretches of the prompt. The prompts are built at load time
from Python's own standard library (the running interpreter's source files), so nothing
is downloaded or shipped: functions of a fixed list of pure-Python modules to rename,
annotate or document, and module docstrings to correct or reformat. The same Python
version gives the same prompts (a run records their digest); another version may give
slightly other code.

Categories: `code_rename`, `code_types`, `code_doc` (a function, returned in full with
one change), `text_fix` (prose with misspelt words to correct), `text_list` (prose to
return as a bulleted list, words unchanged).
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

# Pure-Python modules present in every CPython since 3.10, in a fixed order.
MODULES = ("textwrap", "shlex", "fnmatch", "colorsys", "bisect", "heapq", "glob", "string",
           "calendar", "difflib", "statistics", "gettext", "base64", "quopri", "uu",
           "netrc", "sched", "graphlib", "numbers", "reprlib")
# Functions kept: short enough to answer in a few hundred tokens, long enough to copy.
MIN_LINES, MAX_LINES, MAX_CHARS = 6, 30, 1200
FUNCTIONS_PER_MODULE = 2
CODE_TEMPLATES = {
    "code_rename": ("Rename the function `{name}` to `{name}_v2` everywhere in this code "
                    "and return the whole code, unchanged otherwise:\n\n```python\n{src}\n```"),
    "code_types": ("Add type hints to this Python function and return it in full, "
                   "unchanged otherwise:\n\n```python\n{src}\n```"),
    "code_doc": ("Return this Python function in full with a short docstring added at its "
                 "top (replacing any it has), the code itself unchanged:\n\n"
                 "```python\n{src}\n```"),
}
TEXT_TEMPLATES = {
    "text_fix": "Correct the spelling mistakes in this text and return the whole text:\n\n{text}",
    "text_list": ("Return this text as a bulleted list, one sentence per bullet, keeping "
                  "every word:\n\n{text}"),
}
# Prose kept from a module docstring.
MIN_TEXT_CHARS, MAX_TEXT_CHARS = 120, 900


def _source(module: str) -> str | None:
    """The module's source text, or None where this interpreter has no such file."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    return Path(spec.origin).read_text(encoding="utf-8")


def _functions(tree: ast.Module, text: str) -> list[tuple[str, str]]:
    """(name, source) of the module's top-level functions within the size limits, in
    file order."""
    out = []
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef) or node.end_lineno is None:
            continue
        lines = node.end_lineno - node.lineno + 1
        src = ast.get_source_segment(text, node)
        if src and MIN_LINES <= lines <= MAX_LINES and len(src) <= MAX_CHARS:
            out.append((node.name, src))
    return out


def _prose(tree: ast.Module) -> str | None:
    """The module docstring's first paragraphs, up to MAX_TEXT_CHARS, on one line each."""
    doc = ast.get_docstring(tree)
    if not doc:
        return None
    kept = ""
    for paragraph in doc.split("\n\n"):
        joined = " ".join(paragraph.split())
        if len(kept) + len(joined) > MAX_TEXT_CHARS:
            break
        kept = f"{kept}\n\n{joined}" if kept else joined
    return kept if len(kept) >= MIN_TEXT_CHARS else None


def _misspelt(text: str) -> str:
    """Every seventh word of five letters or more with two inner letters swapped."""
    words = text.split(" ")
    for i in range(3, len(words), 7):
        word = words[i]
        if len(word) >= 5 and word.isalpha():
            words[i] = word[0] + word[2] + word[1] + word[3:]
    return " ".join(words)


def copy_edit_rows() -> list[tuple[str, str, str]]:
    """(category, prompt id, text) of every prompt, in a fixed order: per module, its
    first functions under the code templates in turn, then its docstring under the text
    templates in turn."""
    rows: list[tuple[str, str, str]] = []
    code = list(CODE_TEMPLATES.items())
    prose = list(TEXT_TEMPLATES.items())
    for index, module in enumerate(MODULES):
        text = _source(module)
        if text is None:
            continue
        tree = ast.parse(text)
        for j, (name, src) in enumerate(_functions(tree, text)[:FUNCTIONS_PER_MODULE]):
            category, template = code[(index + j) % len(code)]
            rows.append((category, f"copy-{category}-{module}.{name}",
                         template.format(name=name, src=src)))
        doc = _prose(tree)
        if doc is not None:
            category, template = prose[index % len(prose)]
            body = _misspelt(doc) if category == "text_fix" else doc
            rows.append((category, f"copy-{category}-{module}", template.format(text=body)))
    return rows
