"""Policy loading: the bundled set loads; every error names the file, the document and the field."""

from __future__ import annotations

import shutil

import pytest
from support.paths import POLICIES
from support.policies import write_policy

from trainadmit.engine import load_policy
from trainadmit.policy import PolicyError


def test_bundled_policies_load(policy):
    assert set(policy.pools) == {"h100-ib", "l40s-eth"}
    assert policy.default_pools == {"nvidia.com/gpu": "h100-ib"}
    assert len(policy.generation) == 12


def test_generation_is_a_content_hash(tmp_path):
    a = load_policy(write_policy(tmp_path / "a"))
    b = load_policy(write_policy(tmp_path / "b"))
    c = load_policy(write_policy(tmp_path / "c", {"shm": {"sizeLimit": "32Gi"}}))
    assert a.generation == b.generation != c.generation


def _broken(tmp_path, text: str, name: str = "broken.yaml"):
    d = tmp_path / "p"
    shutil.copytree(POLICIES, d)
    (d / name).write_text(text)
    with pytest.raises(PolicyError) as info:
        load_policy(d)
    return info.value.problems


def test_unknown_field_is_named_with_file_document_and_line(tmp_path):
    problems = _broken(tmp_path, "---\n# two\napiVersion: trainadmit.io/v1alpha1\nkind: Dataset\nmetadata: {name: x}\n"
                                 "spec: {claimName: pvc, mountPath: /data, readonly: true}\n")
    [p] = problems
    assert p.file == "broken.yaml" and p.document == 1 and p.field == "spec.readonly"
    assert "Extra inputs are not permitted" in p.message
    assert p.line == 6  # the line of the offending field, not just of the document
    assert str(p).startswith("broken.yaml:6 (document 1): spec.readonly:")


def test_bad_values_and_cross_references(tmp_path):
    problems = _broken(tmp_path, """
apiVersion: trainadmit.io/v1alpha1
kind: Pool
metadata: {name: bad-pool}
spec:
  gpu: {perNode: 8}
  topology: {default: pod, levels: [{name: node, nodeLabel: kubernetes.io/hostname, maxNodes: 1}]}
  nccl: {env: {NCCL_IB_TIMEOUT: "99"}}
---
apiVersion: trainadmit.io/v1alpha1
kind: Quota
metadata: {name: q}
spec: {namespaces: [x], allowedPools: [nope]}
""")
    fields = {p.field for p in problems}
    assert "spec.topology" in fields  # default 'pod' is not a level
    assert "spec.nccl.env.NCCL_IB_TIMEOUT" in fields  # 99 is outside 0-31: named by variable
    text = "\n".join(map(str, problems))
    assert "must be from 0 to 31" in text


def test_cross_reference_errors(tmp_path):
    problems = _broken(tmp_path, "apiVersion: trainadmit.io/v1alpha1\nkind: Quota\nmetadata: {name: q}\n"
                                 "spec: {namespaces: [x], allowedPools: [nope], allowedPriorities: [urgent]}\n")
    assert {(p.file, p.field) for p in problems} == {("broken.yaml", "spec.allowedPools[0]"),
                                                     ("broken.yaml", "spec.allowedPriorities[0]")}


def test_duplicate_names_unknown_kinds_and_yaml_errors(tmp_path):
    dup = _broken(tmp_path, "apiVersion: trainadmit.io/v1alpha1\nkind: Dataset\nmetadata: {name: c4}\n"
                            "spec: {claimName: other, mountPath: /x}\n")
    assert dup[0].file == "storage.yaml" and dup[0].message == "Dataset 'c4' is already defined in broken.yaml:1"
    kind = _broken(tmp_path / "k", "apiVersion: trainadmit.io/v1alpha1\nkind: Pools\nmetadata: {name: c}\n")
    assert kind[0].field == "kind" and "unknown kind 'Pools'" in kind[0].message
    syntax = _broken(tmp_path / "s", "kind: [unclosed\n")
    assert syntax[0].line == 2 and "not valid YAML" in syntax[0].message


def test_missing_or_two_platforms(tmp_path):
    d = tmp_path / "p"
    shutil.copytree(POLICIES, d)
    (d / "platform.yaml").unlink()
    with pytest.raises(PolicyError, match="exactly one Platform document is required, found 0"):
        load_policy(d)
    with pytest.raises(PolicyError, match="policy directory does not exist"):
        load_policy(tmp_path / "missing")


def test_schema_names_every_kind():
    from trainadmit.authoring.schema import policy_json_schema

    schema = policy_json_schema()
    kinds = set(schema["discriminator"]["mapping"])
    assert kinds == {"Platform", "Pool", "Dataset", "CheckpointClass", "PriorityTier", "Quota", "Rule"}
