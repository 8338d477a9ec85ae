"""The console script (``cli.main.console``) ends a finished `check` with ``os._exit`` after flushing, skipping the
interpreter's teardown (tests/cli/test_check_imports.py and bench/check.py for why). What it must keep: the exit
code, every byte of stdout and stderr, a closed stdout still being exit 2, and every other command exiting as
``sys.exit`` does. Run as users run it: ``python -m trainadmit.cli`` in a fresh process, output to pipes."""

from __future__ import annotations

import subprocess
import sys

import pytest
from support.cli import run_cli
from support.paths import EXAMPLES, POLICIES, ROOT


def _console(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "trainadmit.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=120, **kwargs)


@pytest.mark.parametrize(("example", "fmt", "code"), [("llama-pretrain.yaml", "text", 0),
                                                      ("denied-partial-nodes.yaml", "yaml", 1),
                                                      ("", "json", 1)])
def test_check_through_the_console_is_main_in_process(example, fmt, code):
    target = str(EXAMPLES / example) if example else str(EXAMPLES)
    r = _console("check", "-p", str(POLICIES), target, "-o", fmt)
    inproc = run_cli("check", "-p", str(POLICIES), target, "-o", fmt)
    assert (r.returncode, r.stdout) == (code, inproc.stdout) and r.stdout.endswith("\n")


def test_a_usage_error_and_a_closed_stdout_keep_their_exit_codes():
    r = _console("check", "--no-such-option")
    assert r.returncode == 2 and r.stderr.strip()
    proc = subprocess.Popen([sys.executable, "-m", "trainadmit.cli", "check", "-p", str(POLICIES), str(EXAMPLES),
                             "-o", "yaml"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    proc.stdout.read(10)
    proc.stdout.close()  # as `| head -c 10` does
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 2 and "stdout" in err


def test_other_commands_exit_as_sys_exit_does():
    r = _console("--version")
    assert r.returncode == 0 and r.stdout.strip()
