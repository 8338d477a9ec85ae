"""What the outcome tier does as a user and reads back as a user: ``kubectl create`` a Job, then what the
Job controller and the scheduler made of it.

A gang's outcome is read once the scheduler has decided about every Pod the Job controller made: each
Pod is either bound (``spec.nodeName``) or carries ``PodScheduled=False`` (the scheduler tried and
said why). Only then "none bound" means the scheduler refused the gang rather than not having looked
yet, and "some bound" is a partial gang.
"""

from __future__ import annotations

import contextlib
import copy
import os
import subprocess
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from support.controlplane import ControlPlane, KubeError, KubeHTTP, SchedulingControlPlane, wait_until
from support.paths import FIXTURES
from support.pool_nodes import NodeShape, create_nodes, delete_nodes, domains, set_cordoned, wait_schedulable

# The Kubernetes documentation's Indexed Job (kubernetes/website, see tests/fixtures/SOURCES.md): what a
# user starts from. The outcome tests ask it for whole GPU nodes and set its size, nothing else.
INDEXED_JOB = FIXTURES / "real-world" / "k8s-website-indexed-job.yaml"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
POOL = "h100-ib"
LEVEL = "rack"
IMAGE = "docker.io/library/busybox:1.36"  # the worker's image; the nodes of each test's second rack hold it
BLOCKER_NS = "kube-public"  # another tenant's Pods, which never go through trainadmit (an exempt namespace)


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


def gpu_job(name: str, namespace: str, workers: int, gpus: int = 8, *, completions: int | None = None,
            annotations: Mapping[str, str] | None = None, image: str = IMAGE) -> dict:
    """The documentation's Indexed Job asking for ``gpus`` GPUs per worker and ``workers`` at once (all of
    its completions unless told otherwise), with its owner label (the bundled policy asks for one)."""
    job = copy.deepcopy(yaml.safe_load(INDEXED_JOB.read_text()))
    job["metadata"] = {"name": name, "namespace": namespace, "labels": {"owner": "ml-research"},
                       "annotations": dict(annotations or {})}
    job["spec"].update(parallelism=workers, completions=completions or workers)
    worker = job["spec"]["template"]["spec"]["containers"][0]
    worker["resources"] = {"limits": {"nvidia.com/gpu": gpus}}
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


# ---- a cluster shape for one test ------------------------------------------------------------------



@dataclass(frozen=True)
class Shape:
    """Racks of the pool (``sizes``; the second one holds the workers' image, so the scheduler prefers
    its nodes), which nodes are cordoned, NotReady, or already running another tenant's 8-GPU Pod
    (``held``; node names without the test's prefix, e.g. "a0")."""

    name: str
    sizes: tuple[int, ...] = (4, 3)
    cordoned: tuple[str, ...] = ()
    not_ready: tuple[str, ...] = ()
    held: tuple[str, ...] = ()


FITS = Shape("fits")  # rack a: 4 free nodes; rack b: 3, preferred by the scheduler
RACK_BUSY = Shape("rack too small", held=("a0",))  # 3 + 3 free: no rack fits 4
CORDONED = Shape("cordoned node", cordoned=("a1",))  # 3 + 3 schedulable now, 4 + 3 once uncordoned
NOT_READY = Shape("NotReady node", not_ready=("a1",))


@dataclass
class Scene:
    """One test's nodes and namespace on the shared outcome cluster, and what the test changed since."""

    http: KubeHTTP
    policy: Any  # trainadmit's PolicySet being served
    namespace: str
    prefix: str
    nodes: list[NodeShape]
    held: dict[str, str] = field(default_factory=dict)  # node -> the other tenant's Pod on it
    cordoned: set[str] = field(default_factory=set)

    def node(self, short: str) -> str:
        return f"{self.prefix}-{short}"

    def free_by_domain(self, colocated: bool) -> dict[str, int]:
        """Nodes that can take a worker now, per rack (``colocated``) or in the whole pool."""
        out: dict[str, int] = {}
        for n in self.nodes:
            if n.name in self.cordoned or not n.ready or n.name in self.held:
                continue
            key = n.domains[LEVEL] if colocated else "pool"
            out[key] = out.get(key, 0) + 1
        return out

    def release(self, short: str) -> None:
        """The other tenant's Pod on that node ends (force-deleted: no kubelet confirms a graceful end)."""
        holder = self.held.pop(self.node(short))
        self.http.request("DELETE", self.http.path_for("v1", "Pod", BLOCKER_NS, holder), {"gracePeriodSeconds": 0})

    def uncordon(self, short: str) -> None:
        set_cordoned(self.http, self.node(short), False)
        self.cordoned.discard(self.node(short))


def _hold(http: KubeHTTP, node: str) -> str:
    """Another tenant's Pod taking all 8 GPUs of ``node`` (bound by name, as a DaemonSet's would be)."""
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"holder-{node}", "namespace": BLOCKER_NS},
           "spec": {"nodeName": node, "tolerations": [{"operator": "Exists"}], "containers": [
               {"name": "c", "image": "example.invalid/other:1", "resources": {"limits": {"nvidia.com/gpu": 8}}}]}}
    return http.create(pod)["metadata"]["name"]


@contextlib.contextmanager
def scene(cp: SchedulingControlPlane, webhook: Any, phase: str, shape: Shape, prefix: str) -> Iterator[Scene]:
    """Serve ``phase``'s policy; make ``shape``'s Nodes from its pool and a fresh namespace; afterwards
    delete what the test made (Pods force-deleted: without a kubelet they would stay Terminating)."""
    policy = webhook.use(phase)
    pool = policy.pools[POOL]
    nodes = domains(prefix, LEVEL, shape.sizes, outer={"zone": "zone-a"}, images={f"{prefix}-b": [IMAGE]},
                    cordoned=[f"{prefix}-{c}" for c in shape.cordoned],
                    not_ready=[f"{prefix}-{c}" for c in shape.not_ready])
    http = cp.http
    namespace = f"team-{prefix}"
    try:
        create_nodes(http, pool, nodes)
        wait_schedulable(http, [n.name for n in nodes])
        cp.ensure_namespace(namespace)
        s = Scene(http, policy, namespace, prefix, nodes, cordoned={n.name for n in nodes if n.cordoned})
        for short in shape.held:
            s.held[s.node(short)] = _hold(http, s.node(short))
        yield s
    finally:
        for job in http.list("batch/v1", "Job", namespace)["items"]:
            http.delete({"apiVersion": "batch/v1", "kind": "Job", "metadata": job["metadata"]}, propagation="Background")
        cp.force_delete_pods(namespace)
        for node in [n.name for n in nodes]:
            with contextlib.suppress(KubeError):
                http.request("DELETE", http.path_for("v1", "Pod", BLOCKER_NS, f"holder-{node}"), {"gracePeriodSeconds": 0})
        delete_nodes(http, [n.name for n in nodes])
        http.delete({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
