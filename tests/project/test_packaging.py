"""What a new user installs is what runs: the wheel without extras, and the Dockerfile's install step.

`pip install .` must bring everything the bundled policies need (the CEL runtime once was only a
test extra, and the installed program crashed on its own defaults), and must install one namespace,
``trainadmit``, nothing with a generic top-level name. Dependencies come from a local wheelhouse
built once per dependency set (`pip wheel`), so the test installs offline and in seconds.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from support.paths import EXAMPLES, POLICIES, ROOT
from support.server import Server, issue_certs

PIP = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]


def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(kw.pop("env", {}))
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, **kw)


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory) -> Path:
    """Wheels of the runtime dependencies (and of the build backend), cached per dependency set."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    wanted = [*project["project"]["dependencies"], *project["build-system"]["requires"]]
    key = hashlib.sha256("\n".join(wanted).encode()).hexdigest()[:12]
    cache = Path(sys.prefix) / f"wheelhouse-{key}"
    if not (cache / ".complete").exists():
        r = _run([*PIP, "wheel", "-w", str(cache), *wanted])
        assert r.returncode == 0, r.stderr
        (cache / ".complete").touch()
    return cache


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    r = _run([*PIP, "wheel", "--no-deps", "-w", str(out), str(ROOT)])
    assert r.returncode == 0, r.stderr
    [built] = out.glob("trainadmit-*.whl")
    return built


def _bare_python(where: Path) -> Path:
    """A Python with nothing installed: a venv without pip (the slim image's interpreter, here)."""
    r = _run([sys.executable, "-m", "venv", "--without-pip", str(where)])
    assert r.returncode == 0, r.stderr
    return where / "bin" / "python"


def test_the_wheel_holds_one_namespace(wheel):
    tops = {name.split("/")[0] for name in zipfile.ZipFile(wheel).namelist()}
    assert tops == {"trainadmit", wheel.name.split("-py3")[0] + ".dist-info"}


def _serve_until_ready(command: list[str], tmp: Path, env: dict | None = None) -> None:
    server = Server(POLICIES, issue_certs(tmp / "certs"), workers=1, command=command, env_extra=env)
    try:
        server.wait_ready()
        status, body = server.client().request("GET", "/readyz")
        assert status == 200, body
    finally:
        assert server.stop() == 0


def test_plain_install_runs_check_lint_and_serve(wheel, wheelhouse, tmp_path):
    python = _bare_python(tmp_path / "venv")
    r = _run([*PIP, "--python", str(python), "install", "--no-index", "--no-compile", "--find-links",
              str(wheelhouse), str(wheel)])
    assert r.returncode == 0, r.stderr
    # no test extras leaked in: the point is to run on the runtime dependencies alone
    for extra in ("pytest", "hypothesis", "kubernetes_validate"):
        assert _run([str(python), "-c", f"import {extra}"]).returncode != 0, f"{extra} is installed"
    site = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip())
    assert not (site / "webhook").exists() and not (site / "certs").exists()
    shown = _run([sys.executable, "-m", "pip", "--python", str(python), "show", "-f", "trainadmit"]).stdout
    files = [line.strip() for line in shown.split("Files:")[1].splitlines() if line.strip()]
    scripts = {f for f in files if f.startswith("../")}  # the console script in bin/
    assert scripts == {"../../../bin/trainadmit"}, scripts
    packages = {f.split("/")[0] for f in files if f not in scripts}
    assert packages == {"trainadmit", wheel.name.split("-py3")[0] + ".dist-info"}, packages
    program = tmp_path / "venv" / "bin" / "trainadmit"
    check = _run([str(program), "check", str(EXAMPLES), "-p", str(POLICIES)])
    assert check.returncode == 1, check.stderr  # the examples include denied Jobs
    assert "3 admitted, 4 denied, 7 not matched" in check.stdout  # and examples/prerequisites/'s 6 objects
    lint = _run([str(program), "policy", "lint", str(POLICIES)])
    assert lint.returncode == 0 and lint.stdout.rstrip().endswith("OK"), lint.stdout + lint.stderr
    _serve_until_ready([str(program)], tmp_path)


def _dockerfile_build_copies() -> list[str]:
    """The paths the Dockerfile's build stage copies into its build context (COPY a b ./x)."""
    text = (ROOT / "Dockerfile").read_text()
    build = text.split("FROM ")[1]
    out = []
    for line in build.splitlines():
        m = re.match(r"COPY\s+(?!--)(.+)\s+\S+$", line.strip())
        if m:
            out.extend(m.group(1).split())
    return out


def test_dockerfile_install_step_runs(wheelhouse, tmp_path):
    """`pip install --prefix=/install .` from exactly what the Dockerfile copies, then the result runs."""
    context = tmp_path / "src"
    context.mkdir()
    copied = _dockerfile_build_copies()
    assert {"pyproject.toml", "webhook", "certs"} <= set(copied), copied
    for item in copied:
        src = ROOT / item
        if src.is_dir():
            shutil.copytree(src, context / item, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(src, context / item)
    python = _bare_python(tmp_path / "base")
    prefix = tmp_path / "install"
    r = _run([*PIP, "--python", str(python), "install", "--no-index", "--no-compile", "--find-links",
              str(wheelhouse), f"--prefix={prefix}", "."], cwd=context)
    assert r.returncode == 0, r.stderr
    site = next(prefix.glob("lib/python3*/site-packages"))
    env = {"PYTHONPATH": str(site)}  # what COPY --from=build /install /usr/local gives the image's Python
    check = _run([str(prefix / "bin" / "trainadmit"), "check", str(EXAMPLES / "llama-pretrain.yaml"),
                  "-p", str(POLICIES)], env=env)
    assert check.returncode == 0 and "ADMITTED" in check.stdout, check.stdout + check.stderr
    _serve_until_ready([str(prefix / "bin" / "trainadmit")], tmp_path, env=env)
