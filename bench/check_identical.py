"""`trainadmit check` output of this tree against another tree's: stdout, stderr and exit code byte for byte.

Run: .venv/bin/python bench/check_identical.py OTHER_TREE [--jobs N]

OTHER_TREE is a worktree of another commit with its own ``.venv`` (as for ``bench/check.py --baseline``).
Each tree runs its own console script with its own bundled policies (``-p policies``, from the tree), with
``-o text``, ``-o json`` and ``-o yaml``, on: each examples/*.yaml; examples/ with ``--cluster
tests/fixtures/apiserver/nodes-list.json``; every YAML file under tests/fixtures; and the 1,000 Jobs of
``check_corpus.py``. Paths are given relative to the tree, so messages naming a file match. Prints each
difference and exits 1 if there is one. For a change that must not change what `check` prints (a speed-up).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from check_corpus import write_corpus

ROOT = Path(__file__).resolve().parent.parent
FORMATS = ("text", "json", "yaml")


def cases(corpus: Path) -> list[list[str]]:
    inputs = [[str(p.relative_to(ROOT))] for p in sorted((ROOT / "examples").glob("*.yaml"))]
    inputs.append(["examples/", "--cluster", "tests/fixtures/apiserver/nodes-list.json"])
    inputs += [[str(p.relative_to(ROOT))] for p in sorted((ROOT / "tests" / "fixtures").rglob("*.y*ml"))]
    inputs.append([str(corpus)])
    return [[*args, "-o", fmt] for args in inputs for fmt in FORMATS]


def run(tree: Path, args: list[str], env: dict[str, str]) -> tuple[bytes, bytes, int]:
    proc = subprocess.run([str(tree / ".venv" / "bin" / "trainadmit"), "check", "-p", "policies", *args],
                          cwd=tree, env=env, capture_output=True, timeout=600)
    return proc.stdout, proc.stderr, proc.returncode


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("other", type=Path)
    ap.add_argument("--jobs", type=int, default=1)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as work:
        corpus = Path(work) / "jobs"
        write_corpus(corpus, 1_000)
        envs = {tree: dict(os.environ, TRAINADMIT_CACHE_DIR=str(Path(work) / f"cache-{i}"))
                for i, tree in enumerate((ROOT, args.other.resolve()))}
        todo = cases(corpus)

        def compare(case: list[str]) -> str | None:
            mine, theirs = (run(tree, case, env) for tree, env in envs.items())
            if mine == theirs:
                return None
            what = [name for name, a, b in zip(("stdout", "stderr", "exit code"), mine, theirs, strict=True) if a != b]
            return f"DIFFERENT {' '.join(case)}: {', '.join(what)}"

        with ThreadPoolExecutor(args.jobs) as pool:
            found = [d for d in pool.map(compare, todo) if d]
        for line in found:
            print(line)
        print(f"{len(todo)} runs per tree, {len(found)} different")
        return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
