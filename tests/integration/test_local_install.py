"""docs/install.md's "Try it against any cluster from your machine", run as written against a real kube-apiserver
1.36.2: the commands are read out of the document's ``sh`` blocks and run by bash, from a directory holding only
what the document says they read (the clone's ``policies/`` and ``examples/``), with ``trainadmit`` and ``kubectl``
on the PATH and the cluster's admin kubeconfig, as a platform engineer's laptop has them.

Twice, on the two clusters a newcomer meets: a stock 1.36 apiserver (no feature gates: no gang scheduler is
served) and one started with the Workload API (``GenericWorkload`` and ``scheduling.k8s.io/v1alpha2``). The
bundled policy, unchanged, must admit the documentation's 4 x 8-GPU Job on both: on the stock one stored with
what the policy injects and a warning naming what is missing for gangs; on the gated one stored with its gang
(the Pod template's ``schedulingGroup`` and the PodGroup trainadmit's reconciler creates). Each is compared with
what ``trainadmit check --kubeconfig`` predicted for the same cluster (the docs' own command before the create).

What the cluster holds before the commands run is what the document presumes of a cluster: GPU nodes of the
bundled pools (as their kubelets and device plugins report them) and Multus' CRD.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from support import suite_processes
from support.controlplane import ASSETS_ENV, ControlPlane, KubeHTTP, assets_from_env
from support.kube_fixtures import OPERATOR_CRDS, SKIP_REASON
from support.paths import ROOT
from support.pool_nodes import create_nodes, domains
from support.server import free_port, wait_until

from trainadmit.engine import load_policy

pytestmark = [pytest.mark.xdist_group("local-install"),
              pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")]

INSTALL_MD = ROOT / "docs" / "install.md"
SECTION = "## Try it against any cluster from your machine"
# no node-lifecycle controller runs: the plugin's not-ready taint on new Nodes would never be removed
COMMON_ARGS = ["--disable-admission-plugins=TaintNodesByCondition"]
CLUSTERS = {
    "stock-1.36": [],
    "workload-api-1.36": ["--feature-gates=GenericWorkload=true", "--runtime-config=scheduling.k8s.io/v1alpha2=true"],
}
JOB = ("llama-pretrain", "team-nlp")


def doc_blocks() -> list[str]:
    """The ``sh`` blocks of the section, in order."""
    text = INSTALL_MD.read_text()
    start = text.index(SECTION)
    end = text.find("\n## ", start + len(SECTION))
    return re.findall(r"```sh\n(.*?)```", text[start:end if end > 0 else None], re.S)


@dataclass
class Install:
    """A cluster after the document's commands: the control plane, the directory they ran in, their outputs."""

    name: str
    cp: ControlPlane
    cwd: Path
    env: dict
    serve_log: Path
    first: subprocess.CompletedProcess  # the first-submission block

    @property
    def http(self) -> KubeHTTP:
        return self.cp.http

    def sh(self, script: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=self.cwd, env=self.env,
                              capture_output=True, text=True, timeout=timeout, check=False)

    def log_lines(self) -> list[dict]:
        return [json.loads(x) for x in self.serve_log.read_text().splitlines() if x.startswith("{")]


def _blocks() -> tuple[str, str, str, str]:
    blocks = doc_blocks()
    assert len(blocks) == 4, f"{INSTALL_MD.name}: the section should hold install, serve, first submission and " \
                             f"uninstall blocks, found {len(blocks)}"
    install, serve, first, uninstall = blocks
    assert "trainadmit certs issue" in install and "policy webhooks" in install and "--url" in install
    assert "trainadmit serve" in serve and "kubectl create -f examples/llama-pretrain.yaml" in first
    return install, serve, first, uninstall


def _the_cluster(cp: ControlPlane) -> None:
    """GPU nodes of the bundled pools (one rack of 4 H100 nodes, 2 L40S nodes) and Multus' CRD."""
    policy = load_policy(ROOT / "policies")
    create_nodes(cp.http, policy.pools["h100-ib"], domains("h100", "rack", [4], outer={"zone": "z1"}))
    create_nodes(cp.http, policy.pools["l40s-eth"], domains("l40s", "zone", [2]))
    cp.install_crds(OPERATOR_CRDS / "multus" / "crds")


@pytest.fixture(scope="module", params=list(CLUSTERS))
def install(request, tmp_path_factory) -> Iterator[Install]:
    if not os.environ.get(ASSETS_ENV, "").strip():
        pytest.skip(SKIP_REASON)
    assert assets_from_env() is not None, f"{ASSETS_ENV} holds no kube-apiserver and etcd"
    install_block, serve_block, first_block, uninstall_block = _blocks()
    base = tmp_path_factory.mktemp(f"local-install-{request.param}")
    cwd = base / "clone"
    cwd.mkdir()
    assert not any(cwd.iterdir())
    for name in ("policies", "examples"):  # what the section says the commands read
        shutil.copytree(ROOT / name, cwd / name)
    cp = ControlPlane(extra_args=[*COMMON_ARGS, *CLUSTERS[request.param]])
    cp.start()
    serve = None
    try:
        _the_cluster(cp)
        home = base / "home"
        home.mkdir()
        env = {"PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}",
               "HOME": str(home), "KUBECONFIG": str(cp.kubeconfig), "HOST": "127.0.0.1", "PORT": str(free_port()),
               "LANG": "C.UTF-8", suite_processes.MARKER: os.environ.get(suite_processes.MARKER, "")}
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", install_block], cwd=cwd, env=env,
                              capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
        serve_log = base / "serve.log"
        with open(serve_log, "wb") as log:
            serve = suite_processes.popen(["bash", "-euo", "pipefail", "-c", serve_block], cwd=cwd, env=env,
                                          stdout=log, stderr=subprocess.STDOUT)
        _wait_serving(cp, env, serve, serve_log)
        first = subprocess.run(["bash", "-euo", "pipefail", "-c", first_block], cwd=cwd, env=env,
                               capture_output=True, text=True, timeout=180, check=False)
        yield Install(request.param, cp, cwd, env, serve_log, first)
        # the document's way out: unregister, then stop the server
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", uninstall_block], cwd=cwd, env=env,
                              capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, done.stderr
    finally:
        if serve is not None:
            if serve.poll() is None:  # Ctrl-C in its terminal: SIGINT to the foreground process group
                with_group_signal(serve, signal.SIGINT)
            suite_processes.stop(serve, grace=15)
        cp.stop()


def with_group_signal(proc: subprocess.Popen, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)


def _wait_serving(cp: ControlPlane, env: dict, serve: subprocess.Popen, log: Path) -> None:
    """Ready, and called by the apiserver (a dry-run of a Job with trainadmit's intent is answered by both)."""
    import ssl
    import urllib.request

    ctx = ssl.create_default_context(cafile=None)
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE

    def ready() -> bool:
        assert serve.poll() is None, f"trainadmit serve exited {serve.returncode}: {log.read_text()[-3000:]}"
        try:
            with urllib.request.urlopen(f"https://{env['HOST']}:{env['PORT']}/readyz", context=ctx, timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    wait_until(ready, 90, f"trainadmit serve not ready: {log}", interval=0.2)
    probe = {"apiVersion": "batch/v1", "kind": "Job",
             "metadata": {"name": "probe", "namespace": "default", "labels": {"trainadmit.io/probe": "true"}},
             "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
                 {"name": "c", "image": "busybox", "resources": {"limits": {"cpu": "1"}}}]}}}}
    cp.wait_webhooks_active(probe, ("mutate.trainadmit.io", "validate.trainadmit.io"), timeout=60)


def contained(predicted, stored, path: str = "") -> list[str]:
    """Where the stored object differs from the predicted one, other than by what the apiserver adds (defaults)."""
    if isinstance(predicted, dict):
        if not isinstance(stored, dict):
            return [f"{path}: {stored!r} is not a mapping"]
        return [d for k, v in predicted.items()
                for d in ([f"{path}.{k}: missing"] if k not in stored else contained(v, stored[k], f"{path}.{k}"))]
    if isinstance(predicted, list):
        if not isinstance(stored, list) or len(stored) != len(predicted):
            return [f"{path}: {stored!r} != {predicted!r}"]
        return [d for i, (p, s) in enumerate(zip(predicted, stored, strict=True)) for d in contained(p, s, f"{path}[{i}]")]
    return [] if str(predicted) == str(stored) else [f"{path}: {stored!r} != {predicted!r}"]


def _prediction(install: Install) -> tuple[dict, dict[str, dict]]:
    """What ``check --kubeconfig`` says of the Job on this cluster: its verdict (``-o json``) and the objects
    admission and the reconciler would store (``-o yaml``), by kind."""
    verdict = install.sh('trainadmit check -o json --kubeconfig "$KUBECONFIG" examples/llama-pretrain.yaml')
    assert verdict.returncode == 0, verdict.stderr
    obj = install.sh('trainadmit check -o yaml --kubeconfig "$KUBECONFIG" examples/llama-pretrain.yaml')
    assert obj.returncode == 0, obj.stderr
    [result] = json.loads(verdict.stdout)
    docs = {d["kind"]: d for d in yaml.safe_load_all(obj.stdout) if d}  # the Job, and a PodGroup it names
    assert set(docs) <= {"Job", "PodGroup"}, sorted(docs)
    return result, docs


def _server_warning(w: dict, prefix: str = "trainadmit") -> str:
    """A warning as the server words it for kubectl (webhook/server/admission.py); a note says it is one."""
    return f"{prefix} [{w['rule']}] {w['path']}: {w['message']}" + (f" ({w['hint']})" if w.get("hint") else "")


def test_the_documents_commands_install_and_the_first_job_is_stored(install):
    first = install.first
    assert first.returncode == 0, first.stdout + first.stderr
    assert "job.batch/llama-pretrain created" in first.stdout
    assert "trainadmit.io/applied" in first.stdout  # the block's own last command: the stored annotation
    assert not list((install.cwd).glob("*.crt")) and (install.cwd / "try" / "certs" / "ca.crt").is_file()
    [cluster] = [x for x in install.log_lines() if x.get("event") == "cluster"]
    assert cluster["kubernetes_version"] == "1.36"
    assert not [x for x in install.log_lines() if x.get("event") == "setting_unhonoured"]  # the bundled default


def test_the_stored_job_is_what_check_predicted_with_the_warnings_kubectl_printed(install):
    predicted, objs = _prediction(install)
    obj = objs["Job"]
    stored = install.http.get("batch/v1", "Job", *JOB)
    assert predicted["allowed"] is True
    diff = contained(obj["spec"], stored["spec"])
    assert diff == [], diff
    assert obj["metadata"]["labels"] == stored["metadata"]["labels"]
    assert obj["metadata"]["annotations"] == stored["metadata"]["annotations"]
    printed = [line.removeprefix("Warning: ") for line in install.first.stderr.splitlines()
               if line.startswith("Warning: ")]
    # the create printed exactly what check predicted (the dry-run probe and the prerequisites print none)
    assert sorted(printed) == sorted([*(_server_warning(w) for w in predicted["warnings"]),
                                      *(_server_warning(w, "trainadmit note") for w in predicted["notes"])])
    applied = json.loads(stored["metadata"]["annotations"]["trainadmit.io/applied"])
    template = stored["spec"]["template"]["spec"]
    # what the bundled policy injects, on either cluster (written down from policies/, not read off the output)
    assert template["priorityClassName"] == "training-high"
    assert template["nodeSelector"]["trainadmit.io/pool"] == "h100-ib"
    assert {v["persistentVolumeClaim"]["claimName"] for v in template["volumes"] if "persistentVolumeClaim" in v} == {
        "dataset-c4", "checkpoints-rwx"}
    assert "NCCL_IB_HCA" in {e["name"] for e in template["containers"][0]["env"]}
    assert stored["spec"]["template"]["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"].startswith(
        "trainadmit-system/ib-ipoib")
    if install.name == "stock-1.36":
        assert applied["gang"] == "none" and "schedulingGroup" not in template and "PodGroup" not in objs
        [gang] = [w for w in printed if w.startswith("trainadmit note [gang.unavailable] metadata: ")]
        assert gang.startswith("trainadmit note [gang.unavailable] metadata: its 4 Pods may start one by one: no gang "
                               "scheduler is served (Kubernetes v1.36.2: no scheduling.k8s.io/v1alpha2, no ")
        assert gang.endswith("GangScheduling=true; or install one of those)")  # all of it reached kubectl
        assert "--feature-gates=GenericWorkload=true --runtime-config=scheduling.k8s.io/v1alpha2=true" in gang
    else:
        assert applied["gang"] == "native/pod-group"
        assert template["schedulingGroup"] == {"podGroupName": "llama-pretrain-gang"}
        assert not [w for w in printed if "[gang.unavailable]" in w]
        # the reconciler (serve --reconcile, as the document runs it) creates the PodGroup check predicted
        want = objs["PodGroup"]
        assert json.loads(obj["metadata"]["annotations"]["trainadmit.io/podgroup"])["spec"] == want["spec"]

        def podgroup():
            return install.http.get_or_none("scheduling.k8s.io/v1alpha2", "PodGroup", want["metadata"]["name"],
                                            JOB[1])

        group = wait_until(podgroup, 60, "the reconciler created no PodGroup", interval=0.2)
        assert contained(want["spec"], group["spec"]) == []
        assert want["metadata"]["labels"].items() <= group["metadata"]["labels"].items()
        assert [o["name"] for o in group["metadata"]["ownerReferences"]] == ["llama-pretrain"]


def test_every_example_is_made_for_kubectl_create(install):
    if install.name != "stock-1.36":
        pytest.skip("once is enough: the examples' verdicts do not depend on the gang backend")
    done = install.sh("kubectl create -f examples/ -o name")
    created = sorted(re.sub(r"eval-\w+$", "eval-*", n) for n in done.stdout.split())
    # the examples' own first lines: three admitted GPU Jobs and the CPU one; llama-pretrain exists already
    assert created == ["job.batch/bert-finetune", "job.batch/eval-*", "job.batch/tokenize"], done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("Error from server")]
    assert len(errors) == 5, done.stderr
    assert sum("already exists" in e for e in errors) == 1
    refused = sorted(re.findall(r'error when creating "examples/(denied-[\w-]+\.yaml)": admission webhook '
                                r'"(?:mutate|validate)\.trainadmit\.io" denied the request: ', done.stderr))
    assert refused == sorted(p.name for p in (install.cwd / "examples").glob("denied-*.yaml")), done.stderr
    applied = install.sh("kubectl apply -f examples/single-node-eval.yaml")
    assert applied.returncode != 0 and "cannot use generate name with apply" in applied.stderr  # as the docs say


def test_a_changed_tier_value_needs_the_documented_replace(install):
    if install.name != "stock-1.36":
        pytest.skip("once is enough")
    policy = install.cwd / "policies" / "priorities.yaml"
    docs = [d for d in yaml.safe_load_all(policy.read_text()) if d]
    tier = next(d for d in docs if d["kind"] == "PriorityTier" and d["spec"]["className"] == "training-high")
    tier["spec"]["value"] += 1
    changed = install.cwd / "changed"
    shutil.copytree(install.cwd / "policies", changed)
    (changed / "priorities.yaml").write_text(yaml.safe_dump_all(docs, sort_keys=False))
    applied = install.sh("trainadmit policy priorityclasses changed | kubectl apply -f -")
    assert applied.returncode != 0
    assert 'The PriorityClass "training-high" is invalid: value: Forbidden: may not be changed in an update' \
        in applied.stderr
    replaced = install.sh("trainadmit policy priorityclasses changed | kubectl replace --force -f -")
    assert replaced.returncode == 0, replaced.stderr
    assert install.http.get("scheduling.k8s.io/v1", "PriorityClass", "training-high")["value"] == tier["spec"]["value"]
