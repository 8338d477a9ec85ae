"""`check --explain`: where each injected value and each rule comes from, as file:line, and why a rule matters.

An injected value points at the policy field that prescribed it (``pools.yaml:31`` is the line of
``spec.nccl.env.NCCL_IB_HCA`` in Pool h100-ib); one the policy never sets is its model's default and
says so, with the document that could set it. A violation of a built-in rule points at the policy
setting that configured it for this object (the namespace's Quota, the object's Pool, the Platform)
when one did, then at the rule's declaration in the engine; a custom rule at its Rule document; plus
the line of a ``Platform.spec.rules`` override when there is one. Policy files are composed again
here, only when --explain asks: the loader keeps no YAML nodes.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from ..engine import RULES, Decision, Source, Violation
from ..engine.paths import field_path
from ..policy import PolicySet
from ..policy.loader import compose_documents, field_line

# The policy setting whose value a built-in rule compares the object with: (the policy kind whose
# document applies to the object, the field in it). The document is the namespace's Quota, the
# object's Pool or the Platform. Rules absent here are fixed by the rule itself (a shape, a grammar).
RULE_SETTINGS: dict[str, tuple[str, tuple[str, ...]]] = {
    "quota.gpus-per-job": ("Quota", ("spec", "maxGPUsPerJob")),
    "quota.workers-per-job": ("Quota", ("spec", "maxWorkersPerJob")),
    "quota.pool-not-allowed": ("Quota", ("spec", "allowedPools")),
    "quota.priority-not-allowed": ("Quota", ("spec", "allowedPriorities")),
    "quota.namespace-hard": ("Quota", ("spec", "gpuQuota")),
    "quota.namespace-remaining": ("Quota", ("spec", "gpuQuota")),
    "quota.pool-capacity": ("Pool", ("spec", "capacityNodes")),
    "topology.whole-node": ("Pool", ("spec", "gpu", "perNode")),
    "topology.single-node-fit": ("Pool", ("spec", "gpu", "perNode")),
    "topology.domain-fit": ("Pool", ("spec", "topology", "levels")),
    "intent.unknown-topology": ("Pool", ("spec", "topology", "levels")),
    "rdma.pool-without-rdma": ("Pool", ("spec", "rdma")),
    "hardware.matching-nodes": ("Pool", ("spec", "requiredNodeLabels")),
    "placement.contradiction": ("Pool", ("spec", "nodeSelector")),
    "capacity.unusable-nodes": ("Pool", ("spec", "healthSelector")),
    "preflight.unavailable": ("Pool", ("spec", "preflight", "enabled")),
    "enforced.conflict": ("Platform", ("spec", "enforce")),
    "intent.no-pool": ("Platform", ("spec", "noPool")),
    "storage.shm-exceeds-memory": ("Platform", ("spec", "shm", "sizeLimit")),
    "gang.cluster-support": ("Platform", ("spec", "gang", "backend")),
    "gang.unsupported": ("Platform", ("spec", "gang", "backend")),
    "gang.completion-mode": ("Platform", ("spec", "gang", "backend")),
    "gang.parallelism-completions": ("Platform", ("spec", "gang", "backend")),
}


def _exact_line(node, loc: tuple) -> int | None:
    """The line of ``loc`` (of its key; of the item for a list index) when every part of it is in the
    document, else None: ``field_line`` answers with the deepest part that exists, which for an
    unset field is a line that never set it."""
    line = None
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            pair = next(((k, v) for k, v in node.value if getattr(k, "value", None) == part), None)
            if pair is None:
                return None
            key, node = pair
            line = key.start_mark.line + 1
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            return None
    return line


class Explainer:
    def __init__(self, policy: PolicySet, directory: str | Path):
        self.policy = policy
        self.root = Path(directory)
        self._nodes: dict[str, dict[int, object]] = {}

    def _node(self, file: str, document: int):
        nodes = self._nodes.get(file)
        if nodes is None:
            try:
                text = (self.root / file).read_text(encoding="utf-8")
                nodes = {index: node for index, _, node in compose_documents(text)}
            except (OSError, ValueError):
                nodes = {}
            self._nodes[file] = nodes
        return nodes.get(document)

    def field(self, kind: str, name: str, field: tuple) -> str:
        """``file:line`` of a field of a policy document (the document's line when the field is absent)."""
        ref = self.policy.sources.get((kind, name))
        if ref is None:
            return ""
        node = self._node(ref.file, ref.document)
        line = (field_line(node, field) if node is not None and field else None) or ref.line
        return f"{ref.file}:{line}"

    def setting(self, kind: str, name: str, field: tuple) -> tuple[str, bool]:
        """(``file:line``, set): where the document sets ``field``, or where the document is when it does
        not (``set`` False: the value is the model's default). ("", False) when there is no such document."""
        ref = self.policy.sources.get((kind, name))
        if ref is None:
            return "", False
        node = self._node(ref.file, ref.document)
        line = _exact_line(node, field) if node is not None and field else None
        return (f"{ref.file}:{line}", True) if line is not None else (f"{ref.file}:{ref.line}", False)

    def injection(self, source: Source) -> str:
        if source.kind == "object":
            return "the object's own intent key"
        where, is_set = self.setting(source.kind, source.name, source.field)
        if not where:
            return f"default of {source.kind}.{field_path(source.field)}: the policy has no {source.kind} document"
        if is_set:
            return where
        return f"default: {source.kind} {source.name} at {where} does not set {field_path(source.field)}"

    def rule(self, rule_id: str) -> str:
        platform = self.policy.platform_name
        override = ""
        if rule_id in self.policy.platform.rules:
            override = f"; action set at {self.field('Platform', platform, ('spec', 'rules', rule_id))}"
        if rule_id.startswith("custom."):
            name = rule_id.removeprefix("custom.")
            return f"Rule {name} at {self.field('Rule', name, ())}{override}"
        declared = RULES.get(rule_id)
        if declared is None:
            return "unknown rule"
        return f"built-in rule declared at {declared.origin}{override}"

    def violation(self, violation: Violation, decision: Decision, namespace: str | None) -> str:
        """For one violation of this decision: the policy setting that configured it, then ``rule()``."""
        configured = self._configured_by(violation.rule, decision, namespace)
        declared = RULES.get(violation.rule)
        why = f"; why: {declared.explain}" if declared is not None and declared.explain else ""
        return (f"{configured}; " if configured else "") + self.rule(violation.rule) + why

    def _configured_by(self, rule_id: str, decision: Decision, namespace: str | None) -> str:
        setting = RULE_SETTINGS.get(rule_id)
        if setting is None:
            return ""
        kind, field = setting
        name = self._document(kind, decision, namespace)
        if name is None:
            return ""
        where, is_set = self.setting(kind, name, field)
        return f"set by {kind} {name}: {field_path(field)} ({where})" if is_set else ""

    def _document(self, kind: str, decision: Decision, namespace: str | None) -> str | None:
        if kind == "Platform":
            return self.policy.platform_name
        if kind == "Pool":
            pool = decision.summary.get("pool")
            return str(pool) if pool else None
        found = self.policy.quota_for(namespace)
        return found[0] if found is not None else None
