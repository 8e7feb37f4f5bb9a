"""Optuna through its public API only (issue 54, item 3).

A static check over autotune/: no attribute access to a private member of Optuna's
Study, Trial or FrozenTrial (`study._storage`, `trial._trial_id`, `study._study_id`, ...;
the names are read from the installed Optuna, not typed in) and no import of a private
Optuna module. Then the one place that writes a trial it does not hold as a `Trial`
(`StudyRunner._interrupt`, through the storage it opened) is run on a journal file and
on an RDB URL, where Optuna wraps the storage in its cache.
"""

from __future__ import annotations

import ast
import re
import socket
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from autotune.schema.config import DecodeConfig
from autotune.search import evaluation
from autotune.search.objectives import EvalContext, load_objective
from autotune.search.samplers import BASELINE, BASELINE_ATTR
from autotune.search.study import SearchSettings, StudyRunner, counted_trials
from autotune.space import load_space

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "autotune"

# The one private Optuna name still used, and why; an entry here that is no longer
# needed fails `test_no_stale_allowances`. samplers.py: `_StudyView` stands in for the
# study that Optuna's own samplers (TPE, GP, CMA-ES, QMC, NSGA-II, the intersection
# search space) read through `study._get_trials(...)`, to hide the AR baseline trial
# from them (its empty params would empty the intersection search space); it defines
# that method, it does not call Optuna's.
ALLOWED: set[tuple[str, str]] = {
    ("autotune/search/samplers.py", "_get_trials"),
}


def _optuna_private_names() -> set[str]:
    """Single-underscore members of a Study, a Trial and a FrozenTrial (class and
    instance), from the installed Optuna."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study()
    trial = study.ask()
    study.tell(trial, 1.0)
    objects = (study, trial, study.trials[0], optuna.study.Study, optuna.trial.Trial,
               optuna.trial.FrozenTrial)
    names = set()
    for obj in objects:
        names |= set(dir(obj)) | set(getattr(obj, "__dict__", {}))
    names = {n for n in names if n.startswith("_") and not n.startswith("__")}
    names.discard("_abc_impl")
    # The handles on Optuna's storage, whatever object holds them.
    return names | {"_storage", "_study_id", "_trial_id", "_backend"}


def _own_names(tree: ast.AST) -> set[str]:
    """Names a module defines itself: its functions and methods, and `self.X = ...`."""
    own = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            own.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            if isinstance(node.value, ast.Name) and node.value.id == "self":
                own.add(node.attr)
    return own


def _sources() -> dict[str, str]:
    return {path.relative_to(ROOT).as_posix(): path.read_text(encoding="utf-8")
            for path in sorted(PACKAGE.rglob("*.py"))}


def _private_uses(sources: dict[str, str] | None = None) -> dict[tuple[str, str], list[int]]:
    """(file, name) -> lines, for every private Optuna member or module autotune uses."""
    private = _optuna_private_names()
    found: dict[tuple[str, str], list[int]] = {}
    for rel, text in (_sources() if sources is None else sources).items():
        tree = ast.parse(text, filename=rel)
        own = _own_names(tree)
        for node in ast.walk(tree):
            name = None
            if isinstance(node, ast.Attribute) and node.attr in private:
                on_self = isinstance(node.value, ast.Name) and node.value.id == "self"
                if not (on_self and node.attr in own):     # the module's own member
                    name = node.attr
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                modules = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
                name = next((m for m in modules if m.split(".")[0] == "optuna"
                             and any(p.startswith("_") for p in m.split(".")[1:])), None)
            elif isinstance(node, ast.Import):
                name = next((a.name for a in node.names if a.name.split(".")[0] == "optuna"
                             and any(p.startswith("_") for p in a.name.split(".")[1:])), None)
            if name is not None:
                found.setdefault((rel, name), []).append(node.lineno)
    return found


def test_the_private_names_are_read_from_optuna():
    names = _optuna_private_names()
    assert {"_storage", "_study_id", "_trial_id", "_get_trials"} <= names


def test_autotune_uses_no_private_optuna_member_or_module():
    uses = {key: lines for key, lines in _private_uses().items() if key not in ALLOWED}
    assert not uses, "private Optuna access (use its public API): " + "; ".join(
        f"{path}:{lines} {name}" for (path, name), lines in sorted(uses.items()))


def test_no_storage_handle_reached_through_a_study():
    """The issue's own words: no `._storage` (nor `._study_id`) anywhere in autotune/."""
    reach = re.compile(r"\._(storage|study_id|trial_id)\b")
    for rel, text in _sources().items():
        assert not reach.search(text), f"{rel} reaches {reach.search(text).group()}"


def test_no_stale_allowances():
    uses = _private_uses()
    stale = sorted(key for key in ALLOWED if key not in uses)
    assert not stale, f"no longer used, drop from ALLOWED: {stale}"


def test_the_check_catches_what_it_is_for():
    """A module that reaches into Optuna is caught (the check is not vacuous), and a
    module's own private member of the same name is not."""
    probe = ("import optuna.study._tell\n"
             "from optuna.storages._cached_storage import _CachedStorage\n"
             "def f(study, trial):\n"
             "    return study._storage.get_trial(trial._trial_id), study._study_id\n"
             "class Own:\n"
             "    def _params(self):\n"
             "        return self._params()\n")
    found = {name for (_, name) in _private_uses({"probe.py": probe})}
    assert found == {"_storage", "_trial_id", "_study_id", "optuna.study._tell",
                     "optuna.storages._cached_storage"}


# -- the interrupt path on both kinds of storage, read back through public calls ----


class _Target:
    """All a runner reads of its target before a trial measures anything."""

    n_layers = 4


def _runner(storage: str, trials: int = 3) -> StudyRunner:
    settings = SearchSettings(study_name="s", storage=storage, trials=trials,
                              sampler="tpe", seed=0, prune=False)
    context = EvalContext(target=_Target(), draft=None, prompts=[], max_new_tokens=4,
                          seed=0, memo={})
    return StudyRunner(settings, load_space("ngram").bind(4, None), load_objective("latency"),
                       context)


@pytest.fixture(params=["journal", "sqlite"])
def storage(request, tmp_path) -> str:
    if request.param == "journal":
        return str(tmp_path / "study.journal")
    return f"sqlite:///{tmp_path / 'study.db'}"


@pytest.mark.filterwarnings("ignore:Heartbeat of storage:UserWarning")  # study.ask
def test_a_dead_workers_trial_is_failed_and_queued_again(storage):
    runner = _runner(storage)
    trial = runner.study.ask({"k": optuna.distributions.IntDistribution(1, 10)})
    trial.set_user_attr("worker", f"{socket.gethostname()}:999999999:1")
    trial.set_user_attr(BASELINE_ATTR, "dv_default")
    assert runner.recover_interrupted() == [trial.number]
    # A second runner (a fresh cache) and the first read the same.
    for reader in (runner, _runner(storage)):
        trials = reader.study.get_trials(deepcopy=False)
        dead = trials[trial.number]
        assert dead.state == TrialState.FAIL and dead.user_attrs["interrupted"] is True
        assert dead.user_attrs["error"].startswith("interrupted: its worker ")
        waiting = [t for t in trials if t.state == TrialState.WAITING]
        assert [(t.user_attrs["retry_of"], t.user_attrs[BASELINE_ATTR]) for t in waiting] == [
            (trial.number, "dv_default")]
        assert waiting[0].system_attrs["fixed_params"] == dead.params
        assert dead not in counted_trials(trials)


def test_ctrl_c_inside_a_trial_marks_it_and_queues_it(storage, monkeypatch):
    runner = _runner(storage)

    def stopped(objective, context, config, report=None):
        assert config.method == DecodeConfig().method      # the AR baseline, first
        raise KeyboardInterrupt

    monkeypatch.setattr(evaluation, "evaluate", stopped)
    assert runner.run() == "interrupted"
    trials = runner.study.get_trials(deepcopy=False)
    first = trials[0]
    assert first.state == TrialState.FAIL and first.user_attrs["interrupted"] is True
    assert first.user_attrs["error"] == "interrupted: stopped by the user (Ctrl-C)"
    assert first.user_attrs["worker"] == runner.worker
    retry = [t for t in trials if t.user_attrs.get("retry_of") == first.number]
    assert len(retry) == 1 and retry[0].state == TrialState.WAITING
    assert retry[0].user_attrs[BASELINE_ATTR] == BASELINE
    assert not counted_trials(trials)
