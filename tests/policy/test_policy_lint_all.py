"""`policy lint` reports every problem of every file in one run, and checks the values a policy
injects at least as strictly as the engine checks a user's."""

from __future__ import annotations

import shutil

import pytest
import yaml
from support.builders import job
from support.cli import run_cli
from support.manifests import load_yaml
from support.paths import POLICIES
from support.policies import write_policy
from support.schemas import schema_errors

from trainadmit.authoring.lint import lint
from trainadmit.engine import Request, decide, load_policy
from trainadmit.grammars.nccl import KNOWN_VARS
from trainadmit.policy import PolicyError


def _copy(tmp_path):
    d = tmp_path / "p"
    shutil.copytree(POLICIES, d)
    return d


def _edit(path, old, new):
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new, 1))


def _line_of(path, needle) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if needle in line)


def test_three_mistakes_in_three_files_in_one_run(tmp_path):
    d = _copy(tmp_path)
    _edit(d / "platform.yaml", "  intentPrefix: trainadmit.io", "  intentPrefx: trainadmit.io")
    _edit(d / "pools.yaml", 'NCCL_IB_TIMEOUT: "20"', 'NCCL_IB_TIMEOUT: "20"\n      NCCL_IB_GID_INDEX: "x"')
    _edit(d / "quotas.yaml", "allowedPools: [h100-ib, l40s-eth]", "allowedPools: [h100-ib, l40s-ethh]")
    findings, unreadable = lint(d)
    assert not unreadable
    errors = [(f.file, f.line, f.field) for f in findings if f.is_error]
    assert ("platform.yaml", _line_of(d / "platform.yaml", "intentPrefx"), "spec.intentPrefx") in errors
    assert ("pools.yaml", _line_of(d / "pools.yaml", "NCCL_IB_GID_INDEX"), "spec.nccl.env.NCCL_IB_GID_INDEX") in errors
    assert ("quotas.yaml", _line_of(d / "quotas.yaml", "l40s-ethh"), "spec.allowedPools[1]") in errors
    assert [(f.file, f.line) for f in findings] == sorted((f.file, f.line) for f in findings)
    by_field = {f.field: f for f in findings}
    assert by_field["spec.intentPrefx"].fix == "did you mean intentPrefix?"
    assert by_field["spec.allowedPools[1]"].fix == "did you mean l40s-eth?"
    assert all(f.fix for f in findings)
    # the CLI prints them all and exits 1; loading refuses the set naming the same three
    r = run_cli("policy", "lint", str(d))
    assert r.returncode == 1 and all(field in r.stdout for field in by_field)
    with pytest.raises(PolicyError) as info:
        load_policy(d)
    assert {p.field for p in info.value.problems} >= {"spec.intentPrefx", "spec.nccl.env.NCCL_IB_GID_INDEX",
                                                      "spec.allowedPools[1]"}


def test_the_platform_count_and_a_schema_error_come_in_the_same_run(tmp_path):
    """The issue's trial: topology order in one run, the missing Platform only in the next."""
    d = _copy(tmp_path)
    (d / "platform.yaml").unlink()
    _edit(d / "pools.yaml", "maxNodes: 16}", "maxNodes: 99}")
    messages = [f.message for f in lint(d)[0]]
    assert any("exactly one Platform document is required, found 0" in m for m in messages)
    assert any("smallest domain to the largest" in m for m in messages)


def test_a_broken_platform_does_not_hide_cross_references_or_duplicate_platforms(tmp_path):
    d = _copy(tmp_path)
    _edit(d / "platform.yaml", "backend: auto", "backend: nativ")
    _edit(d / "quotas.yaml", "allowedPriorities: [normal, low]", "allowedPriorities: [normal, lo]")
    shutil.copy(d / "platform.yaml", d / "second-platform.yaml")
    findings = lint(d)[0]
    fields = {(f.file, f.field) for f in findings}
    assert ("platform.yaml", "spec.gang.backend") in fields
    assert ("quotas.yaml", "spec.allowedPriorities[1]") in fields
    assert any(f.file == "second-platform.yaml" and "found 2" in f.message for f in findings)
    # a reference to a document that failed its own schema check is not reported a second time
    _edit(d / "pools.yaml", "perNode: 4", "perNode: four")
    fields = {f.field for f in lint(d)[0]}
    assert "spec.gpu.perNode" in fields and not any("no Pool named 'l40s-eth'" in f.message for f in lint(d)[0])


# ---- NCCL values a policy injects: the checks a user's values get ---------------------------------------

# (name, value, denials, warnings): the counts are written out, not taken from decide(), which shares the
# NCCL grammar with lint. They follow NCCL's documentation roughly (ALGO, PROTO, NET_GDR_LEVEL and
# IB_DISABLE are debugging variables; integer GDR levels are discouraged; IB_HCA names without '=' are
# prefixes) and pin what the engine says today.
NCCL_VALUES = [
    ("NCCL_IB_GID_INDEX", "x", 1, 0), ("NCCL_ALGO", "Rnig", 1, 1), ("NCCL_ALGO", "RING", 0, 1),
    ("NCCL_NET_GDR_LEVEL", "5", 0, 2), ("NCCL_IB_HCA", "mlx5_0,mlx5_1", 0, 1), ("NCCL_IB_HCA", "=mlx5_0,,mlx5_1", 1, 0),
    ("NCCL_IB_TIMEOUT", "20", 0, 0), ("NCCL_PROTO", "simple", 0, 1), ("NCCL_SOCKET_IFNAME", "=eth0", 0, 0),
    ("NCCL_DEBUG", "WARN", 0, 0), ("NCCL_IB_DISABLE", "1", 0, 1),
]


def _pool_with(tmp_path, env: dict) -> object:
    docs = load_yaml(POLICIES / "pools.yaml")
    docs[0]["spec"]["nccl"]["env"] = env
    d = write_policy(tmp_path / "p")
    (d / "pools.yaml").write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return d


@pytest.mark.parametrize("name,value,denials,warnings", NCCL_VALUES)
def test_a_pool_value_fails_lint_the_way_a_user_job_with_it_is_denied_or_warned(tmp_path, policy, name, value,
                                                                                   denials, warnings):
    user = decide(policy, Request(job(env=[{"name": name, "value": value}])))
    denied = sorted(v.rule for v in user.violations if v.rule.startswith("nccl.") and v in user.denials)
    warned = sorted(v.rule for v in user.violations if v.rule.startswith("nccl.") and v in user.warnings)
    assert (len(denied), len(warned)) == (denials, warnings), (denied, warned)
    findings, _ = lint(_pool_with(tmp_path, {name: value}))
    ours = [f for f in findings if f.field == f"spec.nccl.env.{name}"]
    assert len([f for f in ours if f.is_error]) == len(denied), (denied, [str(f) for f in ours])
    assert len([f for f in ours if not f.is_error]) == len(warned), (warned, [str(f) for f in ours])
    assert all(f.file == "pools.yaml" and f.line and f.fix for f in ours)
    if denied:
        with pytest.raises(PolicyError):
            load_policy(_pool_with(tmp_path / "again", {name: value}))


def test_the_issues_four_warnings_and_an_unknown_name_in_one_pool(tmp_path):
    env = {"NCCL_ALGO": "RING", "NCCL_NET_GDR_LEVEL": "5", "NCCL_IB_HCA": "mlx5_0", "NCCL_IB_HCA_TYPO": "=mlx5_0"}
    d = _pool_with(tmp_path, env)
    findings, _ = lint(d)
    warnings = [f for f in findings if not f.is_error]
    assert not [f for f in findings if f.is_error]
    assert len([f for f in warnings if "NCCL_IB_HCA_TYPO" not in f.field]) == 4  # as many as a user Job gets
    typo = next(f for f in warnings if f.field == "spec.nccl.env.NCCL_IB_HCA_TYPO")
    assert "not a variable the NCCL documentation lists" in typo.message and typo.fix == "did you mean NCCL_IB_HCA?"
    assert run_cli("policy", "lint", str(d)).returncode == 0  # warnings alone: the set loads and serves
    strict = run_cli("policy", "lint", "--strict", str(d))
    assert strict.returncode == 1 and "5 warnings" in strict.stdout


def test_checkpoint_env_and_plugin_variables(tmp_path):
    docs = load_yaml(POLICIES / "storage.yaml")
    ckpt = next(doc for doc in docs if doc["kind"] == "CheckpointClass")
    ckpt["spec"]["env"] = {"NCCL_IB_TIMEOUT": "99", "NCCL_FASTRAK_LLCM_DEVICE_DIRECTORY": "/dev/aperture_devices"}
    d = write_policy(tmp_path / "p")
    (d / "storage.yaml").write_text(yaml.safe_dump_all(docs, sort_keys=False))
    by_field = {f.field: f for f in lint(d)[0]}
    assert by_field["spec.env.NCCL_IB_TIMEOUT"].is_error
    plugin = by_field["spec.env.NCCL_FASTRAK_LLCM_DEVICE_DIRECTORY"]
    assert not plugin.is_error and "network plugin" in plugin.fix


def test_every_variable_the_engine_checks_or_warns_about_is_a_documented_name():
    from trainadmit.grammars.nccl import _CHECKS, DEBUGGING_VARS

    assert set(_CHECKS) <= KNOWN_VARS and DEBUGGING_VARS <= KNOWN_VARS


def test_bundled_policies_have_no_warnings_either():
    findings, unreadable = lint(POLICIES)
    assert findings == [] and not unreadable
    assert run_cli("policy", "lint", "--strict", str(POLICIES)).returncode == 0


# ---- quantities: injected as declared, valid for the apiserver, idempotent -------------------------------

@pytest.mark.parametrize("declared", [1, "1", "2"])
def test_rdma_resources_are_injected_as_the_policy_declares_them(tmp_path, declared):
    docs = load_yaml(POLICIES / "pools.yaml")
    docs[0]["spec"]["rdma"]["resources"] = {"rdma/roce_shared": declared}
    d = write_policy(tmp_path / "p")
    (d / "pools.yaml").write_text(yaml.safe_dump_all(docs, sort_keys=False))
    policy = load_policy(d)
    decision = decide(policy, Request(job()))
    limits = decision.mutated["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits["rdma/roce_shared"] == declared and type(limits["rdma/roce_shared"]) is type(declared)
    assert schema_errors(decision.mutated) == []
    again = decide(policy, Request(decision.mutated))
    assert again.patch == []  # the apiserver may call twice: nothing more to add
    stored = {**decision.mutated}  # as the apiserver stores it: quantities are canonical strings
    container = stored["spec"]["template"]["spec"]["containers"][0]
    container["resources"] = {k: {r: str(v) for r, v in section.items()} for k, section in container["resources"].items()}
    assert decide(policy, Request(stored)).patch == []


@pytest.mark.parametrize("bad", [0, "0", "1.5", "one", True, [1]])
def test_rdma_resource_counts_must_be_whole_quantities(tmp_path, bad):
    docs = load_yaml(POLICIES / "pools.yaml")
    docs[0]["spec"]["rdma"]["resources"] = {"rdma/roce_shared": bad, "rdma/other": 1}
    d = write_policy(tmp_path / "p")
    (d / "pools.yaml").write_text(yaml.safe_dump_all(docs, sort_keys=False))
    [finding] = [f for f in lint(d)[0] if f.is_error]
    assert finding.field == "spec.rdma.resources" and "rdma/roce_shared" in finding.message


def test_a_rule_for_a_kind_never_decided_is_reported_at_its_line_by_lint_and_load(tmp_path):
    """A Rule with kinds: [PyTorchJobs] would never run: lint reports it where it is written, with the
    kind meant, and loading refuses the set with the same problem."""
    rules = (POLICIES / "rules.yaml").read_text().replace("kinds: [Job]", "kinds: [Job, PyTorchJobs]", 1)
    directory = write_policy(tmp_path / "p")
    (directory / "rules.yaml").write_text(rules)
    line = next(i for i, text in enumerate(rules.splitlines(), 1) if "PyTorchJobs" in text)
    findings, unreadable = lint(directory)
    wrong = [f for f in findings if "PyTorchJobs" in f.message]
    assert not unreadable and len(wrong) == 1, findings
    assert (wrong[0].file, wrong[0].line, wrong[0].field, wrong[0].severity) == ("rules.yaml", line, "spec.kinds[1]",
                                                                              "error")
    assert "did you mean PyTorchJob?" in wrong[0].fix
    with pytest.raises(PolicyError) as err:
        load_policy(directory)
    assert [(p.line, p.field) for p in err.value.problems] == [(line, "spec.kinds[1]")]


def test_a_controllers_key_that_names_no_kind_with_children_is_reported(tmp_path):
    """A typo in Platform.spec.controllers would trust nobody more, silently: lint names it and the key
    meant (and a key that is not a resource name at all does not load)."""
    d = write_policy(tmp_path / "typo", {"controllers": {"pytorchjob.kubeflow.org": ["system:serviceaccount:a:b"]}})
    findings, _ = lint(d)
    [found] = [f for f in findings if "controllers" in f.field]
    assert found.is_error and "pytorchjob.kubeflow.org is no kind" in found.message
    assert found.fix == "did you mean pytorchjobs.kubeflow.org?"
    good = write_policy(tmp_path / "good", {"controllers": {"statefulsets.apps": ["system:serviceaccount:a:b"]}})
    assert not [f for f in lint(good)[0] if "controllers" in f.field]
    with pytest.raises(PolicyError, match="controllers"):
        load_policy(write_policy(tmp_path / "bad", {"controllers": {"Jobs Batch": ["x"]}}))
