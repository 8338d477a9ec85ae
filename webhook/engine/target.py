"""The cluster a decision is for: its Kubernetes version, feature gates and gang backend, chosen once per
decision from the policy and, where the policy says ``auto``, from what the cluster's discovery shows.

Why: a policy that names a version or a gang backend the cluster does not have makes the apiserver drop
the gang fields after admission (a 1.36 apiserver has no ``Job.spec.scheduling``; without the Workload API
it drops ``schedulingGroup``), and a Job then waits or starts without its gang. So:

- ``kubernetesVersion: auto`` is the apiserver's own version (``/version``); a snapshot without it takes the
  version whose native PodGroup API the cluster serves.
- ``gang.backend: auto`` is the first of ``AUTO_ORDER`` the cluster serves: the Workload API of its version
  (native: Kubernetes' own, served only where an administrator turned it on), KAI Scheduler, Volcano,
  scheduler-plugins, Kueue (last: an admission queue, not a scheduler, and it needs a LocalQueue in every
  namespace). None served: no gang, and ``gang.unavailable`` says what to install or enable.
- ``gang.nativeMode: auto`` is ``job-scheduling`` (the Job controller builds the gang from
  ``Job.spec.scheduling``) on 1.37 or newer when ``featureGates`` declares ``WorkloadWithJob``, else
  ``pod-group`` (``schedulingGroup`` plus a PodGroup from trainadmit's reconciler), which every cluster
  serving the Workload API holds. Either way the Job controller of a 1.36 cluster with ``WorkloadWithJob``
  makes no second gang: it leaves a Job whose template names a PodGroup alone.
- An explicit setting is never replaced: one the cluster cannot honour (its API not served, a mode the
  version lacks, another version) is reported (``unhonoured``: serve's startup line, ``/readyz``, a metric)
  and the gang is left out (``unavailable``), which ``gang.unavailable`` turns into a warning or a denial.

Discovery cannot see feature gates of the scheduler and the controller-manager (``GangScheduling``,
``TopologyAwareWorkloadScheduling``, ``WorkloadWithJob``, ``WorkloadAwarePreemption``): those stay what
``featureGates`` declares. A served Workload API implies ``GenericWorkload`` on the apiserver (1.36.2 serves
``scheduling.k8s.io/v1alpha2`` only with the gate and ``--runtime-config``), and the scheduler is taken to run
gangs when the API is served; on 1.36 ``gang.cluster-support`` says that enforcement needs ``GangScheduling``
until the policy declares it. Without a cluster view ``auto`` assumes the newest cluster the engine knows
serving its Workload API (``ASSUMED_VERSION``), so `check` shows a gang; ``assumed`` says so.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..grammars.lazydataclass import dataclass
from ..policy.policyset import (
    BACKEND_QUEUES,
    BACKEND_SCHEDULERS,
    DEFAULT_QUEUE,
    GANG_GATE,
    GANG_GATE_MERGED,
    JOB_SCHEDULING_SINCE,
    NATIVE_PODGROUP_APIS,
    PREEMPTION_GATE,
    TOPOLOGY_GATE,
)
from ..policy.vocab import GangBackend
from .clusterview import Discovered

if TYPE_CHECKING:  # types only: the engine runs on cached policy records too (policy.cache)
    from ..policy.models import PlatformSpec

AUTO = "auto"
ASSUMED_VERSION = (1, 37)  # the newest Kubernetes whose gang fields the engine writes
WORKLOAD_API_GATE = "GenericWorkload"
JOB_GATE = "WorkloadWithJob"
JOB_SCHEDULING = "job-scheduling"
POD_GROUP = "pod-group"


@dataclass(frozen=True)
class Installed:
    """A gang backend installed as CRDs: the group/version (or group) whose presence shows it, and who makes it."""

    api: str  # "scheduling.volcano.sh/v1beta1", or a group without a version ("kueue.x-k8s.io")
    provided_by: str

    def served(self, discovered: Discovered) -> bool:
        return discovered.serves(self.api) if "/" in self.api else discovered.serves_group(self.api)


# the backends other than native, as auto tries them (after native); a name the policy models do not offer yet
# is skipped. KAI shows itself by its scheduling.run.ai group (its Queue v2 and PodGroup v2alpha2 CRDs, versions that
# change between releases); its kai.scheduler group holds only the optional Topology.
INSTALLED: dict[str, Installed] = {
    "kai": Installed("scheduling.run.ai", "KAI Scheduler"),
    "volcano": Installed("scheduling.volcano.sh/v1beta1", "Volcano"),
    "coscheduling": Installed("scheduling.x-k8s.io/v1alpha1", "scheduler-plugins (coscheduling)"),
    "kueue": Installed("kueue.x-k8s.io", "Kueue"),
}
AUTO_ORDER: tuple[str, ...] = ("native", *INSTALLED)


@dataclass(frozen=True)
class Unhonoured:
    """An explicit policy setting the cluster cannot honour: ``setting`` is its name under Platform.spec."""

    setting: str  # kubernetesVersion | gang.backend | gang.nativeMode | featureGates
    message: str


@dataclass(frozen=True)
class Target:
    """The cluster a decision is for (see the module doc). ``backend`` None: no gang backend can be used
    (``unavailable`` says why, ``remedy`` what to install or enable)."""

    version: tuple[int, int] = ASSUMED_VERSION
    version_from: str = "assumed"  # policy | cluster | assumed
    gates: frozenset[str] = frozenset()
    backend: GangBackend | None = GangBackend.native
    native_mode: str = POD_GROUP
    backend_from: str = "assumed"  # policy | cluster | assumed
    scheduler_name: str | None = None
    default_queue: str = DEFAULT_QUEUE  # the queue of a workload that names none: gang.queue, else the backend's own
    podgroup_api: str = NATIVE_PODGROUP_APIS[-1][1]
    podgroup_priority: bool = True  # the cluster keeps a native PodGroup's own priorityClassName
    gaps: tuple[str, ...] = ()  # what the cluster lacks for the backend it uses (gang.cluster-support)
    unavailable: str = ""
    remedy: str = ""
    assumed: str = ""  # what auto assumed for want of a cluster view
    chose: str = ""  # how auto chose, when it did
    unhonoured: tuple[Unhonoured, ...] = ()
    discovered: bool = False

    @property
    def version_text(self) -> str:
        return f"{self.version[0]}.{self.version[1]}"

    @property
    def backend_name(self) -> str:
        """The backend as the provenance names it: ``native/pod-group``, ``volcano``…, ``none``."""
        if self.backend is None:
            return "none"
        return f"native/{self.native_mode}" if self.backend is GangBackend.native else self.backend.value

    def summary(self, git_version: str = "") -> str:
        """One line: the version and gang backend decisions use, and where each came from."""
        seen = f" ({git_version})" if git_version else ""
        line = f"Kubernetes {self.version_text}{seen} ({self.version_from}); gang backend {self.backend_name}"
        if self.chose:
            line += f" ({self.chose})"
        elif self.backend is not None:
            line += f" ({self.backend_from})"
        if self.unavailable:
            line += f": {self.unavailable}"
        return line


def parse_version(text: str) -> tuple[int, int] | None:
    """``"1.36"`` -> (1, 36); ``auto`` -> None."""
    if text == AUTO:
        return None
    major, minor = text.split(".")
    return int(major), int(minor)


def native_api(version: tuple[int, int]) -> str | None:
    """The native PodGroup apiVersion a cluster of ``version`` serves when its Workload API is on, or None."""
    found = None
    for since, api in NATIVE_PODGROUP_APIS:
        if version >= since:
            found = api
    return found


def _version_of_served_api(discovered: Discovered) -> tuple[int, int] | None:
    """For a view without /version: the version whose native PodGroup API the cluster serves."""
    found = None
    for since, api in NATIVE_PODGROUP_APIS:
        if discovered.serves(api):
            found = since
    return found


def enable_native(version: tuple[int, int]) -> str:
    """How a platform turns the Workload API and its gang scheduling on for ``version``."""
    api = native_api(version)
    if api is None:
        return f"upgrade to Kubernetes {NATIVE_PODGROUP_APIS[0][0][0]}.{NATIVE_PODGROUP_APIS[0][0][1]} or newer"
    if version < GANG_GATE_MERGED:
        return (f"start kube-apiserver with --feature-gates={WORKLOAD_API_GATE}=true --runtime-config={api}=true and "
                f"kube-scheduler, kube-controller-manager with --feature-gates={WORKLOAD_API_GATE}=true,"
                f"{GANG_GATE}=true")
    return (f"start kube-apiserver, kube-scheduler and kube-controller-manager with --feature-gates="
            f"{WORKLOAD_API_GATE}=true (beta, off by default) and serve {api} (kube-apiserver --runtime-config="
            f"{api}=true)")


def _others() -> list[str]:
    return [name for name in INSTALLED if name in GangBackend.__members__]


def _none_served(version: tuple[int, int], discovered: Discovered) -> tuple[str, str]:
    """Why and what to do, short enough that kubectl shows all of it (the server bounds a warning's length):
    the bundled default's warning on every stock cluster."""
    api = native_api(version)
    providers = [INSTALLED[name].provided_by.split(" (")[0] for name in _others()]
    native = f"no {api}" if api else "no Workload API (Kubernetes 1.36 or newer)"
    seen = discovered.git_version or discovered.version_text
    message = (f"no gang scheduler is served (Kubernetes {seen}: {native}, no {', '.join(providers[:-1])} or "
               f"{providers[-1]} CRDs)")
    return message, f"{enable_native(version)}; or install one of those"


def choose(platform: PlatformSpec, discovered: Discovered | None) -> Target:
    """The target of a decision under ``platform`` on a cluster that showed ``discovered`` (None: no view)."""
    gang = platform.gang
    declared = frozenset(platform.featureGates)
    auto_backend = gang.backend is GangBackend.auto
    unhonoured: list[Unhonoured] = []
    # ---- the version
    explicit = parse_version(platform.kubernetesVersion)
    seen = None if discovered is None else discovered.version or _version_of_served_api(discovered)
    if discovered is not None and seen is not None:
        version, version_from = seen, "cluster"
        if explicit is not None and explicit != seen:
            unhonoured.append(Unhonoured("kubernetesVersion", f"Platform.spec.kubernetesVersion is "
                                         f"{platform.kubernetesVersion}; the cluster runs {discovered.version_text}: "
                                         "decisions follow the cluster"))
    elif explicit is not None:
        version, version_from = explicit, "policy"
    else:
        version, version_from = ASSUMED_VERSION, "assumed"
    api = native_api(version)
    native_served = None if discovered is None else (api is not None and discovered.serves(api))
    assumed = []
    if discovered is None:
        if explicit is None:
            assumed.append(f"Kubernetes {version[0]}.{version[1]}")
        if auto_backend and api is not None:
            assumed.append(f"its Workload API ({api}) served")
    gates = set(declared)
    if native_served or (discovered is None and auto_backend and api is not None):
        gates.add(WORKLOAD_API_GATE)  # served only with the gate on the apiserver (or assumed so)
    elif discovered is not None and WORKLOAD_API_GATE in declared:
        unhonoured.append(Unhonoured("featureGates", f"Platform.spec.featureGates lists {WORKLOAD_API_GATE}; the "
                                     f"cluster serves no {api or 'native PodGroup API'}, so its Workload API is off"))
    # ---- the backend
    backend: GangBackend | None = None
    chose = unavailable = remedy = ""
    if auto_backend:
        backend_from = "cluster" if discovered is not None else "assumed"
        if discovered is None or native_served:
            backend = GangBackend.native if api is not None else None
            chose = f"gang.backend auto: the cluster serves {api}" if native_served else ""
        else:
            backend = next((GangBackend(name) for name in _others() if INSTALLED[name].served(discovered)), None)
            if backend is not None:
                installed = INSTALLED[backend.value]
                chose = f"gang.backend auto: the cluster serves {installed.api} ({installed.provided_by})"
        if backend is None:
            if discovered is not None:
                unavailable, remedy = _none_served(version, discovered)
            else:
                unavailable, remedy = (f"Kubernetes {version[0]}.{version[1]} has no standalone PodGroup",
                                       enable_native(version))
    else:
        backend, backend_from = GangBackend(gang.backend), "policy"
        if backend is GangBackend.native:
            if api is None:
                unavailable = (f"the native gang needs a standalone PodGroup ({NATIVE_PODGROUP_APIS[0][1]}, "
                               f"Kubernetes 1.36), which Kubernetes {version[0]}.{version[1]} does not have")
                remedy = enable_native(version)
            elif native_served is False:
                unavailable = (f"the native gang needs the Workload API ({api}), which this cluster (Kubernetes "
                               f"{discovered.version_text}) does not serve")  # type: ignore[union-attr]
                remedy = f"{enable_native(version)}; or set Platform.spec.gang.backend: auto"
        elif discovered is not None and not INSTALLED[backend.value].served(discovered):
            installed = INSTALLED[backend.value]
            unavailable = (f"the gang backend {backend.value} needs {installed.api} ({installed.provided_by}), "
                           "which this cluster does not serve")
            remedy = f"install {installed.provided_by}, or set Platform.spec.gang.backend: auto"
        if unavailable:
            if discovered is not None:
                unhonoured.append(Unhonoured("gang.backend", f"Platform.spec.gang.backend is {backend.value}; "
                                             f"{unavailable}"))
            backend = None
    # ---- the native mode
    mode = ""
    if backend is GangBackend.native:
        if gang.nativeMode == AUTO:
            mode = JOB_SCHEDULING if version >= JOB_SCHEDULING_SINCE and JOB_GATE in gates else POD_GROUP
        elif gang.nativeMode == JOB_SCHEDULING and version < JOB_SCHEDULING_SINCE:
            unavailable = (f"nativeMode job-scheduling writes Job.spec.scheduling, which Kubernetes "
                           f"{version[0]}.{version[1]} does not have (it first exists in "
                           f"{JOB_SCHEDULING_SINCE[0]}.{JOB_SCHEDULING_SINCE[1]})")
            remedy = ("set Platform.spec.gang.nativeMode: auto or pod-group (schedulingGroup and a PodGroup from "
                      "trainadmit's reconciler)")
            if version_from == "cluster":
                unhonoured.append(Unhonoured("gang.nativeMode", f"Platform.spec.gang.nativeMode is job-scheduling; "
                                             f"{unavailable}"))
            backend = None
        else:
            mode = gang.nativeMode
    return Target(
        version=version, version_from=version_from, gates=frozenset(gates), backend=backend, native_mode=mode,
        backend_from=backend_from,
        scheduler_name=gang.schedulerName or (BACKEND_SCHEDULERS.get(backend) if backend is not None else None),
        default_queue=gang.queue or (BACKEND_QUEUES.get(backend, DEFAULT_QUEUE) if backend is not None else
                                     DEFAULT_QUEUE),
        podgroup_api=api or NATIVE_PODGROUP_APIS[0][1],
        podgroup_priority=version >= GANG_GATE_MERGED or PREEMPTION_GATE in gates,
        gaps=tuple(_gaps(backend, mode, version, gates, gang.topologyMethod)), unavailable=unavailable,
        remedy=remedy,
        assumed=f"without the cluster's discovery (/version, /apis) auto assumed {' with '.join(assumed)}" if assumed
        else "",
        chose=chose, unhonoured=tuple(unhonoured), discovered=discovered is not None)


def _gaps(backend: GangBackend | None, mode: str, version: tuple[int, int], gates: set[str],
          topology_method: str) -> list[str]:
    """What the cluster lacks, as far as the policy's gates tell, for the native gang it gets."""
    if backend is not GangBackend.native:
        return []
    gaps = []
    needs = [WORKLOAD_API_GATE, *([JOB_GATE] if mode == JOB_SCHEDULING else [])]
    missing = [g for g in needs if g not in gates]
    if missing:
        gaps.append(f"the native gang's fields need feature gate(s) {', '.join(missing)} (off by default): the "
                    "apiserver drops them without")
    if version < GANG_GATE_MERGED and GANG_GATE not in gates:
        gaps.append(f"before Kubernetes 1.37 the scheduler holds a native gang together only with feature gate "
                    f"{GANG_GATE}: without it the Pods may start one by one")
    if topology_method == "native" and TOPOLOGY_GATE not in gates:
        gaps.append(f"native topology constraints need feature gate {TOPOLOGY_GATE}: without it trainadmit adds no "
                    "colocation")
    return gaps
