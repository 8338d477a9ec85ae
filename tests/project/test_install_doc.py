"""docs/install.md says what deploy/ installs: every kind the webhook configurations send to trainadmit is named
in the table's webhook row (it used to say "Jobs and Pods only" for twelve kinds), every overlay it names
exists, the RBAC row names what deploy/'s ClusterRole grants beyond the basics; and the "try it" commands write
the CA's key under try/, which git ignores, and run the clone's own trainadmit (its .venv/bin on PATH)."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
import yaml
from support.paths import ROOT

from trainadmit.engine.workloads import ADAPTERS

INSTALL = (ROOT / "docs" / "install.md").read_text()
# how the page names a kind whose name another group also uses
QUALIFIED = {("batch", "jobs"): "batch/v1 Jobs", ("batch.volcano.sh", "jobs"): "Volcano Jobs",
             ("apps", "statefulsets"): "StatefulSets"}


def _row(title: str) -> str:
    return next(line for line in INSTALL.splitlines() if line.startswith(f"| {title}"))


def test_the_webhook_row_names_every_kind_the_webhooks_receive():
    row = _row("Mutating/ValidatingWebhookConfiguration")
    kinds = {(a.group, a.plural): a.kind for a in ADAPTERS}
    sent = {(group, resource) for doc in yaml.safe_load_all((ROOT / "deploy" / "base" / "webhooks.yaml").read_text())
            for hook in doc["webhooks"] for rule in hook["rules"] for group in rule["apiGroups"]
            for resource in rule["resources"] if "/" not in resource}
    assert len(sent) == 15
    names = [QUALIFIED[key] if key in QUALIFIED else f"{kinds[key]}s" for key in sorted(sent)]
    missing = [name for name in names if name not in row]
    assert missing == [] and "Jobs and Pods only" not in INSTALL


def test_every_overlay_the_page_names_exists_and_the_rbac_row_names_the_api_watch():
    for overlay in re.findall(r"deploy/overlays/([a-z-]+)", INSTALL):
        assert (ROOT / "deploy" / "overlays" / overlay / "kustomization.yaml").exists(), overlay
    overlays = sorted(p.name for p in (ROOT / "deploy" / "overlays").iterdir())
    assert all(f"`{name}`" in INSTALL.split("\n\n")[1] for name in overlays)  # the opening paragraph names them all
    assert (ROOT / "deploy" / "monitoring" / "kustomization.yaml").exists() and "deploy/monitoring" in INSTALL
    assert "APIServices" in _row("ServiceAccount") and "TFJobs, PaddleJobs" in _row("ServiceAccount")


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_the_try_directory_is_ignored_and_the_commands_run_the_clones_trainadmit():
    ignored = subprocess.run(["git", "check-ignore", "-q", "try/certs/ca.key"], cwd=ROOT, check=False)
    assert ignored.returncode == 0, "try/ (the CA's private key) must be ignored by git"
    section = INSTALL[INSTALL.index("## Try it against any cluster"):INSTALL.index("## What gets installed")]
    blocks = re.findall(r"```sh\n(.*?)```", section, re.S)
    assert "try/certs" in blocks[0]
    for block in blocks[:2]:  # the two terminals
        assert 'export PATH="$PWD/.venv/bin:$PATH"' in block
    assert "make\n.venv/.installed" in INSTALL or "make .venv/.installed" in INSTALL
