"""`check --explain`: where each injected value and each rule comes from, as file:line.

An injected value points at the policy field that prescribed it (``pools.yaml:31`` is the line of
``spec.nccl.env.NCCL_IB_HCA`` in Pool h100-ib); a violation points at the rule's declaration in the
engine (from the registry) or at the custom Rule document, plus the line of a ``Platform.spec.rules``
override when there is one. Policy files are composed again here, only when --explain asks: the
loader keeps no YAML nodes.
"""

from __future__ import annotations

from pathlib import Path

from ..engine import RULES, Source
from ..policy import PolicySet
from ..policy.loader import compose_documents, field_line


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

    def injection(self, source: Source) -> str:
        if source.kind == "object":
            return "the object's own intent key"
        return self.field(source.kind, source.name, source.field)

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
