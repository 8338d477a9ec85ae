"""The report judge trusts trainadmit's provenance on a stored Pod only where a LeaderWorkerSet made its StatefulSet
(issue 33: "the report judge still trusts pre-fence forged StatefulSets").

The stored objects are what LWS's controller and the StatefulSet controller make from LWS's own vLLM example
(tests/fixtures/operators/lws/examples/vllm-gpu-lws.yaml, as tests/engine/test_provenance.py uses it) in team-nlp:
the leaders' StatefulSet ``vllm`` controlled by the LeaderWorkerSet, its leader Pod ``vllm-0``, the group's workers'
StatefulSet ``vllm-0`` controlled by that leader Pod (LWS's pod controller makes it so), and its worker Pod
``vllm-0-1``; each Pod carries the provenance annotation its StatefulSet's template has. Beside them, a StatefulSet
``forged`` a namespace user created with the same worker template and the annotation before the webhooks and the
fence existed (``final.forged-provenance`` refuses it now), and its Pod ``forged-0``, made by the StatefulSet
controller and never sent to trainadmit.

Expected by hand: the LWS's Pods are children of a workload trainadmit decided (skipped: the LWS is what is
judged); the forged one is decided as the GPU Pod it is, and was never admitted: it lacks what the policy sets (the
pool's placement first of all) and is warned ``final.not-admitted``. On main both Pods were skipped."""

from __future__ import annotations

import copy
import json

import pytest
from support.cli import run_cli
from support.manifests import load_yaml
from support.paths import FIXTURES, POLICIES

from trainadmit.cluster.judge import Status, judge
from trainadmit.cluster.owners import StoredOwners
from trainadmit.engine import load_policy

LWS_EXAMPLE = FIXTURES / "operators" / "lws" / "examples" / "vllm-gpu-lws.yaml"
NS = "team-nlp"
APPLIED = "trainadmit.io/applied"


def _ref(owner: dict) -> dict:
    meta = owner["metadata"]
    return {"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": meta["name"], "uid": meta["uid"],
            "controller": True, "blockOwnerDeletion": True}


def _uid(name: str) -> str:
    return f"00000000-0000-4000-8000-{sum(map(ord, name)):012d}"


def _statefulset(name: str, owner: dict | None, template: dict) -> dict:
    template = copy.deepcopy(template)
    template.setdefault("metadata", {}).setdefault("annotations", {})[APPLIED] = "{}"
    meta: dict = {"name": name, "namespace": NS, "uid": _uid(name)}
    if owner is not None:
        meta["ownerReferences"] = [_ref(owner)]
    return {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": meta,
            "spec": {"replicas": 1, "serviceName": "vllm", "template": template}}


def _pod(name: str, statefulset: dict) -> dict:
    template = statefulset["spec"]["template"]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {**copy.deepcopy(template["metadata"]), "name": name, "namespace": NS, "uid": _uid(name),
                         "ownerReferences": [_ref(statefulset)]},
            "spec": copy.deepcopy(template["spec"])}


@pytest.fixture(scope="module")
def stored() -> dict[str, dict]:
    [lws] = [d for d in load_yaml(LWS_EXAMPLE) if d.get("kind") == "LeaderWorkerSet"]
    lws = copy.deepcopy(lws)
    lws["metadata"].update(namespace=NS, uid=_uid("lws"))
    templates = lws["spec"]["leaderWorkerTemplate"]
    leaders = _statefulset("vllm", lws, templates["leaderTemplate"])
    leader = _pod("vllm-0", leaders)
    workers = _statefulset("vllm-0", leader, templates["workerTemplate"])
    forged = _statefulset("forged", None, templates["workerTemplate"])
    return {"lws": lws, "leaders": leaders, "leader": leader, "workers": workers, "worker": _pod("vllm-0-1", workers),
            "forged-sts": forged, "forged": _pod("forged-0", forged)}


def test_a_pod_of_a_statefulset_no_leaderworkerset_made_is_decided(stored):
    policy = load_policy(POLICIES)
    owners = StoredOwners(lambda: stored.values())
    for name in ("leader", "worker"):
        verdict = judge(policy, stored[name], owners=owners)
        assert verdict.status is Status.skipped, (name, verdict.decision.reason)
        assert "from a pod template trainadmit already decided" in verdict.decision.reason
    verdict = judge(policy, stored["forged"], owners=owners)
    assert verdict.status is Status.changes, verdict.decision.reason
    assert "spec.nodeSelector" in [c.path for c in verdict.changes]  # the pool's placement it never got
    assert [w.rule for w in verdict.decision.warnings] == ["final.not-admitted"]


def test_an_owner_that_cannot_be_found_vouches_for_nothing(stored):
    """Without the stored StatefulSets (the reports writer sees no Pods; a list that lacks them), or with a
    StatefulSet of the same name but another uid, the Pods are decided one by one: never trusted by default."""
    policy = load_policy(POLICIES)
    assert judge(policy, stored["worker"]).status is Status.changes
    impostor = copy.deepcopy(stored["workers"])
    impostor["metadata"]["uid"] = _uid("someone else's")
    owners = StoredOwners(lambda: [*(o for k, o in stored.items() if k != "workers"), impostor])
    assert judge(policy, stored["worker"], owners=owners).status is Status.changes
    # a StatefulSet owned by a Pod that no StatefulSet of a LeaderWorkerSet made is no group's workers' either
    orphan = copy.deepcopy(stored["leader"])
    del orphan["metadata"]["ownerReferences"]
    owners = StoredOwners(lambda: [*(o for k, o in stored.items() if k != "leader"), orphan])
    assert judge(policy, stored["worker"], owners=owners).status is Status.changes


def test_audit_of_saved_lists_reports_the_forged_statefulsets_pod(stored, tmp_path):
    path = tmp_path / "stored.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": list(stored.values())}))
    result = run_cli("audit", str(path), "-p", str(POLICIES), "-o", "json")
    assert result.returncode in (0, 1), result.stderr
    judged = {w["object"]: w for w in json.loads(result.stdout)["workloads"]}
    assert judged["Pod team-nlp/forged-0"]["status"] == "changes"
    assert "Pod team-nlp/vllm-0-1" not in judged and "Pod team-nlp/vllm-0" not in judged
