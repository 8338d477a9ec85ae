"""What the `trainadmit check` tests share: the generated Jobs of `bench/check_corpus.py` (varied
shapes, about one in eight denied, a few not matched), so that tests and benchmark check the same
kind of manifests; and a real program run that reports the modules it loaded (the import tests of
`check` and `preflight`)."""

from __future__ import annotations

import importlib.util
import json
import os
import random
import subprocess
import sys

from support.paths import ROOT

_spec = importlib.util.spec_from_file_location("check_corpus", ROOT / "bench" / "check_corpus.py")
check_corpus = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check_corpus)


def generated_jobs(count: int, seed: int = 7) -> list[dict]:
    rng = random.Random(seed)
    return [check_corpus.job(rng, i) for i in range(count)]


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
