"""What the server says about the cluster it runs against: at startup, on ``/readyz`` and in ``/metrics``.

A setting the cluster cannot honour (a version it does not run, a gang backend it does not serve) used to
show only as every GPU Job refused at ``/validate``. Now decisions follow ``gang.unavailable`` for it, and the
platform team learns it three ways from one computation (``engine.target.choose`` on the policy and the
cluster's discovery, the same the decisions make): one log line per such setting when ``serve`` starts,
naming the setting and what the cluster serves; the ``cluster`` detail of ``/readyz``; and the gauge
``trainadmit_policy_setting_unhonoured{setting}``. Without a cluster view the line says what ``auto`` assumes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..engine.clusterview import ClusterView, Discovered
from ..engine.target import POD_GROUP, Target, choose
from ..policy.vocab import GangBackend
from .logs import emit

if TYPE_CHECKING:
    from ..policy import PolicySet

# the settings an unhonoured report can name (the gauge's label values: a closed set)
SETTINGS = ("kubernetesVersion", "gang.backend", "gang.nativeMode", "featureGates")


def target_of(policy: PolicySet, cluster: ClusterView | None) -> tuple[Target, Discovered | None]:
    discovered = cluster.discovered() if cluster is not None else None
    return choose(policy.platform, discovered), discovered


def detail(policy: PolicySet, cluster: ClusterView | None) -> dict[str, Any]:
    """``/readyz``'s ``cluster`` field: the version and gang backend decisions use, and what cannot be honoured."""
    target, discovered = target_of(policy, cluster)
    body: dict[str, Any] = {"kubernetesVersion": target.version_text, "versionFrom": target.version_from,
                            "gangBackend": target.backend_name, "summary": target.summary(
                                discovered.git_version if discovered else "")}
    if target.unhonoured:
        body["unhonoured"] = [{"setting": u.setting, "message": u.message} for u in target.unhonoured]
    if target.assumed:
        body["assumed"] = target.assumed
    return body


def startup(policy: PolicySet, discovered: Discovered | None, reconcile: bool, viewed: bool) -> None:
    """The lines ``serve`` writes before it listens: the cluster it decides for, each setting it cannot honour
    (one line each, naming the setting and what the cluster serves), and a gang backend that needs the
    reconciler it was not asked to run."""
    target = choose(policy.platform, discovered)
    emit("cluster", message=target.summary(discovered.git_version if discovered else ""),
         kubernetes_version=target.version_text, gang_backend=target.backend_name,
         **({"assumed": target.assumed} if target.assumed else {}),
         **({} if viewed else {"note": "no cluster view (--cluster-live or --cluster): auto cannot see the cluster"}))
    for unhonoured in target.unhonoured:
        emit("setting_unhonoured", setting=f"Platform.spec.{unhonoured.setting}", message=unhonoured.message)
    needs_reconciler = (target.backend is GangBackend.coscheduling
                        or (target.backend is GangBackend.native and target.native_mode == POD_GROUP))
    if needs_reconciler and not reconcile:
        emit("setting_unhonoured", setting="--reconcile",
             message=f"gang backend {target.backend_name} gets its PodGroups from the reconciler, and serve runs "
                     "without --reconcile: gang Pods wait for a PodGroup nobody creates")


def discover(log) -> Discovered | None:
    """The cluster's discovery, read once for the startup lines (the workers' live views read their own);
    None, after one line, when it cannot be read."""
    from kubernetes import client

    from ..cluster.discovery import read
    from ..cluster.kube import load_config

    try:
        load_config()
        served, version, git_version = read(client.ApiClient(), lambda func, *a, **kw: func(*a, **kw))
    except Exception as exc:  # unreachable, refused, timed out: the live views retry on their own
        log(f"cannot read the cluster's /version and /apis yet ({type(exc).__name__}: {str(exc)[:200]}); "
            "decisions wait for the live view")
        return None
    return Discovered(version, git_version, frozenset(served))
