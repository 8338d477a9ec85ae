"""`trainadmit policy init` and the guide in docs/policies.md, executed as a user would: the installed
command, an empty directory outside the repository, the guide's shell blocks exactly as written."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

from support.cli import run_cli
from support.paths import ROOT

from trainadmit.authoring.lint import lint
from trainadmit.authoring.scaffold import FILES, SCHEMA_FILE

GUIDE = ROOT / "docs" / "policies.md"
SECTION = "## From an empty directory to a tested policy for a new GPU pool"


def _guide_section() -> str:
    text = GUIDE.read_text()
    start = text.index(SECTION)
    end = text.index("\n## ", start + len(SECTION))
    return text[start:end]


def _blocks(language: str) -> list[str]:
    """The fenced blocks of the guide's walk-through in one language, unindented as a reader copies them."""
    return [textwrap.dedent(m.group(2)) for m in
            re.finditer(rf"^( *)```{language}\n(.*?)^\1```", _guide_section(), re.S | re.M)]


def test_init_writes_a_set_that_lints_clean_and_whose_example_passes(tmp_path):
    d = tmp_path / "new" / "policies"
    r = run_cli("policy", "init", str(d))
    assert r.returncode == 0
    assert sorted(str(p.relative_to(d)) for p in d.rglob("*") if p.is_file()) == sorted([*FILES, SCHEMA_FILE])
    assert lint(d) == ([], False)
    assert run_cli("policy", "lint", "--strict", str(d)).returncode == 0
    t = run_cli("policy", "test", str(d))
    assert t.returncode == 0 and "2 passed, 0 failed" in t.stdout
    # the example is a real test: break the pool and it fails
    pools = d / "pools.yaml"
    pools.write_text(pools.read_text().replace("perNode: 8 ", "perNode: 4 "))
    assert run_cli("policy", "test", str(d)).returncode == 1


def test_init_never_writes_into_a_non_empty_directory(tmp_path):
    (tmp_path / "mine.yaml").write_text("keep: me\n")
    r = run_cli("policy", "init", str(tmp_path))
    assert r.returncode == 2 and "not an empty directory" in r.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["mine.yaml"]
    empty = tmp_path / "empty"
    empty.mkdir()
    assert run_cli("policy", "init", str(empty)).returncode == 0


def test_the_guide_shows_the_platform_init_writes():
    [platform] = [b for b in _blocks("yaml") if "kind: Platform" in b]
    assert platform in FILES["platform.yaml"]


def test_the_guide_runs_as_written_from_an_empty_directory(tmp_path):
    """Every ```sh block of the walk-through, in order, in one shell, with the installed command."""
    bin_dir = Path(sys.executable).parent
    assert (bin_dir / "trainadmit").exists(), "the test runs the installed trainadmit command"
    work = tmp_path / "platform-team"
    work.mkdir()
    assert not work.resolve().is_relative_to(ROOT)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINADMIT_")}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    blocks = _blocks("sh")
    assert blocks and blocks[0].startswith("trainadmit policy init")
    script = "set -euo pipefail\n" + "\n".join(blocks)
    r = subprocess.run(["bash", "-c", script], cwd=work, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    # the last `policy test` of the walk-through ran the example and the new pool's cases, and all passed
    summaries = list(re.finditer(r"^(\d+) passed, (\d+) failed$", r.stdout, re.M))
    assert len(summaries) == sum(b.count("trainadmit policy test ") for b in blocks)
    last = r.stdout[summaries[-2].end():summaries[-1].end()]
    assert summaries[-1].group(0) == "5 passed, 0 failed", last
    assert "PASS  tests/b200.test.yaml:b200  an 8-node B200 job is colocated in one rack with RoCE" in last
    assert "FAIL" not in r.stdout and "ERROR" not in r.stdout
    # what the guide says lint would report for three mistakes: all three in one run, with the fix
    b200 = work / "policies" / "b200.yaml"
    text = b200.read_text()
    b200.write_text(text.replace('NCCL_IB_GID_INDEX: "3"', 'NCCL_IB_GID_INDEX: "x", NCCL_ALGO: Rnig')
                    .replace("allowedPools: [h100, b200-roce]", "allowedPools: [h100, b200-rcoe]"))
    errors = {f.field: f for f in lint(work / "policies")[0] if f.is_error}
    assert set(errors) == {"spec.nccl.env.NCCL_IB_GID_INDEX", "spec.nccl.env.NCCL_ALGO", "spec.allowedPools[1]"}
    assert errors["spec.allowedPools[1]"].fix == "did you mean b200-roce?"
    b200.write_text(text.replace('NCCL_IB_GID_INDEX: "3"', 'NCCL_IB_GID_INDEX: "3", NCCL_ALGO: Ring'))
    [warning] = lint(work / "policies")[0]
    assert not warning.is_error and "debugging variable" in warning.message
