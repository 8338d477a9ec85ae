"""`trainadmit check` speaks UPDATE: a captured AdmissionReview is decided as the server decides that
operation (an UPDATE by /validate), and `--old FILE` turns objects into UPDATEs of the stored ones."""

from __future__ import annotations

import copy
import json

from support.builders import job
from support.cli import run_cli
from support.manifests import review
from support.paths import POLICIES


def _scaled_review() -> dict:
    """The captured /validate UPDATE (kubectl patch of parallelism), scaled to 40 workers of 8 GPUs."""
    body = copy.deepcopy(review("job-10-validate-Job-UPDATE.json"))
    obj = body["request"]["object"]
    obj["spec"]["parallelism"] = 40
    obj["spec"]["template"]["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "8"}}
    body["request"]["oldObject"]["spec"]["template"]["spec"]["containers"][0]["resources"] = {
        "limits": {"nvidia.com/gpu": "8"}}
    return body


def test_a_captured_update_gets_the_servers_decision(server, tmp_path):
    body = _scaled_review()
    status, reply = server.client().post_review("/validate", body)
    assert status == 200 and reply["response"]["allowed"] is False
    src = tmp_path / "review.json"
    src.write_text(json.dumps(body))
    r = run_cli("check", str(src), "-p", str(POLICIES), "-o", "json")
    assert r.returncode == 1, r.stdout + r.stderr
    [record] = json.loads(r.stdout)
    assert {v["rule"] for v in record["violations"]} >= {"quota.workers-per-job", "quota.gpus-per-job",
                                                         "quota.namespace-hard"}
    for v in record["violations"]:
        assert f"[{v['rule']}] {v['path']}: {v['message']}" in reply["response"]["status"]["message"]
    assert len(record["violations"]) == reply["response"]["status"]["message"].count("; [") + 1


def test_old_and_new_objects_make_an_update(tmp_path):
    old, new = job(name="scale", workers=2), job(name="scale", workers=40)
    (tmp_path / "old.yaml").write_text(json.dumps(old))
    (tmp_path / "new.yaml").write_text(json.dumps(new))
    r = run_cli("check", str(tmp_path / "new.yaml"), "--old", str(tmp_path / "old.yaml"), "-p", str(POLICIES))
    assert r.returncode == 1 and "quota.workers-per-job" in r.stdout
    assert run_cli("check", str(tmp_path / "new.yaml"), "-p", str(POLICIES)).returncode == 1  # a CREATE: denied too
    same = run_cli("check", str(tmp_path / "old.yaml"), "--old", str(tmp_path / "old.yaml"), "-p", str(POLICIES))
    assert same.returncode == 0, same.stdout  # an UPDATE that adds no GPUs passes
    other = job(name="another", workers=2)
    (tmp_path / "other.yaml").write_text(json.dumps(other))
    r = run_cli("check", str(tmp_path / "other.yaml"), "--old", str(tmp_path / "old.yaml"), "-p", str(POLICIES))
    assert r.returncode == 2 and "--old has no object matching Job team-nlp/another" in r.stderr
