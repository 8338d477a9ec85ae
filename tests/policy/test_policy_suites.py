"""Policy test suites have a schema of their own: a typo'd key, a case without an object or without
a decision fails `policy test` and `policy lint` with the key and its line; quantities compare as
quantities; a copy of the bundled set stands alone."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import yaml
from support.cli import run_cli
from support.paths import POLICIES
from support.policies import write_policy

from trainadmit.authoring.lint import lint
from trainadmit.authoring.testrunner import same_value

JOB = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "t", "namespace": "research"},
       "spec": {"parallelism": 2, "completions": 2, "completionMode": "Indexed",
                "template": {"spec": {"restartPolicy": "Never", "containers": [
                    {"name": "t", "image": "x", "resources": {"limits": {"nvidia.com/gpu": 8}}}]}}}}

TYPOS = """\
apiVersion: trainadmit.io/v1alpha1
kind: PolicyTest
metadata: {name: typos}
cases:
- name: typo'd keys
  objcet: {apiVersion: batch/v1, kind: Job, metadata: {name: a}}
  expect:
    alowed: true
    denails: [topology.whole-node]
- name: no object
  expect: {allowed: true}
- name: a rule id typo
  object: {apiVersion: batch/v1, kind: Job, metadata: {name: b}}
  expect: {allowed: true, warnings: [custom.owner-labl]}
"""

# (field, line in TYPOS, fix)
EXPECTED = [
    ("cases[0].objcet", 6, "did you mean object?"),
    ("cases[0].expect.allowed", 7, None),
    ("cases[0].expect.alowed", 8, "did you mean allowed?"),
    ("cases[0].expect.denails", 9, "did you mean denials?"),
    ("cases[1]", 10, None),
    ("cases[2].expect.warnings[0]", 14, "did you mean custom.owner-label?"),
]


@pytest.fixture
def with_typos(tmp_path):
    d = write_policy(tmp_path / "p")
    (d / "tests").mkdir()
    (d / "tests" / "typos.test.yaml").write_text(TYPOS)
    return d


def test_typod_keys_fail_lint_with_key_line_and_fix(with_typos):
    findings, unreadable = lint(with_typos)
    assert not unreadable
    got = [(f.field, f.line, f.fix) for f in findings if f.file == "tests/typos.test.yaml"]
    assert [(field, line) for field, line, _ in got] == [(field, line) for field, line, _ in EXPECTED]
    for (_, _, fix), (_, _, want) in zip(got, EXPECTED, strict=True):
        assert fix and (want is None or fix == want)
    assert all(f.is_error for f in findings)
    r = run_cli("policy", "lint", str(with_typos))
    assert r.returncode == 1 and "tests/typos.test.yaml:8: error: cases[0].expect.alowed" in r.stdout


def test_a_whole_case_error_points_to_the_case_reference(with_typos):
    """A model validator's error has no field of its own: the fix names the model's reference section."""
    findings, _ = lint(with_typos)
    whole = [f for f in findings if f.field == "cases[1]"]
    assert [f.fix for f in whole] == ["see Case in the Reference section of docs/policies.md"]
    assert "### Case" in (POLICIES.parent / "docs" / "policies.md").read_text()


def test_typod_keys_fail_policy_test_and_the_good_cases_still_run(with_typos):
    r = run_cli("policy", "test", str(with_typos))
    assert r.returncode == 1
    for field, line, _ in EXPECTED:
        assert f"tests/typos.test.yaml:{line} (document 1): {field}:" in r.stdout, r.stdout
    assert "a case sends exactly one object" in r.stdout
    assert "6 suite errors" in r.stdout and "typo'd keys" not in r.stdout  # a bad case is an error, never a pass
    junit = run_cli("policy", "test", str(with_typos), "-o", "junit").stdout
    assert junit.count("<error") == 6 and 'errors="6"' in junit
    names = re.findall(r'<testcase classname="suite" name="([^"]*)"', junit)  # whole: the suite's file and line
    assert len(names) == 6 and all(re.fullmatch(r"tests/typos\.test\.yaml:\d+", n) for n in names), names


@pytest.mark.parametrize("suite,message", [
    ({"cases": []}, "List should have at least 1 item"),
    ({"cases": [{"name": "x", "object": JOB, "file": "job.yaml", "expect": {"allowed": True}}]},
     "found object, file"),
    ({"cases": [{"name": "x", "object": JOB, "expect": {"allowed": True, "messages": ["(unclosed"]}}]},
     "not a regular expression"),
    ({"cases": [{"name": "x", "file": "nowhere.yaml", "expect": {"allowed": True}}]}, "file nowhere.yaml does not exist"),
    ({"cases": [{"name": "x", "object": JOB, "expect": {"allowed": "maybe"}}]}, "valid boolean"),
    ({"kind": "PolicyTets"}, "expected kind PolicyTest, got 'PolicyTets'"),
])
def test_suite_errors(tmp_path, suite, message):
    d = write_policy(tmp_path / "p")
    doc = {"apiVersion": "trainadmit.io/v1alpha1", "kind": "PolicyTest", "metadata": {"name": "s"}, **suite}
    (d / "s.test.yaml").write_text(yaml.safe_dump(doc))
    errors = [f for f in lint(d)[0] if f.is_error]
    assert any(message in f.message for f in errors), [str(f) for f in errors]
    assert all(f.file == "s.test.yaml" and f.line and f.fix for f in errors)
    r = run_cli("policy", "test", str(d))
    assert r.returncode == 1 and message in r.stdout


def test_other_yaml_under_tests_is_fixture_data_but_a_misspelt_suite_kind_is_not(tmp_path):
    d = write_policy(tmp_path / "p")
    (d / "tests").mkdir()
    (d / "tests" / "job.yaml").write_text(yaml.safe_dump(JOB))
    suite = {"apiVersion": "trainadmit.io/v1alpha1", "kind": "PolicyTest", "metadata": {"name": "s"},
             "cases": [{"name": "from a file", "file": "job.yaml", "expect": {"allowed": True, "denials": []}}]}
    (d / "tests" / "suite.yaml").write_text(yaml.safe_dump(suite))
    assert lint(d) == ([], False)
    r = run_cli("policy", "test", str(d))
    assert r.returncode == 0 and "PASS  tests/suite.yaml:s  from a file" in r.stdout
    (d / "tests" / "other.yaml").write_text(yaml.safe_dump({**suite, "kind": "PolicyTests"}))
    [finding] = lint(d)[0]
    assert finding.file == "tests/other.yaml" and finding.field == "kind" and finding.fix == "set kind: PolicyTest"


def test_a_file_outside_the_policy_directory_is_a_warning(tmp_path):
    d = write_policy(tmp_path / "p")
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(JOB))
    suite = {"apiVersion": "trainadmit.io/v1alpha1", "kind": "PolicyTest", "metadata": {"name": "s"},
             "cases": [{"name": "outside", "file": "../job.yaml", "expect": {"allowed": True}}]}
    (d / "s.test.yaml").write_text(yaml.safe_dump(suite))
    [finding] = lint(d)[0]
    assert not finding.is_error and "outside the policy directory" in finding.message
    assert run_cli("policy", "test", str(d)).returncode == 0  # still runs
    assert run_cli("policy", "lint", "--strict", str(d)).returncode == 1


def test_a_copy_of_the_bundled_set_outside_the_repository_passes(tmp_path):
    shutil.copytree(POLICIES, tmp_path / "elsewhere" / "policies")
    r = run_cli("policy", "test", str(tmp_path / "elsewhere" / "policies"))
    assert r.returncode == 0 and " 0 failed" in r.stdout, r.stdout
    assert lint(tmp_path / "elsewhere" / "policies") == ([], False)


def test_an_empty_directory_gets_one_message(tmp_path):
    d = write_policy(tmp_path / "p")
    r = run_cli("policy", "test", str(d))
    assert r.returncode == 1 and r.stderr == ""
    [line] = r.stdout.splitlines()
    assert line.startswith(f"no policy tests under {d}") and "--allow-empty" in line
    ok = run_cli("policy", "test", str(d), "--allow-empty")
    assert ok.returncode == 0 and len(ok.stdout.splitlines()) == 1 and "passed" not in ok.stdout
    junit = run_cli("policy", "test", str(d), "-o", "junit")
    assert junit.returncode == 1 and junit.stdout.startswith("<?xml") and "no policy tests" in junit.stderr


# ---- quantities compare as quantities, other values exactly ----------------------------------------------

@pytest.mark.parametrize("path,got,want,same", [
    ('spec.containers[0].resources.limits["rdma/ib"]', "1", 1, True),
    ('spec.containers[0].resources.limits["rdma/ib"]', 1, "1", True),
    ("spec.containers[0].resources.requests.memory", "1Gi", "1024Mi", True),
    ("spec.containers[0].resources.limits.memory", "1Gi", "1000Mi", False),
    ("spec.volumes[0].emptyDir.sizeLimit", "64Gi", "65536Mi", True),
    ('spec.containers[0].resources.limits["nvidia.com/gpu"]', "<missing>", 8, False),
    ("spec.containers[0].env[0].value", "1", 1, False),  # an env value is a string, not a quantity
    ("spec.parallelism", 1, True, False),
    ("spec.parallelism", 4, 4, True),
])
def test_same_value(path, got, want, same):
    assert same_value(path, got, want) is same


def test_a_declared_quantity_matches_in_either_form_and_a_wrong_one_fails(tmp_path):
    d = write_policy(tmp_path / "p")
    key = 'spec.template.spec.containers[0].resources.limits["rdma/rdma_shared_device_a"]'
    cases = [{"name": f"expects {want!r}", "object": {**JOB, "metadata": {"name": "t", "namespace": "research",
                                                                        "labels": {"owner": "me"}}},
              "expect": {"allowed": True, "fields": {key: want}}} for want in (1, "1", "2")]
    suite = {"apiVersion": "trainadmit.io/v1alpha1", "kind": "PolicyTest", "metadata": {"name": "q"}, "cases": cases}
    (d / "q.test.yaml").write_text(yaml.safe_dump(suite))
    r = run_cli("policy", "test", str(d))
    assert "PASS  q.test.yaml:q  expects 1" in r.stdout and "PASS  q.test.yaml:q  expects '1'" in r.stdout
    assert "FAIL  q.test.yaml:q  expects '2'" in r.stdout and f"{key} is 1, expected '2'" in r.stdout


def test_fixture_data_in_a_subfolder_of_tests_is_not_policy(tmp_path):
    d = write_policy(tmp_path / "p")
    (d / "tests" / "jobs").mkdir(parents=True)
    (d / "tests" / "jobs" / "job.yaml").write_text(yaml.safe_dump(JOB))
    suite = {"apiVersion": "trainadmit.io/v1alpha1", "kind": "PolicyTest", "metadata": {"name": "s"},
             "cases": [{"name": "nested", "file": "jobs/job.yaml", "expect": {"allowed": True}}]}
    (d / "tests" / "s.test.yml").write_text(yaml.safe_dump(suite))
    assert lint(d) == ([], False)
    assert run_cli("policy", "test", str(d)).returncode == 0


def test_only_yaml_under_tests_is_read_as_a_suite(tmp_path):
    """A suite is YAML (.yaml, .yml), the rule that keeps it out of the policy: an HTML report next to the
    suites is neither policy nor suite (it was read as a suite and made the directory unreadable)."""
    from trainadmit.policy.files import is_suite_path, policy_files

    d = write_policy(tmp_path / "p")
    (d / "tests").mkdir()
    (d / "tests" / "coverage.yaml.html").write_text("<html>\n<p>a: b: c</p>\n</html>\n")
    assert lint(d) == ([], False)
    assert not is_suite_path(Path("tests/coverage.yaml.html"))
    assert all(is_suite_path(Path(p)) for p in ("x.test.yaml", "x.test.yml", "tests/x.yaml", "a/tests/b/x.yml"))
    assert not any(is_suite_path(Path(p)) for p in ("x.yaml", "x.test.json", ".h/x.test.yaml", "tests/.x.yaml"))
    assert not any(is_suite_path(p.relative_to(d)) for p in policy_files(d))
