"""Every name a policy references is checked on every document that names it (issue 32 item 4).

A typo'd fabric on the bundled RDMA pool (`fabric: infiniband-hdr`) is refused by `policy lint`, `policy test`
and `check` alike, as the same typo on the pool without RDMA always was; `policy test` on a policy that does not
load says so (exit 2, no test ran) instead of "0 passed, N failed"; `policy lint -o json|sarif`.
"""

from __future__ import annotations

import json

import pytest
from support.cli import run_cli
from support.manifests import load_yaml
from support.paths import FIXTURES, POLICIES
from support.policies import write_policy

from trainadmit.authoring.lint import lint

MANIFEST = FIXTURES / "real-world" / "k8s-website-indexed-job.yaml"  # public, matched or not: the policy decides


def _pool(name: str, **spec) -> dict:
    [doc] = [d for d in load_yaml(POLICIES / "pools.yaml") if d["metadata"]["name"] == name]
    doc["spec"].update(spec)
    return doc


def _typo(tmp_path, pool: str) -> object:
    return write_policy(tmp_path / "p", replace=[_pool(pool, fabric="infiniband-hdr")])


@pytest.mark.parametrize("pool", ["h100-ib", "l40s-eth"])  # with RDMA resources, and without
def test_a_typod_fabric_is_an_error_on_every_pool(tmp_path, pool):
    policy = _typo(tmp_path, pool)
    findings, _ = lint(policy)
    [finding] = [f for f in findings if f.field == "spec.fabric"]
    assert finding.is_error and finding.file == "pools.yaml" and "'infiniband-hdr'" in finding.message
    lines = (policy / "pools.yaml").read_text().splitlines()
    assert "fabric: infiniband-hdr" in lines[finding.line - 1]  # at the field's own line

    tested = run_cli("policy", "test", str(policy))
    assert tested.returncode == 2 and "does not load" in tested.stderr and "infiniband-hdr" in tested.stderr
    assert "passed" not in tested.stdout and "failed" not in tested.stdout  # no test ran: none failed
    checked = run_cli("check", "-p", str(policy), str(MANIFEST))
    assert checked.returncode == 2 and "infiniband-hdr" in checked.stderr


def test_rdma_pools_sharing_a_fabric_load(tmp_path):
    twin = _pool("h100-ib", fabric="infiniband", default=False)
    twin["metadata"]["name"] = "h100-ib-b"
    policy = write_policy(tmp_path / "p", replace=[_pool("h100-ib", fabric="infiniband")], extra=[twin])
    assert [f for f in lint(policy)[0] if f.is_error] == []


def test_a_typo_among_shared_fabrics_names_the_shared_one(tmp_path):
    twins = []
    for name in ("h100-ib-b", "h100-ib-c"):
        twin = _pool("h100-ib", fabric="infiniband", default=False)
        twin["metadata"]["name"] = name
        twins.append(twin)
    policy = write_policy(tmp_path / "p", replace=[_pool("h100-ib", fabric="infinibnd")], extra=twins)
    [finding] = [f for f in lint(policy)[0] if f.field == "spec.fabric"]
    assert finding.fix.startswith("did you mean infiniband?")


def test_two_tiers_of_one_priority_class(tmp_path):
    [tier] = [d for d in load_yaml(POLICIES / "priorities.yaml") if d["kind"] == "PriorityTier"][:1]
    twin = {**tier, "metadata": {"name": "copy"}}
    [finding] = [f for f in lint(write_policy(tmp_path / "p", extra=[twin]))[0] if f.field == "spec.className"]
    # reported on the one read later (extra.yaml is read before priorities.yaml), naming the first
    assert finding.is_error and finding.file == "priorities.yaml" and "PriorityTier copy" in finding.message


def test_a_fabric_claiming_a_gpu_device_class(tmp_path):
    policy = write_policy(tmp_path / "p", {"fabrics": {"dranet": {"deviceClasses": ["gpu.nvidia.com"]}}})
    [finding] = [f for f in lint(policy)[0] if "deviceClasses" in f.field]
    assert finding.is_error and "gpu.nvidia.com" in finding.message


def test_policy_test_junit_of_a_policy_that_does_not_load(tmp_path):
    r = run_cli("policy", "test", str(_typo(tmp_path, "h100-ib")), "-o", "junit")
    assert r.returncode == 2 and 'errors="1"' in r.stdout and "<failure" not in r.stdout
    assert "infiniband-hdr" in r.stdout


def test_lint_json_lists_every_finding_with_the_exit_code_of_text(tmp_path):
    policy = _typo(tmp_path, "h100-ib")
    text, out = run_cli("policy", "lint", str(policy)), run_cli("policy", "lint", str(policy), "-o", "json")
    assert out.returncode == text.returncode == 1
    report = json.loads(out.stdout)
    assert report["errors"] == 1 and report["generation"] is None
    assert report["findings"][0]["file"] == "pools.yaml" and report["findings"][0]["field"] == "spec.fabric"
    clean = json.loads(run_cli("policy", "lint", str(POLICIES), "-o", "json").stdout)
    assert clean["findings"] == [] and clean["generation"]


def test_lint_sarif_validates_against_the_oasis_schema(tmp_path):
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((FIXTURES / "sarif" / "sarif-schema-2.1.0.json").read_text())
    policy = _typo(tmp_path, "h100-ib")
    (policy / "broken.yaml").write_text("kind: [\n")
    r = run_cli("policy", "lint", str(policy), "-o", "sarif")
    log = json.loads(r.stdout)
    assert list(jsonschema.Draft4Validator(schema, format_checker=jsonschema.FormatChecker()).iter_errors(log)) == []
    assert r.returncode == 2 and log["runs"][0]["invocations"][0]["executionSuccessful"] is False
    [result] = log["runs"][0]["results"]
    line = next(i for i, text in enumerate((policy / "pools.yaml").read_text().splitlines(), 1)
                if "fabric: infiniband-hdr" in text)
    assert result["level"] == "error" and result["locations"][0]["physicalLocation"]["region"]["startLine"] == line
    assert result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"].endswith("p/pools.yaml")


def test_a_platform_that_does_not_load_does_not_make_its_fabrics_missing(tmp_path):
    """The Platform declares the fabric the pool names, and has an error of its own: that error is reported, not
    a missing fabric (the set holds a stand-in Platform, whose fabrics are the defaults)."""
    policy = write_policy(tmp_path / "p", {"fabrics": {"roce": {"resources": ["rdma/roce"]}}, "noPool": "maybe"},
                          replace=[_pool("l40s-eth", fabric="roce")])
    findings = [f for f in lint(policy)[0] if f.is_error]
    assert [f.field for f in findings] == ["spec.noPool"], [str(f) for f in findings]
