"""`check -o sarif` and `-o junit` as CI systems read them, on public manifests, and `--strict` / `--quiet`.

The SARIF reports are validated against OASIS's own SARIF 2.1.0 schema (tests/fixtures/sarif); each
result's line is the line of the offending field in the file as written, read off the files by hand
(tests/fixtures/real-world keeps them byte for byte as their projects publish them)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import jsonschema
import pytest
from support.cli import run_cli
from support.paths import EXAMPLES, FIXTURES

REAL = FIXTURES / "real-world"
PYTORCH = REAL / "kftrainingop-pytorch_job_mnist_nccl.yaml"  # Kubeflow's NCCL example: 1 GPU per worker
SAKKARA = REAL / "schedplugins-sakkara-job-a.yaml"  # scheduler-plugins: 8 x 1 GPU, 128Mi memory
# OCI's SR-IOV VF nccl-test MPIJob (2 x 8 GPUs): admitted, with a warning (a v2beta1 MPIJob cannot join the native gang)
VFS = REAL / "oci-virtual-functions-mpijob-BM.GPU.H100.8.yaml"
EVAL = EXAMPLES / "single-node-eval.yaml"  # admitted; warned about its missing owner label


@pytest.fixture(scope="module")
def sarif_schema():
    schema = json.loads((FIXTURES / "sarif" / "sarif-schema-2.1.0.json").read_text())
    return jsonschema.Draft4Validator(schema, format_checker=jsonschema.FormatChecker())


def sarif(*args: str) -> tuple[int, dict]:
    r = run_cli("check", *args, "-o", "sarif")
    return r.returncode, json.loads(r.stdout)


def located(report: dict) -> list[tuple[str, str, str, int | None]]:
    out = []
    for result in report["runs"][0]["results"]:
        [loc] = result["locations"]
        physical = loc.get("physicalLocation", {})
        out.append((result["ruleId"], result["level"], physical.get("artifactLocation", {}).get("uri"),
                    physical.get("region", {}).get("startLine")))
    return out


def test_sarif_validates_and_places_each_violation_on_the_line_of_its_field(sarif_schema):
    code, report = sarif(str(PYTORCH), str(SAKKARA))
    assert code == 1
    assert list(sarif_schema.iter_errors(report)) == []
    pytorch, sakkara = PYTORCH.relative_to(FIXTURES.parent.parent).as_posix(), \
        SAKKARA.relative_to(FIXTURES.parent.parent).as_posix()
    assert sorted(located(report)) == sorted([
        ("topology.whole-node", "error", pytorch, 21),  # Master's limits: nvidia.com/gpu: 1
        ("topology.whole-node", "error", pytorch, 36),  # Worker's
        # (the bundled policy declares no TopologyAwareWorkloadScheduling: the placement gate holds the rack, no note)
        ("topology.whole-node", "error", sakkara, 27),  # limits: nvidia.com/gpu: "1"
        ("gang.foreign-backend", "warning", sakkara, 11),  # sakkara.group.name: "group-a"
        ("custom.memory-per-gpu", "warning", sakkara, 14),  # containers:
        # no /dev/shm of trainadmit's in a 128Mi container (half of it is the runtime's own 64Mi), so no warning
    ])
    run = report["runs"][0]
    rules = [r["id"] for r in run["tool"]["driver"]["rules"]]
    assert all(rules[r["ruleIndex"]] == r["ruleId"] for r in run["results"])
    assert run["invocations"] == [{"executionSuccessful": True}]
    assert any("PyTorchJob default/pytorch-dist-mnist-nccl: spec.pytorchReplicaSpecs.Worker" in
               r["locations"][0]["logicalLocations"][0]["fullyQualifiedName"] for r in run["results"])


def test_sarif_lines_of_list_items_and_admission_reviews(sarif_schema, tmp_path):
    """A List's item and a review's object sit deeper in their document: the line is still the field's."""
    items = "\n".join("    " + line for line in PYTORCH.read_text().splitlines())
    listed = tmp_path / "list.yaml"
    listed.write_text("apiVersion: v1\nkind: List\nitems:\n  -\n" + items + "\n")
    code, report = sarif(str(listed))
    assert code == 1 and not list(sarif_schema.iter_errors(report))
    # four lines of List head
    assert sorted(line for *_, line in located(report)) == [21 + 4, 36 + 4]


def test_unreadable_input_is_a_failed_invocation_in_sarif(sarif_schema, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: Job\n  metadata: [\n")
    code, report = sarif(str(bad), str(PYTORCH))
    assert code == 2 and not list(sarif_schema.iter_errors(report))
    [invocation] = report["runs"][0]["invocations"]
    assert invocation["executionSuccessful"] is False
    [note] = invocation["toolExecutionNotifications"]
    assert "bad.yaml:2:11: not valid YAML" in note["message"]["text"] and note["level"] == "error"
    assert note["locations"][0]["physicalLocation"]["region"] == {"startLine": 2, "startColumn": 11}
    assert len(report["runs"][0]["results"]) == 2  # the readable file is still checked


def junit(*args: str) -> tuple[int, ET.Element]:
    r = run_cli("check", *args, "-o", "junit")
    return r.returncode, ET.fromstring(r.stdout)


def test_junit_one_testcase_per_object_and_a_failure_per_denial():
    code, root = junit(str(PYTORCH), str(SAKKARA), str(VFS), str(REAL / "jobset-resnet.yaml"))
    assert code == 1
    [suite] = root.findall("testsuite")
    cases = suite.findall("testcase")
    assert len(cases) == 4 and suite.get("tests") == "4"
    by_name = {c.get("name").split(": ", 1)[1]: c for c in cases}
    assert [f.get("type") for f in by_name["PyTorchJob default/pytorch-dist-mnist-nccl"].findall("failure")] == \
        ["topology.whole-node", "topology.whole-node"]
    sakkara = by_name["Job default/job-a-<generated>"]
    assert [f.get("type") for f in sakkara.findall("failure")] == ["topology.whole-node"]
    assert "gang.foreign-backend" in sakkara.find("system-out").text  # a warning is not a failure
    admitted = by_name["MPIJob default/nccl-test"]
    assert admitted.findall("failure") == [] and "gang.unsupported" in admitted.find("system-out").text
    assert by_name["JobSet default/pytorch"].find("skipped") is not None  # no GPU: not matched
    assert suite.get("failures") == "2" and suite.get("skipped") == "1"


def test_strict_fails_on_warnings_in_every_format():
    """examples/single-node-eval.yaml lacks the owner label the custom rule of team namespaces warns about (the user
    adds it): --strict fails on it. OCI's VFs MPIJob is only told that a v2beta1 MPIJob cannot join the cluster's
    native gang (gang.unsupported, a note: the platform's backend): --strict passes it."""
    plain = run_cli("check", str(EVAL))
    assert plain.returncode == 0
    strict = run_cli("check", "--strict", str(EVAL))
    assert strict.returncode == 1
    assert strict.stdout.splitlines()[-1].startswith("1 object: 1 admitted, 0 denied, 0 not matched, "
                                                     "1 failed on warnings (--strict)")
    code, root = junit("--strict", str(EVAL))
    assert code == 1 and [f.get("type") for f in root.iter("failure")] == ["custom.owner-label"]
    noted = run_cli("check", "--strict", str(VFS))
    assert noted.returncode == 0, noted.stdout
    assert "  note [gang.unsupported] metadata: its Pods may start one by one" in noted.stdout
    code, root = junit("--strict", str(VFS))
    assert code == 0 and not list(root.iter("failure"))
    assert "note [gang.unsupported]" in "".join(e.text or "" for e in root.iter("system-out"))


def test_quiet_prints_only_what_failed():
    r = run_cli("check", "--quiet", str(VFS), str(PYTORCH), str(REAL / "jobset-resnet.yaml"))
    assert r.returncode == 1
    heads = [line for line in r.stdout.splitlines() if not line.startswith(" ")]
    assert heads[:-1] == [f"{PYTORCH}#1: PyTorchJob default/pytorch-dist-mnist-nccl: DENIED (2 problems)"]
    assert heads[-1].startswith("3 objects: 1 admitted, 1 denied, 1 not matched")
    strict = run_cli("check", "--quiet", "--strict", str(EVAL), str(VFS))
    assert "Job team-vision/eval-" in strict.stdout and "MPIJob" not in strict.stdout and strict.returncode == 1
    records = json.loads(run_cli("check", "-q", "-o", "json", str(VFS), str(PYTORCH)).stdout)
    assert [r["object"] for r in records] == ["PyTorchJob default/pytorch-dist-mnist-nccl"]


@pytest.mark.parametrize("args, message", [
    (["--quiet", "-o", "yaml"], "--quiet has no meaning with -o yaml"),
    (["--explain", "-o", "sarif"], "--explain shows with -o text, yaml, json, not with -o sarif"),
    (["--explain", "-o", "patch"], "--explain shows with -o text, yaml, json, not with -o patch"),
])
def test_options_an_output_cannot_show_are_refused_not_ignored(args, message):
    r = run_cli("check", *args, str(PYTORCH))
    assert r.returncode == 2 and message in r.stderr and r.stdout == ""
