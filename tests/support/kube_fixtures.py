"""pytest plugin of the integration tier: a real control plane with trainadmit installed on it.

``control_plane`` starts etcd + kube-apiserver once per session from ``$KUBEBUILDER_ASSETS`` (envtest's
convention) and skips, with one reason, when the variable is unset; set but wrong is an error, so a
broken CI setting cannot pass as a skip. Every test that uses it carries ``APISERVER`` (an
``xdist_group``): under ``pytest -n 2 --dist loadgroup`` one worker owns the apiserver while the
other runs the rest of the suite.

``cluster`` installs what an operator would: deploy/base's namespace, ServiceAccount, RBAC and
PriorityClasses verbatim, the gang backends', Multus' and Kubeflow Trainer's CRDs (with Trainer's
runtimes the TrainJob examples name), and a cluster to decide against (GPU nodes as kubelets report
them, dataset and checkpoint claims, the RDMA network, queues), all before any trainadmit server
starts, so a server's first sync sees everything.

``webhook`` runs the real trainadmit server (``trainadmit serve --cluster-live``, as the deploy/
ServiceAccount with a real token, so deploy/'s RBAC is what authorizes its every call) and registers
deploy/base/webhooks.yaml verbatim except ``clientConfig`` (a loopback URL and trainadmit's own CA).
``webhook.use(phase)`` swaps the server's policy and waits until it serves that generation.
"""

from __future__ import annotations

import contextlib
import os
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from support.controlplane import (
    ASSETS_ENV,
    ClusterFeatures,
    ControlPlane,
    ControlPlaneError,
    KubeHTTP,
    SchedulingControlPlane,
    assets_from_env,
    load_manifests,
    scheduling_assets_from_env,
    wait_until,
)
from support.paths import FIXTURES, ROOT
from support.policies import BACKENDS, write_policy
from trainadmit.engine import load_policy
from trainadmit.policy.policyset import TOPOLOGY_GATE

APISERVER = pytest.mark.xdist_group("apiserver")
# One apiserver for the tier: the gates serve scheduling.k8s.io/v1alpha2 (native PodGroups) and keep
# Pod.spec.schedulingGroup, and behave like a plain 1.36 apiserver otherwise. TaintNodesByCondition is
# off because no node-lifecycle controller would ever remove the not-ready taint it adds to new Nodes.
# Nodes are watched from etcd, not the watch cache, so that a test can make a node watch expire (410) by
# compacting etcd (ControlPlane.compact_etcd) instead of starting a second apiserver.
SUITE_APISERVER_ARGS = ["--feature-gates=GenericWorkload=true", "--runtime-config=scheduling.k8s.io/v1alpha2=true",
                        "--disable-admission-plugins=TaintNodesByCondition", "--watch-cache-sizes=nodes#0"]
SKIP_REASON = (f"{ASSETS_ENV} is not set: no kube-apiserver/etcd for the integration tier (see docs/testing.md: "
               f"export {ASSETS_ENV}=<folder with kube-apiserver and etcd>)")
DEPLOY = ROOT / "deploy" / "base"
OPERATOR_CRDS = FIXTURES / "operators"
SYSTEM_NS = "trainadmit-system"
RENDER_NS = "kube-public"  # skipped by the webhooks' namespaceSelector, no Pod Security level: the apiserver's own
TEAM_NAMESPACES = ("team-nlp", "team-vision", "default")  # the examples' and fixtures' namespaces
BARE_NS = "research"  # no quota, no claims, no queues: for "names a missing object" tests
WEBHOOK_NAMES = ("mutate.trainadmit.io", "validate.trainadmit.io")

# Integration policy: the bundled set plus a canary pool (16 nodes, half of them unusable), a tier whose
# PriorityClass deploy/ does not install (as when a tier is added to the policy and not to deploy/), and the
# GPU budgets below.
CANARY_POOL = {
    "apiVersion": "trainadmit.io/v1alpha1", "kind": "Pool", "metadata": {"name": "h100-canary"},
    "spec": {"gpu": {"resource": "nvidia.com/gpu", "product": "NVIDIA-H100-80GB-HBM3", "perNode": 8},
             "nodeSelector": {"trainadmit.io/pool": "h100-canary"},
             "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
             "topology": {"default": "rack", "levels": [
                 {"name": "node", "nodeLabel": "kubernetes.io/hostname", "maxNodes": 1},
                 {"name": "rack", "nodeLabel": "topology.kubernetes.io/rack", "maxNodes": 16}]}}}
URGENT_TIER = {"apiVersion": "trainadmit.io/v1alpha1", "kind": "PriorityTier", "metadata": {"name": "urgent"},
               "spec": {"className": "training-urgent", "value": 90000}}
# A namespace with a GPU budget of its own, for the budget's tests; team-nlp's is raised instead, since the
# corpus tests submit every example and fixture there at once (their GPUs add up to well over the bundled 64)
BUDGET_NS = "gpu-budget"
BUDGET_QUOTA = {"apiVersion": "trainadmit.io/v1alpha1", "kind": "Quota", "metadata": {"name": BUDGET_NS},
                "spec": {"namespaces": [BUDGET_NS], "maxGPUsPerJob": 128, "maxWorkersPerJob": 16, "gpuQuota": 64}}
TEAM_NLP_QUOTA = {"apiVersion": "trainadmit.io/v1alpha1", "kind": "Quota", "metadata": {"name": "team-nlp"},
                  "spec": {"namespaces": ["team-nlp"], "maxGPUsPerJob": 128, "maxWorkersPerJob": 16,
                           "allowedPools": ["h100-ib", "l40s-eth"], "allowedPriorities": ["high", "normal", "low"],
                           "gpuQuota": 2048}}
EXTRA_POLICY = [CANARY_POOL, URGENT_TIER, BUDGET_QUOTA]
REPLACED_POLICY = [TEAM_NLP_QUOTA]
# the policy phases of the tier: the bundled target (1.37, native Job.spec.scheduling), and the policy
# retargeted at this 1.36 apiserver with each gang backend it can hold
PHASES: dict[str, dict] = {"default": {}}
PHASES.update({name: {"kubernetesVersion": "1.36", "featureGates": ["GenericWorkload"], **BACKENDS[name]}
               for name in ("native-podgroup", "coscheduling", "volcano", "kueue")})


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Make ``--dist loadgroup`` group again under pytest >= 9.2 (runs in each xdist worker).

    pytest-xdist 3.8 groups by suffixing ``item._nodeid`` with ``@<group>``; pytest 9.2 derives ``nodeid``
    from ``item._id`` instead, so the suffix is lost and every test of a group may land on any worker (each
    then starting its own apiserver). Where xdist's suffix did not take, set it the way this pytest reads it.
    """
    if not getattr(config.option, "loadgroup", False):
        return
    try:
        from _pytest.nodeid import NodeId
    except ImportError:  # an older pytest: xdist's own suffix works
        return
    for item in items:
        groups = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                         for m in item.iter_markers("xdist_group")})
        if groups and "@" not in item.nodeid and hasattr(item, "_id"):
            item._id = NodeId.parse(f"{item.nodeid}@{'_'.join(groups)}")


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    """A started control plane for the session; exactly its two processes are stopped at the end."""
    value = os.environ.get(ASSETS_ENV, "").strip()
    if not value:
        pytest.skip(SKIP_REASON)
    if assets_from_env() is None:
        raise ControlPlaneError(f"{ASSETS_ENV}={value!r} holds no executable kube-apiserver and etcd")
    cp = ControlPlane(value, extra_args=SUITE_APISERVER_ARGS + shlex.split(os.environ.get("CONTROLPLANE_EXTRA_ARGS", "")),
                      keep_run_dir=os.environ.get("CONTROLPLANE_KEEP_RUN_DIR") == "1")
    cp.start()  # on failure it has stopped what it started; the error carries the logs' tails
    try:
        yield cp
    finally:
        cp.stop()


# ---- the cluster ------------------------------------------------------------------------------

def gpu_node(name: str, pool: str, product: str, gpus: int, rack: str | None, zone: str, *, ready: bool = True,
             cordoned: bool = False, extra_taints: tuple[dict, ...] = (), allocatable_gpus: int | None = None) -> dict:
    """A Node as the kubelet, GPU Feature Discovery, Node Feature Discovery and the device plugins report it."""
    labels = {"kubernetes.io/hostname": name, "trainadmit.io/pool": pool, "nvidia.com/gpu.product": product,
              "nvidia.com/gpu.count": str(gpus), "nvidia.com/cuda.driver.major": "550",
              "feature.node.kubernetes.io/rdma.capable": "true", "topology.kubernetes.io/zone": zone}
    if rack:
        labels["topology.kubernetes.io/rack"] = rack
    alloc = {"cpu": "190", "memory": "2000Gi", "pods": "110",
             "nvidia.com/gpu": str(gpus if allocatable_gpus is None else allocatable_gpus),
             "rdma/rdma_shared_device_a": "63"}
    spec: dict = {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}, *extra_taints]}
    if cordoned:
        spec["unschedulable"] = True
    condition = {"type": "Ready", "status": "True" if ready else "False",
                 "reason": "KubeletReady" if ready else "KubeletNotReady", "message": "test node"}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}, "spec": spec,
            "status": {"capacity": dict(alloc, **{"nvidia.com/gpu": str(gpus)}), "allocatable": alloc,
                       "conditions": [condition]}}


def canary_nodes() -> list[dict]:
    """The canary rack of the issue: 16 nodes, 4 NotReady, 2 cordoned, 1 with an untolerated taint, 1 with
    no allocatable GPUs: 8 usable now, 10 once the cordons lift."""
    out = []
    for i in range(1, 17):
        kw: dict = {}
        if i <= 4:
            kw["ready"] = False
        elif i <= 6:
            kw["cordoned"] = True
        elif i == 7:
            kw["extra_taints"] = ({"key": "nvidia.com/gpu.health", "value": "xid-79", "effect": "NoSchedule"},)
        elif i == 8:
            kw["allocatable_gpus"] = 0
        out.append(gpu_node(f"canary-n{i:02d}", "h100-canary", "NVIDIA-H100-80GB-HBM3", 8, "canary-rack", "zone-b",
                            **kw))
    return out


def cluster_nodes() -> list[dict]:
    """As the bundled policy describes it: 4 racks of 16 H100 nodes in one zone (64), 32 L40S nodes in one
    zone; and the canary rack."""
    h100 = [gpu_node(f"h100-r{r}-n{n:02d}", "h100-ib", "NVIDIA-H100-80GB-HBM3", 8, f"rack-{r}", "zone-a")
            for r in range(1, 5) for n in range(1, 17)]
    l40s = [gpu_node(f"l40s-n{n:02d}", "l40s-eth", "NVIDIA-L40S", 4, None, "zone-c") for n in range(1, 33)]
    return h100 + l40s + canary_nodes()


def claim(name: str, namespace: str, mode: str) -> dict:
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name, "namespace": namespace},
            "spec": {"accessModes": [mode], "resources": {"requests": {"storage": "1Ti"}}}}


@dataclass
class Cluster:
    cp: ControlPlane
    http: KubeHTTP
    nodes: list[dict]


_INSTALLED: dict[int, Cluster] = {}


@pytest.fixture(scope="session")
def cluster(control_plane: ControlPlane) -> Cluster:
    return cluster_on(control_plane)


def cluster_on(cp: ControlPlane) -> Cluster:
    """The session's cluster on ``cp``, installed on first use (for a module that names its own fixture
    ``cluster`` and so cannot request this one)."""
    if id(cp) not in _INSTALLED:
        _INSTALLED[id(cp)] = install_cluster(cp)
    return _INSTALLED[id(cp)]


def install_cluster(cp: ControlPlane) -> Cluster:
    """What an operator installs, and the cluster to decide against (see the module doc); bench/e2e.py
    builds the same cluster."""
    http = cp.http
    deploy = load_manifests(*(DEPLOY / f for f in ("namespace.yaml", "serviceaccount.yaml", "rbac.yaml",
                                                   "priorityclasses.yaml")))
    cp.apply(deploy)
    cp.install_crds(OPERATOR_CRDS / "scheduler-plugins" / "crds", OPERATOR_CRDS / "volcano" / "crds",
                    OPERATOR_CRDS / "kueue" / "crds", OPERATOR_CRDS / "multus" / "crds",
                    OPERATOR_CRDS / "kubeflow-trainer-v2" / "crds")
    for ns in (*TEAM_NAMESPACES, BARE_NS, SYSTEM_NS, RENDER_NS, BUDGET_NS):
        cp.ensure_namespace(ns)
    nodes = cluster_nodes()
    for node in nodes:
        http.create(node)
    objs: list[dict] = []
    policy = load_policy(ROOT / "policies")
    for ns in TEAM_NAMESPACES:
        objs += [claim(d.claimName, ns, "ReadOnlyMany") for d in policy.datasets.values()]
        objs += [claim(c.claimName, ns, "ReadWriteMany") for c in policy.checkpoints.values()]
    for ns in (*TEAM_NAMESPACES, BARE_NS):
        objs += [{"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue",
                  "metadata": {"name": BACKENDS["kueue"]["gang"]["queue"], "namespace": ns},
                  "spec": {"clusterQueue": "cluster-queue"}}]
    objs += [{"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": q},
              "spec": {"weight": 1}} for q in ("default", BACKENDS["volcano"]["gang"]["queue"])]
    for pool in policy.pools.values():
        for net in pool.rdma.networks if pool.rdma else []:
            ns, _, name = net.rpartition("/")
            objs.append({"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
                         "metadata": {"name": name.split("@")[0], "namespace": ns or "default"},
                         "spec": {"config": '{"cniVersion": "0.3.1", "type": "ipoib"}'}})
    # the runtimes Trainer's TrainJob examples name (tests/fixtures/operators/kubeflow-trainer-v2/examples/)
    trainer = OPERATOR_CRDS / "kubeflow-trainer-v2" / "examples"
    objs += [d for f in ("runtime-torch_distributed.yaml", "04-volcano-integration.yaml")
             for d in load_manifests(trainer / f) if d.get("kind") == "ClusterTrainingRuntime"]
    cp.apply(objs)
    return Cluster(cp, http, nodes)


# ---- trainadmit on it ---------------------------------------------------------------------------

@dataclass
class Webhook:
    """The running trainadmit server, registered with the apiserver."""

    server: object  # support.server.Server
    policy_dir: Path
    kubeconfig: Path  # deploy/'s ServiceAccount, with a real token: what the server runs as
    phase: str = ""
    phases: dict[str, dict] | None = None  # default: PHASES, with EXTRA_POLICY
    extra: list[dict] | None = None

    def use(self, phase: str) -> object:
        """Serve the policy of ``phase`` (see PHASES); return it once the server serves that generation."""
        phases = self.phases or PHASES
        if self.extra is None:
            write_policy(self.policy_dir, phases[phase], EXTRA_POLICY, REPLACED_POLICY)
        else:
            write_policy(self.policy_dir, phases[phase], self.extra)
        policy = load_policy(self.policy_dir)
        client = self.server.metrics_client(keep_alive=False)  # type: ignore[attr-defined]

        def serving() -> bool:
            import json

            status, body = client.request("GET", "/readyz")
            return status == 200 and json.loads(body).get("generation") == policy.generation

        from support.server import wait_until

        wait_until(serving, 30, f"the server did not load the {phase} policy")
        self.phase = phase
        return policy


def register_webhooks(cp: ControlPlane, port: int, ca_pem: bytes, probe_namespace: str,
                      probe: dict | None = None) -> list[dict]:
    """deploy/base/webhooks.yaml verbatim but for clientConfig; returns when the apiserver calls both.
    The ``probe`` (default: a one-GPU Job) must be matched and admitted by the mutating webhook."""
    configs = cp.register_webhooks(DEPLOY / "webhooks.yaml", f"https://127.0.0.1:{port}", ca_pem)
    probe = probe or {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "probe", "namespace": probe_namespace},
                      "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
                          {"name": "c", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}}
    cp.wait_webhooks_active(probe, WEBHOOK_NAMES, timeout=60)
    return configs


@pytest.fixture(scope="session")
def webhook(control_plane: ControlPlane, cluster: Cluster, tmp_path_factory) -> Iterator[Webhook]:
    from support.server import Server
    from trainadmit.certs import pki

    base = tmp_path_factory.mktemp("trainadmit-on-apiserver")
    certs = base / "certs"
    pki.issue(certs, "trainadmit", SYSTEM_NS, ips=["127.0.0.1"])
    policy_dir = write_policy(base / "policies", PHASES["default"], EXTRA_POLICY, REPLACED_POLICY)
    kubeconfig = control_plane.service_account_kubeconfig(base / "kubeconfig", SYSTEM_NS, "trainadmit")
    server = Server(policy_dir, certs, workers=1, extra=["--cluster-live", "--cluster-max-age", "120",
                                                                 "--graceful-timeout", "1"],
                    env_extra={"KUBECONFIG": str(kubeconfig)})
    configs: list[dict] = []
    try:
        server.wait_ready(timeout=60)  # ready only once the live view synced: every list allowed by deploy/'s RBAC
        configs = register_webhooks(control_plane, server.port, (certs / "ca.crt").read_bytes(), TEAM_NAMESPACES[0])
        hook = Webhook(server, policy_dir, kubeconfig, "default")
        hook.use("default")
        yield hook
    finally:
        for cfg in configs:  # the validating webhook fails closed: never leave it pointing at a stopped server
            control_plane.http.delete(cfg)
        server.stop()


# ---- the outcome tier: the real Job controller and scheduler --------------------------------------

# One control plane with controllers for the outcome tier: 1.36 with native gang scheduling and its
# alpha companions on (the PodGroup topology constraint, the Job controller's own Workloads, preemption
# of whole gangs), as a platform would run it to use trainadmit's native backend (the set JobSet's
# workload-aware-scheduling example runs kind with). Its tests share it (one xdist group).
GANG_FEATURES = ClusterFeatures(
    "gang", feature_gates=("GenericWorkload", "GangScheduling", "TopologyAwareWorkloadScheduling", "WorkloadWithJob",
                           "WorkloadAwarePreemption"),
    runtime_config=("scheduling.k8s.io/v1alpha2=true",))
# The Workload API and native gang scheduling without the alpha topology gate (nor WorkloadWithJob): what a platform
# that turned on 1.36's gang scheduling runs; PodGroups cannot carry the rack (TopologyAwareWorkloadScheduling off)
WORKLOAD_FEATURES = ClusterFeatures("workload-api", feature_gates=("GenericWorkload", "GangScheduling"),
                                    runtime_config=("scheduling.k8s.io/v1alpha2=true",))
# the bundled policies as shipped, with the gates that cluster runs declared as a platform would
WORKLOAD_PHASES: dict[str, dict] = {"bundled": {"featureGates": list(WORKLOAD_FEATURES.feature_gates)}}
OUTCOME = pytest.mark.xdist_group("outcome-gang")
OUTCOME_SKIP_REASON = (f"{ASSETS_ENV} has no kube-scheduler and kube-controller-manager: the outcome tier needs Pods "
                       "made by the real Job controller and bound by the real scheduler (see docs/testing.md)")
# the gates each outcome phase declares in Platform.spec.featureGates: what trainadmit is told the cluster runs
OUTCOME_GATES = ["GenericWorkload", "GangScheduling", "WorkloadWithJob"]
OUTCOME_PHASES: dict[str, dict] = {
    # the PodGroup's topology constraint: the gate declared
    "topology-constraint": {"kubernetesVersion": "1.36", "featureGates": [*OUTCOME_GATES, TOPOLOGY_GATE],
                            **BACKENDS["native-podgroup"]},
    # the same cluster, the gate not declared: trainadmit chooses without the constraint
    "no-topology-gate": {"kubernetesVersion": "1.36", "featureGates": OUTCOME_GATES, **BACKENDS["native-podgroup"]},
    # the platform asks for required pod affinity explicitly
    "pod-affinity": {"kubernetesVersion": "1.36", "featureGates": OUTCOME_GATES,
                     "gang": {**BACKENDS["native-podgroup"]["gang"], "topologyMethod": "podAffinity"}},
    # higher tiers preempt whole gangs of lower ones
    "preemption": {"kubernetesVersion": "1.36", "featureGates": [*OUTCOME_GATES, TOPOLOGY_GATE, "WorkloadAwarePreemption"],
                   "gang": {**BACKENDS["native-podgroup"]["gang"], "disruptionMode": "all"}},
    # the Job controller's own gang (Job.spec.scheduling, 1.37 only) asked for explicitly on this 1.36 cluster
    "job-scheduling": {**BACKENDS["native-job"], "kubernetesVersion": "1.36",
                       "featureGates": [*OUTCOME_GATES, TOPOLOGY_GATE]},
    # policies/ as shipped: everything auto, no gates declared
    "bundled": {},
}


@dataclass
class OutcomeCluster:
    """A control plane with the Job controller and the scheduler, deploy/'s objects, and trainadmit
    registered as deploy/ registers it and running as deploy/ runs it (``serve --cluster-live --reconcile``
    as its ServiceAccount). Nodes are each test's own (tests/support/pool_nodes.py)."""

    cp: SchedulingControlPlane
    webhook: Webhook

    @property
    def http(self) -> KubeHTTP:
        return self.cp.http


def install_deploy_objects(cp: ControlPlane) -> None:
    """What an operator installs before trainadmit (deploy/'s namespace, ServiceAccount, RBAC and
    PriorityClasses verbatim), the Multus CRD and the pools' RDMA networks the policy names."""
    cp.apply(load_manifests(*(DEPLOY / f for f in ("namespace.yaml", "serviceaccount.yaml", "rbac.yaml",
                                                   "priorityclasses.yaml"))))
    cp.install_crds(OPERATOR_CRDS / "multus" / "crds")
    cp.ensure_namespace(SYSTEM_NS)
    policy = load_policy(ROOT / "policies")
    nets = []
    for pool in policy.pools.values():
        for net in pool.rdma.networks if pool.rdma else []:
            ns, _, name = net.rpartition("/")
            cp.ensure_namespace(ns or "default")
            nets.append({"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
                         "metadata": {"name": name.split("@")[0], "namespace": ns or "default"},
                         "spec": {"config": '{"cniVersion": "0.3.1", "type": "ipoib"}'}})
    cp.apply(nets)


PROBE_NS = "team-probe"


def intent_probe() -> dict:
    """A CPU Job with trainadmit intent: matched by both webhooks and admitted even before any GPU node exists
    (a GPU probe is refused by the mutating webhook then, and never reaches the validating one)."""
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "probe", "namespace": PROBE_NS, "labels": {"trainadmit.io/probe": "true"}},
            "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
                {"name": "c", "image": "busybox", "resources": {"limits": {"cpu": "1"}}}]}}}}


def start_trainadmit(cp: ControlPlane, base: Path, phases: dict[str, dict], phase: str,
                     extra_args: tuple[str, ...] = (), extra_policy: list[dict] | None = None,
                     workers: int = 1) -> tuple[Webhook, list[dict]]:
    """``trainadmit serve`` as the deploy/ ServiceAccount, registered with deploy/'s webhook configurations."""
    from support.server import Server
    from trainadmit.certs import pki

    certs = base / "certs"
    pki.issue(certs, "trainadmit", SYSTEM_NS, ips=["127.0.0.1"])
    policy_dir = write_policy(base / "policies", phases[phase], extra_policy or [])
    kubeconfig = cp.service_account_kubeconfig(base / "kubeconfig", SYSTEM_NS, "trainadmit")
    server = Server(policy_dir, certs, workers=workers, extra=["--cluster-live", "--graceful-timeout", "1",
                                                         "--namespace", SYSTEM_NS, *extra_args],
                    env_extra={"KUBECONFIG": str(kubeconfig), "POD_NAME": "trainadmit-outcome"})
    try:
        server.wait_ready(timeout=60)
        cp.ensure_namespace(PROBE_NS)
        configs = register_webhooks(cp, server.port, (certs / "ca.crt").read_bytes(), PROBE_NS, intent_probe())
        hook = Webhook(server, policy_dir, kubeconfig, phases=phases, extra=extra_policy or [])
        hook.use(phase)
    except BaseException:
        server.stop()
        raise
    return hook, configs


def stop_trainadmit(cp: ControlPlane, hook: Webhook, configs: list[dict]) -> None:
    """Unregister first: the validating webhook fails closed, never leave it pointing at a stopped server."""
    for cfg in configs:
        cp.http.delete(cfg)
    hook.server.stop()  # type: ignore[attr-defined]


@contextlib.contextmanager
def trainadmit_on(features, phases: dict[str, dict], phase: str, run_dir: Path, crds: tuple = (),
                  manifests: tuple[Path, ...] = (),
                  reconcile: bool = True) -> Iterator[tuple[SchedulingControlPlane, Webhook]]:
    """A control plane with the scheduler and the controller-manager (``features``: its feature gates), deploy/'s
    objects, ``crds`` and ``manifests`` installed, and trainadmit serving on it with ``--reconcile`` (unless
    ``reconcile`` is false: the test runs its reconcilers itself) under the policy ``phase`` of ``phases``; skipped
    without the scheduler binaries. Webhooks unregistered first at the end."""
    if not os.environ.get(ASSETS_ENV, "").strip():
        pytest.skip(SKIP_REASON)
    if scheduling_assets_from_env() is None:
        pytest.skip(OUTCOME_SKIP_REASON)
    cp = SchedulingControlPlane(features=features, keep_run_dir=os.environ.get("CONTROLPLANE_KEEP_RUN_DIR") == "1")
    cp.start()
    try:
        install_deploy_objects(cp)
        if crds:
            cp.install_crds(*crds)
        if manifests:
            cp.apply(load_manifests(*manifests))
        hook, configs = start_trainadmit(cp, run_dir, phases, phase, ("--reconcile",) if reconcile else ())
        try:
            yield cp, hook
        finally:
            stop_trainadmit(cp, hook, configs)
    finally:
        cp.stop()


@pytest.fixture(scope="session")
def outcome_cluster(tmp_path_factory) -> Iterator[OutcomeCluster]:
    """The outcome tier's control plane and trainadmit on it (skipped without the scheduler binaries)."""
    with trainadmit_on(GANG_FEATURES, OUTCOME_PHASES, "topology-constraint",
                       tmp_path_factory.mktemp("trainadmit-outcome")) as (cp, hook):
        yield OutcomeCluster(cp, hook)
# ---- the webhook away, the reconciler on --------------------------------------------------------

GPU_PROBE = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "absent-probe", "namespace": "team-nlp"},
             "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
                 {"name": "c", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}}


@contextlib.contextmanager
def webhooks_removed(cp: ControlPlane, hook: Webhook):
    """deploy/'s webhook configurations deleted (an outage, or the time before trainadmit was installed)
    until the block ends, then registered again for ``hook``'s server. Returns once the apiserver has
    stopped calling them: a dry-run create of a GPU Job comes back unmutated. (The probes run in team-nlp,
    whose budget is far from reached: a probe refused by /mutate would never reach /validate.)"""
    http = cp.http
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        http.delete({"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind, "metadata": {"name": "trainadmit"}})
    probe_namespace = TEAM_NAMESPACES[0]
    probe = {**GPU_PROBE, "metadata": {**GPU_PROBE["metadata"], "namespace": probe_namespace}}

    def unmutated() -> bool:
        stored = http.create(probe, dry_run=True)
        return "trainadmit.io/applied" not in ((stored.get("metadata") or {}).get("annotations") or {})

    wait_until(unmutated, timeout=30, what="the apiserver to stop calling trainadmit's webhooks")
    try:
        yield
    finally:
        register_webhooks(cp, hook.server.port, (hook.server.cert_dir / "ca.crt").read_bytes(),  # type: ignore[attr-defined]
                          probe_namespace)


def delete_budget_quotas(http: KubeHTTP) -> None:
    """Remove the ResourceQuotas a reconciler materialised: this control plane has no quota controller to
    give them a status, and the apiserver refuses every GPU Pod charged to a quota without one."""
    from trainadmit.cluster.budget import BUDGET_NAME

    for quota in http.list("v1", "ResourceQuota")["items"]:
        if quota["metadata"]["name"] == BUDGET_NAME:
            http.delete({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": quota["metadata"]})


@contextlib.contextmanager
def reconciling_server(cp: ControlPlane, policy_dir: Path, kubeconfig: Path, directory: Path, name: str):
    """`trainadmit serve --reconcile` as deploy/ runs it (deploy/'s ServiceAccount, Pod name ``name``), holding
    the reconciler's Lease; stopped, and its budgets' ResourceQuotas removed, at the end."""
    from support.server import Server, issue_certs
    from trainadmit.cluster.lease import PREFLIGHT_STATUS_LEASE, RECONCILER_LEASE

    http = cp.http
    for lease in (RECONCILER_LEASE, PREFLIGHT_STATUS_LEASE):  # another test's replica may still hold it
        http.delete({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                     "metadata": {"name": lease, "namespace": SYSTEM_NS}})
    server = Server(policy_dir, issue_certs(directory / "certs"), workers=1,
                    extra=["--reconcile", "--namespace", SYSTEM_NS],
                    env_extra={"KUBECONFIG": str(kubeconfig), "POD_NAME": name})
    try:
        server.wait_ready(timeout=60)
        yield server
    finally:
        server.stop()
        delete_budget_quotas(http)
        for lease in (RECONCILER_LEASE, PREFLIGHT_STATUS_LEASE):
            http.delete({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                         "metadata": {"name": lease, "namespace": SYSTEM_NS}})
