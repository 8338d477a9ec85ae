"""Policy authoring: lint findings, the schema file, the policy test runner, CEL rules, --explain."""

from __future__ import annotations

import json
import shutil

import pytest
import yaml
from support.builders import job
from support.cli import run_cli
from support.manifests import deep, load_yaml, review
from support.paths import EXAMPLES, POLICIES, ROOT
from support.policies import BACKENDS, write_policy

from trainadmit.authoring.lint import lint
from trainadmit.engine import Request, decide, load_policy
from trainadmit.grammars.cel import CelError, compile_expression, comprehension_depth


def cli(*args):
    return run_cli(*args)


def with_extra(tmp_path, docs: list[dict], platform: dict | None = None):
    return write_policy(tmp_path / "p", platform, extra=docs)


def quota(name, namespaces, **spec):
    return {"apiVersion": "trainadmit.io/v1alpha1", "kind": "Quota", "metadata": {"name": name},
            "spec": {"namespaces": namespaces, **spec}}


# ---- lint: one policy that triggers each finding, one that does not ---------------------------

def test_bundled_policies_lint_clean():
    findings, unreadable = lint(POLICIES)
    assert findings == [] and not unreadable


@pytest.mark.parametrize("docs,platform,expected", [
    ([quota("a", ["ml"], maxGPUsPerJob=8), quota("b", ["ml"], maxGPUsPerJob=16)], None,
     "also listed by Quota a"),
    ([quota("a", ["ml-*"], maxGPUsPerJob=8), quota("b", ["*-research"], maxGPUsPerJob=16)], None,
     "overlaps 'ml-*' of Quota a"),
    ([], {"enforce": ["queue"], "gang": {"backend": "native"}},
     "queue is enforced, but no setting of this policy ever sets it"),
    ([], {"enforce": ["schedulerName"], "gang": {"backend": "native"}}, "schedulerName is enforced"),
    ([{"apiVersion": "trainadmit.io/v1alpha1", "kind": "Dataset", "metadata": {"name": "dup"},
       "spec": {"claimName": "x", "mountPath": "/datasets/c4"}}], None, "/datasets/c4 is also used by Dataset c4"),
])
def test_semantic_findings(tmp_path, docs, platform, expected):
    findings, _ = lint(with_extra(tmp_path, docs, platform))
    assert any(expected in str(f) for f in findings), [str(f) for f in findings]


@pytest.mark.parametrize("docs,platform", [
    ([quota("a", ["ml"], maxGPUsPerJob=8), quota("b", ["ml"], maxGPUsPerJob=8)], None),   # same settings
    ([quota("a", ["ml-*"], maxGPUsPerJob=8), quota("b", ["cv-*"], maxGPUsPerJob=16)], None),  # disjoint
    ([], {"enforce": ["queue"], "gang": {"backend": "kueue"}}),
    ([], {"enforce": ["schedulerName"], "gang": {"backend": "volcano"}}),
    ([], {"enforce": ["queue", "schedulerName"]}),  # backend auto: the cluster's may well set them
])
def test_no_finding_when_sound(tmp_path, docs, platform):
    assert lint(with_extra(tmp_path, docs, platform)) == ([], False)


def _pool_doc(**changes):
    doc = load_yaml(POLICIES / "pools.yaml")[0]
    doc["metadata"]["name"] = "extra"
    doc["spec"]["default"] = False
    for path, value in changes.items():
        cur = doc["spec"]
        keys = path.split(".")
        for k in keys[:-1]:
            cur = cur[k]
        cur[keys[-1]] = value
    return doc


@pytest.mark.parametrize("changes,field,message", [
    ({"topology.default": "pod"}, "spec.topology", "default level 'pod' is not one of"),
    ({"nccl.env": {"NCCL_IB_TIMEOUT": "99"}}, "spec.nccl.env.NCCL_IB_TIMEOUT", "must be from 0 to 31"),
    ({"nodeSelector": {"bad key!": "x"}}, "spec.nodeSelector", "not a valid Kubernetes label key"),
    ({"capacityNodes": 8}, "spec.topology.levels[rack].maxNodes", "more than the pool's capacityNodes"),
    ({"nodeSelector": {"trainadmit.io/pool": "extra"}}, "spec.nodeSelector", "does not select it"),
])
def test_pool_findings_name_file_line_and_field(tmp_path, changes, field, message):
    findings, unreadable = lint(with_extra(tmp_path, [_pool_doc(**changes)]))
    assert not unreadable
    hit = [f for f in findings if message in f.message]
    assert hit and hit[0].field == field and hit[0].file == "extra.yaml" and hit[0].line
    assert lint(with_extra(tmp_path / "ok", [_pool_doc()])) == ([], False)


def test_lint_exit_codes(tmp_path):
    assert cli("policy", "lint", str(POLICIES)).returncode == 0
    bad = with_extra(tmp_path, [quota("a", ["ml"], allowedPools=["nope"])])
    r = cli("policy", "lint", str(bad))
    assert r.returncode == 1 and "extra.yaml:9: error: spec.allowedPools[0]: no Pool named 'nope'" in r.stdout
    (bad / "broken.yaml").write_text("kind: [\n")
    assert cli("policy", "lint", str(bad)).returncode == 2
    assert cli("policy", "lint", str(tmp_path / "missing")).returncode == 2


# ---- schema -------------------------------------------------------------------------------------

def test_committed_schema_is_current():
    generated = cli("policy", "schema").stdout
    assert (ROOT / "docs" / "policy.schema.json").read_text() == generated, \
        "run: trainadmit policy schema > docs/policy.schema.json"
    schema = json.loads(generated)
    assert "Rule" in schema["discriminator"]["mapping"]


def test_schema_validates_the_bundled_policies_and_catches_a_typo():
    import jsonschema

    schema = json.loads((ROOT / "docs" / "policy.schema.json").read_text())
    validator = jsonschema.Draft202012Validator(schema)
    for path in sorted(POLICIES.glob("*.yaml")):
        for doc in load_yaml(path):
            assert list(validator.iter_errors(doc)) == [], path
    doc = load_yaml(POLICIES / "pools.yaml")[0]
    doc["spec"]["gpu"]["perNod"] = 8
    assert list(validator.iter_errors(doc))


# ---- policy test runner -------------------------------------------------------------------------

def test_bundled_suite_passes_and_junit_is_written():
    r = cli("policy", "test", str(POLICIES))
    assert r.returncode == 0, r.stdout
    assert "0 failed" in r.stdout
    junit = cli("policy", "test", str(POLICIES), "-o", "junit").stdout
    assert junit.startswith("<?xml") and 'failures="0"' in junit


def test_broken_copy_of_the_bundled_policies_fails_with_the_right_messages(tmp_path):
    shutil.copytree(POLICIES, tmp_path / "policies")  # alone: the bundled suite reads nothing outside it
    pools = tmp_path / "policies" / "pools.yaml"
    pools.write_text(pools.read_text().replace("perNode: 8", "perNode: 4", 1))
    r = cli("policy", "test", str(tmp_path / "policies"))
    assert r.returncode == 1
    assert "FAIL  tests/bundled.test.yaml:bundled  a 4-node H100 job gets a native gang" in r.stdout
    assert "allowed is False, expected True ([topology.whole-node]" in r.stdout
    junit = cli("policy", "test", str(tmp_path / "policies"), "-o", "junit").stdout
    assert "<failure" in junit


def test_empty_directory_fails_unless_allowed(tmp_path):
    d = write_policy(tmp_path / "p")
    assert cli("policy", "test", str(d)).returncode == 1
    assert cli("policy", "test", str(d), "--allow-empty").returncode == 0


# ---- CEL -----------------------------------------------------------------------------------------

REQ = review("job-03-mutate-Job-CREATE.json")["request"]
DATA = {"object": REQ["object"], "oldObject": None, "params": {"maxWorkers": 8},
        "request": {"operation": "CREATE", "namespace": "team-nlp", "userInfo": REQ["userInfo"]}}


@pytest.mark.parametrize("expression,expected", [
    ("has(object.metadata.labels) && 'trainadmit.io/pool' in object.metadata.labels", True),
    ("has(object.spec.template.spec.nodeSelector)", False),
    ("object.spec.template.spec.containers.all(c, c.image.startsWith('registry.local/'))", True),
    ("object.spec.template.spec.containers.exists(c, 'nvidia.com/gpu' in c.resources.limits)", True),
    ("object.spec.template.spec.containers.exists_one(c, c.name == 'trainer')", True),
    ("object.spec.template.spec.containers.map(c, c.name) == ['trainer']", True),
    ("object.spec.template.spec.containers.filter(c, c.name.endsWith('er')).size() == 1", True),
    ("object.spec.parallelism <= params.maxWorkers", True),
    ("object.metadata.name.matches('^[a-z-]+$') && object.metadata.name.lowerAscii() == 'llama-pretrain'", True),
    ("object.metadata.annotations['trainadmit.io/priority'] in ['high', 'normal']", True),
    ("request.userInfo.groups.exists(g, g == 'system:masters')", True),
    ("isQuantity(object.spec.template.spec.containers[0].resources.limits['nvidia.com/gpu'])", True),
    ("quantity(object.spec.template.spec.containers[0].resources.limits['nvidia.com/gpu']).isGreaterThan(quantity('4'))", True),
    ("quantity('1Gi').compareTo(quantity('1024Mi')) == 0 && quantity('1500m').isLessThan(quantity('2'))", True),
    ("quantity('16').asInteger() * 2 == 32 && quantity('512Mi').asApproximateFloat() == 536870912.0", True),
    ("!isQuantity('eight')", True),
])
def test_kubernetes_style_expressions(expression, expected):
    assert compile_expression(expression).evaluate(DATA, 10) == expected


def test_compile_errors_and_runaway_cost():
    with pytest.raises(CelError, match="Syntax error"):
        compile_expression("object.spec.parallelism >")
    with pytest.raises(CelError, match="nested 4 deep"):
        compile_expression("object.a.all(x, x.all(y, y.all(z, z.all(w, true))))")
    assert comprehension_depth("'.all(' + object.a.exists(x, x.b.map(y, y)) ") == 2
    program = compile_expression("object.items.all(a, object.items.all(b, a != b || a == b))")
    with pytest.raises(CelError, match=r"estimated cost .* exceeds the budget of 1,000,000 .* 5000 items"):
        program.evaluate({"object": {"items": list(range(5000))}}, 5000)
    assert program.evaluate({"object": {"items": list(range(20))}}, 20) is True
    with pytest.raises(CelError, match="Key not found"):
        compile_expression("object.metadata.nothing == 1").evaluate(DATA, 10)


def _rule(name, expression, **spec):
    validation = {"expression": expression, "message": f"{name} failed", "path": "spec", "hint": "fix it"}
    return {"apiVersion": "trainadmit.io/v1alpha1", "kind": "Rule", "metadata": {"name": name},
            "spec": {"validations": [validation], **spec}}


def test_custom_rules_in_the_engine(tmp_path):
    rules = [
        _rule("max-workers", "object.spec.parallelism <= params.max", params={"max": 2}, kinds=["Job"]),
        _rule("only-research", "false", namespaces=["research"]),
        _rule("skipped-by-condition", "false",
              matchConditions=[{"name": "never", "expression": "object.kind == 'Pod'"}]),
        _rule("errors", "object.metadata.labels.owner == 'x'", action="warn"),
        _rule("no-scale-up", "object.spec.parallelism <= oldObject.spec.parallelism", operations=["UPDATE"]),
    ]
    policy = load_policy(with_extra(tmp_path, rules))
    d = decide(policy, Request(job(workers=4)))
    by_rule = {v.rule: v for v in d.violations}
    assert by_rule["custom.max-workers"].message == "max-workers failed" and not d.allowed
    assert "custom.only-research" not in by_rule and "custom.skipped-by-condition" not in by_rule
    assert "could not be evaluated" in by_rule["custom.errors"].message
    assert by_rule["custom.errors"].action.value == "warn"
    old = job(workers=2)
    upd = decide(policy, Request(job(workers=4), operation="UPDATE", old=old, phase="validate"))
    assert "custom.no-scale-up" in {v.rule for v in upd.denials}


def test_rule_compile_error_is_a_policy_error_with_the_field(tmp_path):
    findings, unreadable = lint(with_extra(tmp_path, [_rule("bad", "object.spec.parallelism >")]))
    assert not unreadable
    [f] = findings
    assert f.file == "extra.yaml" and f.field == "spec.validations[0].expression" and "Syntax error" in f.message


def test_fixture_pod_through_custom_rules(policy):
    pod = review("pod-01-mutate-Pod-CREATE.json")["request"]["object"]
    d = decide(policy, Request(pod, namespace="team-cv"))
    assert d.allowed and "custom.owner-label" not in {v.rule for v in d.violations}  # kinds: [Job]
    job_form = {**job(namespace="team-cv"), "metadata": {"name": "x", "namespace": "team-cv"}}
    assert "custom.owner-label" in {v.rule for v in decide(policy, Request(job_form)).warnings}


def test_duplicate_match_condition_names_are_a_finding(tmp_path):
    rule = _rule("dup", "true", matchConditions=[{"name": "a", "expression": "true"},
                                                 {"name": "a", "expression": "false"}])
    findings, _ = lint(with_extra(tmp_path, [rule]))
    assert any("match condition names repeat: a" in f.message for f in findings)


def test_docs_reference_is_generated_from_the_models():
    from trainadmit.authoring.reference import BEGIN, END, reference_markdown

    text = (ROOT / "docs" / "policies.md").read_text()
    embedded = text[text.index(BEGIN):text.index(END) + len(END)] + "\n"
    assert embedded == reference_markdown(), "regenerate the reference section of docs/policies.md"


def test_expected_mutated_object(tmp_path):
    """A case can pin the whole mutated object; a difference names the fields."""
    d = write_policy(tmp_path / "p", BACKENDS["native-job"])  # the gang in the Job itself: spec.scheduling
    mutated = cli("check", str(EXAMPLES / "llama-pretrain.yaml"), "-o", "yaml", "-p", str(d)).stdout
    (d / "tests").mkdir()
    shutil.copy(EXAMPLES / "llama-pretrain.yaml", d / "tests" / "llama.yaml")  # fixture data next to the suite
    (d / "tests" / "llama.mutated.yaml").write_text(mutated)
    suite = {"apiVersion": "trainadmit.io/v1alpha1", "kind": "PolicyTest", "metadata": {"name": "pinned"},
             "cases": [{"name": "llama as a whole", "file": "llama.yaml",
                        "expect": {"allowed": True, "mutated": {"file": "llama.mutated.yaml"}}}]}
    (d / "tests" / "pinned.test.yaml").write_text(yaml.safe_dump(suite))
    assert cli("policy", "test", str(d)).returncode == 0
    (d / "tests" / "llama.mutated.yaml").write_text(mutated.replace("minCount: 4", "minCount: 5"))
    r = cli("policy", "test", str(d))
    assert r.returncode == 1 and "mutated object differs at spec.scheduling.schedulingPolicy.gang.minCount" in r.stdout


def test_managed_fields_are_passed_to_cel_only_when_a_rule_names_them(tmp_path):
    from trainadmit.engine.concerns.custom import _without_managed_fields

    obj = review("job-03-mutate-Job-CREATE.json")["request"]["object"]
    assert obj["metadata"]["managedFields"]
    rules = [_rule("sees-managed", "has(object.metadata.managedFields)")]
    policy = load_policy(with_extra(tmp_path, rules))
    d = decide(policy, Request(deep(obj), namespace="team-nlp"))
    assert "custom.sees-managed" not in {v.rule for v in d.violations}  # the rule names them: passed
    assert _without_managed_fields(obj, policy.compiled_rules) is obj
    plain = load_policy(with_extra(tmp_path / "b", [_rule("name", "object.metadata.name != ''")]))
    slim = _without_managed_fields(obj, plain.compiled_rules)
    assert "managedFields" not in slim["metadata"] and obj["metadata"]["managedFields"]
    assert {k: v for k, v in slim["metadata"].items()} == {k: v for k, v in obj["metadata"].items()
                                                           if k != "managedFields"}


def test_rule_variables_as_in_validating_admission_policy(tmp_path):
    rule = _rule("trainer-names", "variables.names.all(n, n.startsWith(params.prefix)) && variables.count == 1",
                 params={"prefix": "train"},
                 variables=[{"name": "names", "expression": "object.spec.template.spec.containers.map(c, c.name)"},
                            {"name": "count", "expression": "size(variables.names)"}])
    policy = load_policy(with_extra(tmp_path, [rule]))
    assert "custom.trainer-names" not in {v.rule for v in decide(policy, Request(job())).violations}
    bad = job(container={"name": "eval"})
    assert "custom.trainer-names" in {v.rule for v in decide(policy, Request(bad)).denials}
    findings, _ = lint(with_extra(tmp_path / "b", [_rule("v", "true", variables=[{"name": "x", "expression": "1 +"}])]))
    assert [f.field for f in findings] == ["spec.variables[0].expression"]
