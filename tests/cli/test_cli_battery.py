"""Every command of the parser over a battery of bad inputs: never a traceback, only documented exit codes.

The commands and their arguments are enumerated from argparse (``build_parser``), so a new command, a
new sub-command or a new flag is covered without touching this file. Each value-taking argument in
turn gets each bad input while the others keep a working value; each command also runs with its
stdout closed. A run passes when its exit code is one of ``EXIT_CODES``, nothing on stderr is a
traceback or an "internal error", and a failure (exit 2) says on stderr which input or flag it is about.
Commands run in-process (the logic is the same; a process start is not), in a fresh working directory,
with no cluster credentials; the closed-stdout runs start the real program.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

import pytest
from support.cli import run_cli
from support.paths import EXAMPLES, POLICIES

from trainadmit.cli.common import DEFAULT_POLICY_DIR, EXIT_CODES
from trainadmit.cli.main import build_parser

HUGE_BYTES = 3 * 1024 * 1024


def _leaves(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if path:
        yield path, parser
    for action in subs:
        for name, sub in action.choices.items():
            yield from _leaves(sub, (*path, name))


COMMANDS = {" ".join(path): parser for path, parser in _leaves(build_parser())}


def _takes_value(action: argparse.Action) -> bool:
    return not isinstance(action, (argparse._HelpAction, argparse._VersionAction, argparse._SubParsersAction)) \
        and action.nargs != 0


def _flag(action: argparse.Action) -> str | None:
    return max(action.option_strings, key=len) if action.option_strings else None


def base_values(command: str, tmp) -> dict[str, str]:
    """dest -> a value that lets the command run (so that one bad input at a time is what it meets): the
    bundled policy where a policy directory is the default, an example where check and audit want files, a new
    directory where one is required (policy init), a preflight root of its own."""
    values: dict[str, str] = {}
    for action in COMMANDS[command]._actions:
        if not _takes_value(action):
            continue
        if action.default == DEFAULT_POLICY_DIR:
            values[action.dest] = str(POLICIES)
        elif action.option_strings and action.dest == "root":
            values[action.dest] = str(tmp / "root")
        elif not action.option_strings and action.nargs is None:
            values[action.dest] = str(tmp / "new")
        elif not action.option_strings and action.nargs == "*" and command in ("check", "audit"):
            values[action.dest] = str(EXAMPLES / "llama-pretrain.yaml")
        elif action.dest == "policy" and command == "audit":  # no default: the served policy or the bundled one
            values[action.dest] = str(POLICIES)
    return values


def argv_of(command: str, values: dict[str, str]) -> list[str]:
    """Options as ``--flag=value``, then the positionals in the parser's order (after ``--``)."""
    options, positionals = [], []
    for action in COMMANDS[command]._actions:
        if action.dest not in values or not _takes_value(action):
            continue
        if action.option_strings:
            options.append(f"{_flag(action)}={values[action.dest]}")
        else:
            positionals.append(values[action.dest])
    return [*options, *(["--", *positionals] if positionals else [])]


def _inputs(root) -> dict[str, str]:
    """The battery: name -> the value given. Files are made once; "directory" is new for each run."""
    root.mkdir(exist_ok=True)
    (root / "empty.yaml").write_text("")
    (root / "binary.dat").write_bytes(bytes(range(256)) * 64)
    (root / "huge.yaml").write_text("x" * HUGE_BYTES + "\n")
    (root / "list.yaml").write_text("- apiVersion: v1\n- kind: Job\n")
    (root / "scalar.yaml").write_text("just a string\n")
    (root / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    return {
        "missing": str(root / "does-not-exist.yaml"),
        "empty": str(root / "empty.yaml"),
        "binary": str(root / "binary.dat"),
        "huge": str(root / "huge.yaml"),
        "list": str(root / "list.yaml"),
        "scalar": str(root / "scalar.yaml"),
        "deep": str(root / "deep.json"),
        "directory": "<fresh directory>",
        "empty-string": "",
        "negative": "-1",
        "not-a-number": "not-a-number",
        "out-of-range": "99999",
    }


INPUT_NAMES = ("missing", "empty", "binary", "huge", "list", "scalar", "deep", "directory", "empty-string",
               "negative", "not-a-number", "out-of-range")

CASES = [(command, action.dest) for command, parser in COMMANDS.items() for action in parser._actions
         if _takes_value(action)]


@pytest.fixture(scope="module")
def battery(tmp_path_factory):
    return _inputs(tmp_path_factory.mktemp("battery"))


@pytest.fixture
def isolated(tmp_path, monkeypatch):
    """A fresh working directory (certs/out, policies/ … are relative defaults) and no cluster credentials."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    for name in ("TRAINADMIT_TLS_CERT", "TRAINADMIT_TLS_KEY", "TRAINADMIT_TRACEBACK"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def _named_inputs(command: str, value: str, flag: str | None) -> list[str]:
    """What a failure may name: the bad value, its flag, or another input the command took (a default
    path such as certs/out that the run reached first)."""
    actions = [a for a in COMMANDS[command]._actions if _takes_value(a)]
    defaults = [str(a.default) for a in actions if isinstance(a.default, str) and a.default]
    metavars = [str(a.metavar) for a in actions if isinstance(a.metavar, str)]
    return [x for x in (value, flag, *defaults, *metavars, os.environ.get("KUBECONFIG")) if x]


def _check(result, command: str, what: str, value: str, flag: str | None) -> None:
    where = f"`trainadmit {command}` with {what}"
    assert result.returncode in EXIT_CODES, f"{where}: exit {result.returncode}\n{result.stderr}"
    assert "Traceback" not in result.stderr, f"{where}: a traceback\n{result.stderr}"
    assert "internal error" not in result.stderr, f"{where}: an unhandled exception\n{result.stderr}"
    if result.returncode == 2:
        named = _named_inputs(command, value, flag)
        assert result.stderr.strip(), f"{where}: exit 2 without a word on stderr"
        assert any(x in result.stderr for x in named), f"{where}: the message names neither {named}\n{result.stderr}"


@pytest.mark.parametrize("command, dest", CASES, ids=[f"{c}:{d}" for c, d in CASES])
def test_every_argument_over_the_battery(command, dest, battery, isolated):
    parser = COMMANDS[command]
    action = next(a for a in parser._actions if a.dest == dest and _takes_value(a))
    for name in INPUT_NAMES:
        value = battery[name]
        if name == "directory":
            value = str(isolated / f"dir-{dest}")
            (isolated / f"dir-{dest}").mkdir(exist_ok=True)
        argv = argv_of(command, {**base_values(command, isolated), dest: value})
        result = run_cli(*command.split(), *argv)
        _check(result, command, f"{_flag(action) or dest} = {name} ({argv})", value, _flag(action))


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_with_no_arguments(command, isolated):
    _check(run_cli(*command.split()), command, "no arguments", "", None)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_with_stdout_closed(command, tmp_path):
    argv = argv_of(command, base_values(command, tmp_path))
    line = " ".join(f"'{a}'" for a in [sys.executable, "-m", "trainadmit.cli", *command.split(), *argv])
    r = subprocess.run(["bash", "-c", f"{line} >&- < /dev/null"], capture_output=True, text=True, cwd=tmp_path,
                       timeout=120, env={**os.environ, "KUBECONFIG": str(tmp_path / "none")})
    assert r.returncode == 2, r.stderr
    assert "stdout is closed" in r.stderr and "Traceback" not in r.stderr


def test_the_battery_covers_every_command():
    assert {"check", "serve", "preflight", "policy lint", "policy test", "policy init", "policy schema",
            "policy configmap", "policy webhooks", "policy priorityclasses", "certs issue", "certs rotate",
            "certs inject-ca", "certs controller", "certs check"} <= set(COMMANDS)
    assert len(CASES) > 60
