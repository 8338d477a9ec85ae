"""What the outcome tier does as a user and reads back as a user: ``kubectl create`` a Job, then what the
Job controller and the scheduler made of it.

A gang's outcome is read once the scheduler has decided about every Pod the Job controller made: each
Pod is either bound (``spec.nodeName``) or carries ``PodScheduled=False`` (the scheduler tried and
said why). Only then "none bound" means the scheduler refused the gang rather than not having looked
yet, and "some bound" is a partial gang.
"""

from __future__ import annotations

import copy
import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field

import yaml
from conftest import FIXTURES
from controlplane import ControlPlane, KubeHTTP, wait_until

# The Kubernetes documentation's Indexed Job (kubernetes/website, see tests/fixtures/SOURCES.md): what a
# user starts from. The outcome tests ask it for whole GPU nodes and set its size, nothing else.
INDEXED_JOB = FIXTURES / "real-world" / "k8s-website-indexed-job.yaml"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"


def kubectl(cp: ControlPlane, *args: str, stdin: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    """kubectl (v1.32 on these machines) against the control plane, as its admin."""
    env = {**os.environ, "KUBECONFIG": str(cp.kubeconfig)}
    return subprocess.run(["kubectl", *args], input=stdin, capture_output=True, text=True, timeout=timeout, env=env,
                          check=False)


@dataclass(frozen=True)
class Submission:
    """What ``kubectl create`` said: exit code, the warnings the apiserver relayed, the refusal."""

    returncode: int
    warnings: tuple[str, ...]
    error: str

    @property
    def admitted(self) -> bool:
        return self.returncode == 0


def submit(cp: ControlPlane, manifest: Mapping) -> Submission:
    """``kubectl create -f -`` with the manifest, as a user submits it."""
    done = kubectl(cp, "create", "-f", "-", stdin=yaml.safe_dump(dict(manifest)))
    lines = done.stderr.splitlines()
    warnings = tuple(line.removeprefix("Warning: ") for line in lines if line.startswith("Warning: "))
    error = "\n".join(line for line in lines if not line.startswith("Warning: "))
    return Submission(done.returncode, warnings, error)


def gpu_job(name: str, namespace: str, workers: int, gpus: int, *, annotations: Mapping[str, str] | None = None,
            image: str | None = None) -> dict:
    """The documentation's Indexed Job asking for ``gpus`` GPUs per worker, ``workers`` at once, all completing."""
    job = copy.deepcopy(yaml.safe_load(INDEXED_JOB.read_text()))
    job["metadata"] = {"name": name, "namespace": namespace, "annotations": dict(annotations or {})}
    job["spec"].update(parallelism=workers, completions=workers)
    worker = job["spec"]["template"]["spec"]["containers"][0]
    worker["resources"] = {"limits": {"nvidia.com/gpu": gpus}}
    if image:
        worker["image"] = image
    return job


@dataclass
class Verdict:
    """The scheduler's decision about every Pod of a workload."""

    bound: dict[str, str] = field(default_factory=dict)  # Pod -> Node
    unschedulable: dict[str, str] = field(default_factory=dict)  # Pod -> the scheduler's message
    undecided: list[str] = field(default_factory=list)

    @property
    def pods(self) -> int:
        return len(self.bound) + len(self.unschedulable) + len(self.undecided)


def read_verdict(http: KubeHTTP, namespace: str, selector: str) -> Verdict:
    out = Verdict()
    for pod in http.list("v1", "Pod", namespace, labelSelector=selector)["items"]:
        name = pod["metadata"]["name"]
        if pod["metadata"].get("deletionTimestamp"):
            continue  # a victim on its way out
        if pod["spec"].get("nodeName"):
            out.bound[name] = pod["spec"]["nodeName"]
            continue
        cond = next((c for c in pod.get("status", {}).get("conditions") or [] if c["type"] == "PodScheduled"), None)
        if cond and cond["status"] == "False":
            out.unschedulable[name] = cond.get("message", "")
        else:
            out.undecided.append(name)
    return out


def decided(http: KubeHTTP, namespace: str, selector: str, pods: int, timeout: float = 60.0) -> Verdict:
    """Wait until ``pods`` Pods exist and the scheduler decided about each (bound or PodScheduled=False)."""
    def ready() -> Verdict | None:
        v = read_verdict(http, namespace, selector)
        return v if v.pods >= pods and not v.undecided else None

    try:
        return wait_until(ready, timeout=timeout, what=f"the scheduler's decision on {pods} Pods ({selector})")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; last seen: {read_verdict(http, namespace, selector)}") from None


def all_bound(http: KubeHTTP, namespace: str, selector: str, pods: int, timeout: float = 60.0) -> Verdict:
    """Wait until ``pods`` Pods are bound."""
    def ready() -> Verdict | None:
        v = read_verdict(http, namespace, selector)
        return v if len(v.bound) >= pods else None

    try:
        return wait_until(ready, timeout=timeout, what=f"{pods} Pods bound ({selector})")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; last seen: {read_verdict(http, namespace, selector)}") from None


def node_labels(http: KubeHTTP, names: set[str], key: str) -> dict[str, str]:
    """Node -> its value of label ``key``."""
    return {n["metadata"]["name"]: n["metadata"]["labels"].get(key, "")
            for n in http.list("v1", "Node")["items"] if n["metadata"]["name"] in names}
