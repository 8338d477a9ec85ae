"""What the server cannot honour, in the app of one worker (in-process, Flask's test client), and what it counts.

- A server whose reconciler does not work (``serve`` without ``--reconcile``; one whose elected loop reports a
  configuration failure, as ``server.elected`` writes it into the controller status) under a policy whose gangs
  need it: ``/readyz`` 200 ``degraded`` naming it, the gauge's ``reconciler`` setting 1, and the warning
  ``reconciler.missing`` on the affected workload (the captured review of tests/fixtures/admission-reviews:
  a 4 x 8-GPU gang Job, as a real kube-apiserver 1.36.2 sent it).
- One submission is counted once: its ``/mutate`` answer, a reinvocation of it and its ``/validate`` answer
  carry the same warnings, and ``trainadmit_warnings_total`` goes up by one per rule.
- The main process's log: one ``setting_unhonoured`` line at start, one when a setting becomes unhonoured or
  honoured again, nothing while nothing changes.
"""

from __future__ import annotations

import base64
import json

import pytest
from prometheus_client import REGISTRY
from support.manifests import review
from support.patches import apply_patch
from support.paths import POLICIES
from support.policies import BACKENDS, write_policy

from trainadmit.engine import load_policy
from trainadmit.engine.clusterview import Discovered
from trainadmit.server import cluster_report
from trainadmit.server.app import create_apps
from trainadmit.server.controller_status import ControllerStatus
from trainadmit.server.settings import ServerSettings, replace

CAPTURED = "job-03-mutate-Job-CREATE.json"
PROBLEM = ("not allowed to use the Lease trainadmit-system/trainadmit-reconciler: grant get and update on "
           "leases.coordination.k8s.io named trainadmit-reconciler, and create on leases, in namespace "
           "trainadmit-system (leases.coordination.k8s.io is forbidden)")


class _Apps:
    """One worker's two apps: reviews POSTed to the admission app, GETs (/readyz's detail, /metrics) to the
    metrics app, as the two listeners serve them."""

    def __init__(self, apps) -> None:
        self.admission, self.metrics = apps.admission.test_client(), apps.metrics.test_client()

    def post(self, *args, **kw):
        return self.admission.post(*args, **kw)

    def get(self, *args, **kw):
        return self.metrics.get(*args, **kw)


def app_of(policy_dir, reconcile: bool, status: ControllerStatus | None = None) -> _Apps:
    settings = replace(ServerSettings(), app={"policy_dir": str(policy_dir), "reload_interval": 3600},
                       controllers={"reconcile": reconcile})
    return _Apps(create_apps(settings, status))


def gauge(client, setting: str) -> float:
    text = client.get("/metrics").get_data(as_text=True)
    line = next(x for x in text.splitlines() if x.startswith(f'trainadmit_policy_setting_unhonoured{{setting="{setting}"}}'))
    return float(line.rsplit(" ", 1)[1])


def post(client, path: str, body: dict) -> dict:
    return client.post(path, data=json.dumps(body), content_type="application/json").get_json()["response"]


@pytest.fixture(autouse=True)
def _in_process_metrics(monkeypatch):
    """This process's own metrics (another test's in-process `serve` may have left the multi-process variable)."""
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)


@pytest.fixture(scope="module")
def podgroup_policy(tmp_path_factory):
    return write_policy(tmp_path_factory.mktemp("native-podgroup"), BACKENDS["native-podgroup"])


def test_without_reconcile_the_server_is_degraded_counts_it_and_warns_the_workload(podgroup_policy):
    client = app_of(podgroup_policy, reconcile=False)
    ready = client.get("/readyz")
    body = ready.get_json()
    assert ready.status_code == 200 and body["status"] == "degraded"
    [line] = body["degraded"]
    assert line.startswith("unhonoured reconciler: gang backend native/pod-group gets its PodGroups from "
                           "trainadmit's reconciler, and serve runs without --reconcile")
    assert [u["setting"] for u in body["cluster"]["unhonoured"]] == ["reconciler"]
    assert gauge(client, "reconciler") == 1.0 and gauge(client, "gang.backend") == 0.0
    warnings = post(client, "/mutate", review(CAPTURED))["warnings"]
    assert any(w.startswith("trainadmit [reconciler.missing] metadata: its PodGroup llama-pretrain-gang ") and
               "serve runs without --reconcile" in w for w in warnings), warnings


def test_a_reconciler_refused_its_lease_is_named_and_a_working_one_is_not(podgroup_policy):
    status = ControllerStatus(["reconciler", "preflight-status"])
    client = app_of(podgroup_policy, reconcile=True, status=status)
    assert client.get("/readyz").get_json()["status"] == "ready" and gauge(client, "reconciler") == 0.0
    assert not any("reconciler.missing" in w for w in post(client, "/mutate", review(CAPTURED)).get("warnings", []))
    status.set("reconciler", PROBLEM)  # what the elected loop writes on a 403
    body = client.get("/readyz").get_json()
    assert body["status"] == "degraded" and f"reconciler: {PROBLEM}" in body["degraded"]
    assert gauge(client, "reconciler") == 1.0
    warnings = post(client, "/mutate", review(CAPTURED))["warnings"]  # the same shape: the cache asks again
    assert any("[reconciler.missing]" in w and f"its reconciler cannot work ({PROBLEM})" in w for w in warnings)


def _count(rule: str) -> float:
    return REGISTRY.get_sample_value("trainadmit_warnings_total", {"rule": rule}) or 0.0


def test_one_submission_is_counted_once_however_often_it_is_asked(podgroup_policy):
    client = app_of(podgroup_policy, reconcile=False)
    before = _count("reconciler.missing")
    created = review(CAPTURED)
    mutated = post(client, "/mutate", created)
    post(client, "/mutate", created)  # reinvocationPolicy: IfNeeded
    final = json.loads(json.dumps(created))
    final["request"]["object"] = apply_patch(created["request"]["object"],
                                             json.loads(base64.b64decode(mutated["patch"])))
    validated = post(client, "/validate", final)
    assert validated["allowed"] and any("[reconciler.missing]" in w for w in validated["warnings"])
    assert _count("reconciler.missing") == before + 1


def test_the_log_says_each_setting_at_start_and_on_change(capsys, podgroup_policy):
    policy = load_policy(podgroup_policy)
    volcano = load_policy(write_policy(podgroup_policy.parent / "volcano", BACKENDS["volcano"]))
    apis = Discovered((1, 36), "v1.36.2", frozenset({"v1", "batch/v1", "scheduling.k8s.io/v1alpha2"}))
    state = {"policy": policy, "why": None}
    monitor = cluster_report.Monitor(lambda: state["policy"], lambda: apis, lambda: state["why"], viewed=True)

    def lines() -> list[dict]:
        out = [json.loads(x) for x in capsys.readouterr().err.splitlines() if x.startswith("{")]
        return [x for x in out if x["event"] in ("cluster", "setting_unhonoured", "setting_honoured")]

    monitor.step()
    [cluster] = lines()
    assert cluster["event"] == "cluster" and cluster["gang_backend"] == "native/pod-group"
    monitor.step()
    assert lines() == []
    state["why"] = "its reconciler cannot work (Lease refused)"
    monitor.step()
    monitor.step()
    [said] = lines()
    assert (said["event"], said["setting"]) == ("setting_unhonoured", "--reconcile")
    assert "its reconciler cannot work (Lease refused)" in said["message"]
    state["why"] = None
    monitor.step()
    [honoured] = lines()
    assert (honoured["event"], honoured["setting"]) == ("setting_honoured", "--reconcile")
    state["policy"] = volcano  # Volcano's CRDs are not served: the backend cannot be honoured, the cluster line too
    monitor.step()
    changed, unhonoured = lines()
    assert changed["event"] == "cluster" and changed["changed"] is True and changed["gang_backend"] == "none"
    assert (unhonoured["event"], unhonoured["setting"]) == ("setting_unhonoured", "Platform.spec.gang.backend")


def test_the_bundled_policy_on_a_cluster_with_no_gang_backend_needs_no_reconciler():
    """auto on a stock 1.36 (no Workload API, no gang CRDs): no gang, so nothing waits for a reconciler."""
    policy = load_policy(POLICIES)
    stock = Discovered((1, 36), "v1.36.2", frozenset({"v1", "batch/v1"}))
    target = cluster_report.choose(policy.platform, stock)
    assert cluster_report.unhonoured(policy, target, "serve runs without --reconcile") == []


def test_the_platform_learns_its_notes_once_on_readyz_and_in_the_log(capsys, podgroup_policy):
    """The native pod-group backend on a 1.36 serving the Workload API, GangScheduling not declared among the
    policy's feature gates: every gang is told gang.cluster-support as a note (only the platform changes it); the platform is told once, in the
    main process's log at start (not again while nothing changes) and in ``/readyz``'s ``cluster.notes``."""
    policy = load_policy(podgroup_policy)
    apis = Discovered((1, 36), "v1.36.2", frozenset({"v1", "batch/v1", "scheduling.k8s.io/v1alpha2"}))
    monitor = cluster_report.Monitor(lambda: policy, lambda: apis, lambda: None, viewed=True)

    def notes() -> list[dict]:
        out = [json.loads(x) for x in capsys.readouterr().err.splitlines() if x.startswith("{")]
        return [x for x in out if x["event"] == "platform_note"]

    monitor.step()
    said = notes()
    assert [x["rule"] for x in said] == ["gang.cluster-support"] and "GangScheduling" in said[0]["message"]
    monitor.step()
    assert notes() == []
    body = app_of(podgroup_policy, reconcile=True).get("/readyz").get_json()
    assert [n["rule"] for n in body["cluster"].get("notes", [])] == ["gang.cluster-support"], body
    assert body["status"] == "ready"  # a note is no reason to be degraded: nothing the server cannot honour
