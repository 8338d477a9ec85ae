"""Running `trainadmit`: in this process as a CI step would see it (``run_cli``), or as a fresh program that
reports the modules it loaded (the import tests of `check` and `preflight`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from support.paths import ROOT


class CliResult:
    def __init__(self, returncode: int, stdout: str, stderr: str):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


def run_cli(*args: str, stdin: str | None = None) -> CliResult:
    """`trainadmit ARGS` in this process (the logic under test is the same; a process start is not):
    stdout, stderr and the exit code, as a subprocess would give them. A few tests still start the
    real program (`python -m trainadmit.cli`, and the installed wheel in test_packaging)."""
    import contextlib
    import io
    import sys

    from trainadmit.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    old_stdin = sys.stdin
    sys.stdin = io.StringIO(stdin or "")
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(args))
            except SystemExit as exc:  # argparse errors
                code = exc.code if isinstance(exc.code, int) else 2
    finally:
        sys.stdin = old_stdin
    return CliResult(code, out.getvalue(), err.getvalue())


# A fresh interpreter, as the console script starts one: the program's exit code, its stdout, and on stderr
# the modules it loaded.
_RUN = """
import json, sys
from trainadmit.cli.main import main
sys.argv[0] = "trainadmit"
code = main(sys.argv[1:])
print("MODULES " + json.dumps(sorted(sys.modules)), file=sys.stderr)
sys.exit(code)
"""


def program_modules(*args: str, env: dict[str, str] | None = None,
                    timeout: float = 120) -> tuple[int, str, set[str]]:
    """Run ``trainadmit *args`` (``env`` added to the environment): exit code, stdout, modules loaded."""
    r = subprocess.run([sys.executable, "-c", _RUN, *args], capture_output=True, text=True, cwd=ROOT,
                       env={**os.environ, **(env or {})}, timeout=timeout)
    line = next((x for x in r.stderr.splitlines() if x.startswith("MODULES ")), None)
    assert line is not None, r.stdout + r.stderr
    return r.returncode, r.stdout, set(json.loads(line.removeprefix("MODULES ")))


def loaded(modules: set[str], names: tuple[str, ...]) -> list[str]:
    """The modules of ``modules`` that are one of ``names`` or inside one of them."""
    return sorted(m for m in modules if any(m == n or m.startswith(n + ".") for n in names))
