"""`check --as/--as-group`, usage errors that suggest, inputs that stop parsing as FILE:LINE:COL, short lines for
what is not matched (issue 32 item 5). Each test fails on the main of 2026-12-02.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest
from support.cli import run_cli
from support.paths import EXAMPLES, FIXTURES, POLICIES

from trainadmit.engine import Request, decide, load_policy

# a PyTorchJob worker Pod (controller ownerReference to PyTorchJob mnist) captured as `admin` sent it
WORKER = FIXTURES / "admission-reviews" / "pod-01-mutate-Pod-CREATE.json"
OPERATOR = "system:serviceaccount:kubeflow:training-operator"  # docs/workloads.md: the training operator's account
NAMESPACES = EXAMPLES / "prerequisites" / "1-namespaces.yaml"


def _decisions(*args: str) -> list[dict]:
    r = run_cli("check", str(WORKER), "-o", "json", *args)
    return json.loads(r.stdout)


def test_as_the_operator_leaves_its_pod_alone_as_the_server_does():
    [as_sent] = _decisions()  # the review's own userInfo: admin, who is no controller
    assert as_sent["matched"] and as_sent["allowed"]
    [as_operator] = _decisions("--as", OPERATOR)
    assert not as_operator["matched"]
    assert as_operator["reason"].startswith(f"created by PyTorchJob mnist as {OPERATOR}")
    # the decision the server makes of that request (one decision path: engine.decide)
    review = json.loads(WORKER.read_text())["review"]["request"]
    served = decide(load_policy(POLICIES), Request(review["object"], namespace=review["namespace"],
                                                   user={"username": OPERATOR,
                                                         "groups": ["system:serviceaccounts",
                                                                    "system:serviceaccounts:kubeflow",
                                                                    "system:authenticated"]}))
    assert (served.matched, served.reason) == (False, as_operator["reason"])
    [as_alice] = _decisions("--as", "alice")  # anyone else's request for that Pod is decided as a Pod
    assert as_alice["matched"] and as_alice["allowed"]
    text = run_cli("check", str(WORKER), "--as", OPERATOR).stdout
    assert "not matched (created by PyTorchJob mnist as system:serviceaccount:kubeflow:training-operator)" in text


@pytest.mark.parametrize("user,groups,expected", [
    (OPERATOR, None, ["system:serviceaccounts", "system:serviceaccounts:kubeflow", "system:authenticated"]),
    ("alice", None, ["system:authenticated"]),
    ("alice", ["ml-admins"], ["ml-admins", "system:authenticated"]),
    (OPERATOR, ["ops"], ["ops", "system:authenticated"]),  # groups given: the account's are not added
    ("system:anonymous", None, ["system:unauthenticated"]),
    ("bob", ["system:unauthenticated"], ["system:unauthenticated"]),
])
def test_groups_are_those_the_apiserver_gives_an_impersonated_user(user, groups, expected):
    """Each expectation is what `kubectl auth whoami --as USER [--as-group G]` printed on kube-apiserver v1.36.2
    (/work/k8s-assets, 2026-12-02; system:anonymous and system:unauthenticated bound to create
    selfsubjectreviews for the purpose)."""
    from trainadmit.cli.check import requester

    assert requester(user, groups) == {"username": user, "groups": expected}


def test_as_group_decides_with_that_group(tmp_path):
    from support.policies import write_policy

    policy = write_policy(tmp_path / "p", {"exemptGroups": ["break-glass"]})
    [d] = json.loads(run_cli("check", "-p", str(policy), str(WORKER), "-o", "json", "--as", "carol",
                             "--as-group", "break-glass").stdout)
    assert not d["matched"] and d["reason"].startswith("group break-glass is exempt")


@pytest.mark.parametrize("args", [["--as-group", "x"], ["--as", " "]])
def test_as_misused_is_a_usage_error(args):
    r = run_cli("check", str(WORKER), *args)
    assert r.returncode == 2 and r.stdout == "" and len(r.stderr.splitlines()) == 1
    assert r.stderr.startswith("trainadmit check: --as")


@pytest.mark.parametrize("args,near,prog", [
    (["chek", str(WORKER)], "did you mean check?", "trainadmit"),
    (["policy", "lnt"], "did you mean lint?", "trainadmit policy"),
    (["check", "--strcit", str(WORKER)], "did you mean --strict?", "trainadmit check"),
    (["check", str(WORKER), "-o", "jsn"], "did you mean json?", "trainadmit check"),
    (["policy", "lint", "--stirct"], "did you mean --strict?", "trainadmit policy lint"),
])
def test_a_mistyped_command_or_option_suggests_the_nearest(args, near, prog):
    r = run_cli(*args)
    assert r.returncode == 2 and r.stdout == ""
    [line] = r.stderr.splitlines()
    assert line.startswith(f"{prog}: ") and near in line and line.endswith(f"(see: {prog} --help)")


def test_nothing_near_suggests_nothing():
    [line] = run_cli("check", "--zzzzzz", str(WORKER)).stderr.splitlines()
    assert "did you mean" not in line and "--zzzzzz" in line


@pytest.mark.parametrize("name,content,says", [
    ("bad.yaml", "kind: Job\n  metadata: [\n", "bad.yaml:2:11: not valid YAML: mapping values are not allowed"),
    ("bad.json", '{"apiVersion": "v1",\n "kind": "Job" "x"}\n', "bad.json:2:16: not valid JSON: Expecting ',' delimiter"),
])
def test_an_input_that_does_not_parse_is_file_line_col(tmp_path, name, content, says):
    bad = tmp_path / name
    bad.write_text(content)
    r = run_cli("check", str(bad))
    assert r.returncode == 2
    [line] = r.stderr.splitlines()
    assert line.startswith(f"{bad}:") and says in line  # FILE:LINE:COL first, as compilers print it
    assert "<unicode string>" not in line
    junit = ET.fromstring(run_cli("check", str(bad), "-o", "junit").stdout)
    [case] = junit.iter("testcase")
    position = says.split(": ", 1)[0].removeprefix(name)
    assert case.get("name") == f"{bad}{position}"  # whole: file and position, never a cut message
    assert case.find("error").get("message") == line


def test_a_policy_file_that_does_not_parse_is_file_line_col(tmp_path):
    from support.policies import write_policy

    policy = write_policy(tmp_path / "p")
    (policy / "broken.yaml").write_text("kind: [\n")
    r = run_cli("policy", "lint", str(policy))
    assert r.returncode == 2 and r.stdout.startswith("broken.yaml:2:1: error: not valid YAML: ")
    assert "<unicode string>" not in r.stdout + r.stderr


def test_cluster_scoped_objects_have_no_namespace_and_not_matched_is_one_short_line():
    r = run_cli("check", str(NAMESPACES))
    lines = r.stdout.splitlines()
    assert lines[:2] == [f"{NAMESPACES}#1: Namespace team-nlp: not matched (kind v1/Namespace is left alone)",
                         f"{NAMESPACES}#2: Namespace team-vision: not matched (kind v1/Namespace is left alone)"]
    records = json.loads(run_cli("check", str(NAMESPACES), "-o", "json").stdout)
    assert [d["object"] for d in records] == ["Namespace team-nlp", "Namespace team-vision"]
    assert all("trainadmit decides on" in d["reason"] for d in records)  # the whole reason stays in the data
    explained = run_cli("check", str(NAMESPACES), "--explain").stdout.splitlines()
    assert explained[1].strip().startswith("kind v1/Namespace is left alone: trainadmit decides on")
    stream = run_cli("check", str(NAMESPACES), "--explain", "-o", "yaml").stdout.splitlines()
    assert stream[0].startswith("# ") and stream[1].startswith("# kind v1/Namespace is left alone: trainadmit")
    assert stream[2] == "apiVersion: v1"  # the reason is comment lines, never an escaped line break


def test_quiet_hides_what_is_not_matched():
    r = run_cli("check", str(EXAMPLES / "cpu-preprocessing.yaml"), str(NAMESPACES), "--quiet")
    [summary] = r.stdout.splitlines()  # the summary alone still counts them
    assert r.returncode == 0 and summary.startswith("3 objects: 0 admitted, 0 denied, 3 not matched")
