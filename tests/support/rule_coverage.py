"""Every rule the registry declares is made to fire by at least one test or policy suite.

A rule that no test ever makes fire can be broken (or unreachable) without anyone noticing. This plugin
records, in every test process, the rule ids the engine reports (``Context.report``, and every violation of a
decision ``decide_declared`` returns: one refused before any concern ran has no Context; in-process: the
CLI's `check` and `policy test` as ``run_cli`` runs them, the engine, the server's decision cache), and
when the whole suite ran (``make test``: no file, ``-k`` or ``-m`` selection), fails the run naming every
declared rule none of them fired. pytest-xdist workers hand their sets to the controller
(``workeroutput``), which checks after the last test, as pytest-cov checks its threshold.
"""

from __future__ import annotations

import importlib
import json

import pytest

from trainadmit.engine.context import Context
from trainadmit.engine.registry import RULES

FIRED: set[str] = set()
_KEY = "trainadmit_fired_rules"
_original = Context.report


def _recording(self, rule, path, message, hint="", fix=()):
    before = len(self.violations)
    _original(self, rule, path, message, hint, fix)
    if len(self.violations) > before:
        FIRED.add(rule.id)


Context.report = _recording  # type: ignore[method-assign]

engine_decide = importlib.import_module("trainadmit.engine.decide")  # the module (the package exports the function)
_decide_declared = engine_decide.decide_declared


def _recording_decision(policy, request, cluster=None):
    """A decision refused before any concern ran (a forged provenance) reports its rule without a Context."""
    decision = _decide_declared(policy, request, cluster)
    FIRED.update(v.rule for v in decision.violations)
    return decision


engine_decide.decide_declared = _recording_decision


def _whole_suite(config: pytest.Config) -> bool:
    option = config.option
    if getattr(option, "keyword", "") or getattr(option, "markexpr", "") or getattr(option, "deselect", None):
        return False
    if getattr(option, "lf", False) or getattr(option, "exitfirst", False):
        return False
    return [str(a).rstrip("/") for a in config.args] in ([], ["tests"], [str(config.rootpath / "tests")])


def pytest_sessionfinish(session: pytest.Session) -> None:
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker: hand the set to the controller
        workeroutput[_KEY] = json.dumps(sorted(FIRED))


@pytest.hookimpl(optionalhook=True)  # an xdist hook: absent under -p no:xdist
def pytest_testnodedown(node, error) -> None:
    FIRED.update(json.loads(getattr(node, "workeroutput", {}).get(_KEY, "[]")))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtestloop(session: pytest.Session):
    yield
    if getattr(session.config, "workerinput", None) is not None or not _whole_suite(session.config) \
            or session.config.option.collectonly:  # nothing ran, nothing fired
        return
    if session.testsfailed or session.shouldstop:
        return
    never = sorted(set(RULES) - FIRED)
    if never:
        session.config.stash[_MISSING] = never
        session.testsfailed += 1


_MISSING = pytest.StashKey[list]()


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    never = config.stash.get(_MISSING, None)
    if never:
        terminalreporter.section("rules no test made fire", sep="=", red=True)
        terminalreporter.line(f"{len(never)} declared rule(s) never fired in this run: {', '.join(never)}")
        terminalreporter.line("add a test (or a policy suite case) that makes each fire, or remove the rule")
