"""The search's progress display on stderr: every line the pipeline prints while it
runs goes through here (`note`, `warn`, `held_out_prompt`, `Progress`), so what a
search says, and where, is decided in one place. stdout stays for the summary."""

from __future__ import annotations

import sys

from tqdm import tqdm

from autotune.schema.config import DecodeConfig
from autotune.schema.label import describe
from autotune.search.study import TrialEvent
from autotune.search.trial_record import TrialRecord

__all__ = ["Progress", "held_out_prompt", "note", "warn"]


def _say(line: str) -> None:
    """One whole line on stderr, flushed: a log that is tailed or piped shows it now.
    `sys.stderr` is looked up per call, so a test's captured stream gets it."""
    print(line, file=sys.stderr, flush=True)


def note(message: str) -> None:
    """A line about what the search does next or why it stops ("autotune: ...")."""
    _say(f"autotune: {message}")


def warn(message: str) -> None:
    """A failure that costs no finished work ("autotune: warning: ...")."""
    note(f"warning: {message}")


def held_out_prompt(done: int, total: int) -> None:
    """The finalists' race: one line per held-out prompt and repeat measured."""
    _say(f"  [{done}/{total}] held-out prompt")


class Progress:
    """A tqdm bar (trials done, best so far, current candidate) on a terminal; one
    plain line per trial otherwise (CI logs, pipes)."""

    def __init__(self, total: int, initial: int) -> None:
        self.tty = sys.stderr.isatty()
        self.bar = tqdm(total=total, initial=min(initial, total), unit="trial",
                        file=sys.stderr, dynamic_ncols=True, disable=not self.tty)

    def start(self, config: DecodeConfig) -> None:
        if self.tty:
            self.bar.set_description(describe(config.to_dict())[:48])

    def finished(self, event: TrialEvent) -> None:
        trial = event.trial
        record = TrialRecord.of(trial)
        label = ("infeasible point, not counted" if record.infeasible
                 else describe(record.config_json or {}))
        best = ""
        if event.best is not None:
            best = f"best {event.best.values[0]:.4g} (trial {event.best.number})"
        line = f"[{event.finished}/{event.budget}] trial {trial.number} {label}: {event.message}"
        if self.tty:
            self.bar.write(line)
            self.bar.n = min(event.finished, self.bar.total)
            self.bar.set_postfix_str(best)
            self.bar.refresh()
        else:
            _say(f"{line}; {best}" if best else line)

    def close(self) -> None:
        self.bar.close()
