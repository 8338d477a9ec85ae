"""Render decisions for people (text) and for machines (JSON, YAML, JSON patch; JUnit and SARIF in
``cireports``), for `check` and for any other command that reports decisions the same way.

Each output is written object by object as the objects are decided (``Output.add``), so that
`check` holds one object at a time however many it reads; the bytes are those of rendering the
whole list at the end (``json.dumps(..., indent=2)``, ``yaml.dump_all``), which is what the
tests compare them with.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import replace
from typing import IO, TYPE_CHECKING, Any, Protocol

from ..engine import Decision
from ..engine.workloads import Adapter, Workload
from ..grammars.lazydataclass import dataclass
from . import fastjson, fastyaml
from .inputs import Item

if TYPE_CHECKING:
    from ..authoring.explain import Explainer


@dataclass(frozen=True)
class Options:
    """What every renderer is told about the run (the same for `check` and any command that reuses them)."""

    namespace: str = "default"  # for objects that name none
    explainer: Explainer | None = None
    strict: bool = False  # warnings fail, as denials do
    quiet: bool = False  # only what failed
    cluster: bool = False  # a cluster view was given: "unverified" means the view lacks those kinds

    def failed(self, decision: Decision) -> bool:
        return not decision.allowed or (self.strict and bool(decision.warnings))


# Kinds the apiserver serves cluster-scoped (no namespace: one a manifest writes is dropped), by API group: the
# core and built-in groups' (`kubectl api-resources --namespaced=false`) and those of the schedulers, operators and
# drivers trainadmit reads (their CRDs' spec.scope: Cluster, tests/fixtures/operators and reports/crds).
CLUSTER_SCOPED: dict[str, frozenset[str]] = {
    "": frozenset({"Namespace", "Node", "PersistentVolume", "ComponentStatus"}),
    "rbac.authorization.k8s.io": frozenset({"ClusterRole", "ClusterRoleBinding"}),
    "apiextensions.k8s.io": frozenset({"CustomResourceDefinition"}),
    "apiregistration.k8s.io": frozenset({"APIService"}),
    "admissionregistration.k8s.io": frozenset({"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration",
                                               "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
                                               "MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"}),
    "scheduling.k8s.io": frozenset({"PriorityClass"}),
    "storage.k8s.io": frozenset({"StorageClass", "CSIDriver", "CSINode", "VolumeAttachment", "VolumeAttributesClass"}),
    "node.k8s.io": frozenset({"RuntimeClass"}),
    "networking.k8s.io": frozenset({"IngressClass", "IPAddress", "ServiceCIDR"}),
    "certificates.k8s.io": frozenset({"CertificateSigningRequest", "ClusterTrustBundle"}),
    "flowcontrol.apiserver.k8s.io": frozenset({"FlowSchema", "PriorityLevelConfiguration"}),
    "resource.k8s.io": frozenset({"DeviceClass", "ResourceSlice", "DeviceTaintRule"}),
    "trainer.kubeflow.org": frozenset({"ClusterTrainingRuntime"}),
    "kueue.x-k8s.io": frozenset({"ClusterQueue", "ResourceFlavor", "WorkloadPriorityClass", "Topology", "Cohort",
                                 "AdmissionCheck", "MultiKueueCluster", "MultiKueueConfig"}),
    "scheduling.volcano.sh": frozenset({"Queue"}),
    "scheduling.run.ai": frozenset({"Queue"}),
    "kai.scheduler": frozenset({"Topology"}),
}


def cluster_scoped(obj: Any) -> bool:
    """Whether ``obj`` is of a kind the apiserver serves without a namespace (``CLUSTER_SCOPED``)."""
    if not isinstance(obj, dict) or not isinstance(obj.get("apiVersion"), str):
        return False
    api_version = obj["apiVersion"]
    group = api_version.rpartition("/")[0] if "/" in api_version else ""
    return obj.get("kind") in CLUSTER_SCOPED.get(group, ())


def identity(item: Item, namespace: str = "default") -> str:
    """``Kind namespace/name``, or ``Kind name`` for a cluster-scoped kind (a Namespace is in none)."""
    view = Workload(item.obj if isinstance(item.obj, dict) else {}, Adapter())  # identity only
    if cluster_scoped(item.obj):
        return f"{view.kind} {view.display_name}"
    return f"{view.kind or '?'} {view.namespace or item.namespace or namespace}/{view.display_name}"


def short_reason(reason: str) -> str:
    """The first clause of why an object is not matched (``kind v1/Namespace is left alone``, ``not a GPU
    workload``; ``GPUs not counted: <the objects>``, whose objects are the point): one short line; the whole
    reason is in -o json and, with --explain, under the line."""
    head, _, rest = reason.partition(": ")
    if head == "GPUs not counted" and rest:
        return f"{head}: {rest.split(': ', 1)[0]}"
    return head.split("; ", 1)[0]


def record(item: Item, decision: Decision, options: Options | None = None) -> dict[str, Any]:
    """The machine-readable decision for one object (the `-o json` element, and the parity unit)."""
    options = options or Options()
    out: dict[str, Any] = {"source": item.source, "document": item.index}
    if item.item is not None:
        out["item"] = item.item
    out["object"] = identity(item, options.namespace)
    out.update(decision.as_dict())
    out.pop("companions", None)
    if decision.companions:
        out["companions"] = decision.companions
    if options.explainer is not None:
        out["explain"] = explanation(item, decision, options)
    return out


def explanation(item: Item, decision: Decision, options: Options) -> dict[str, list[dict[str, str]]]:
    """`--explain` as data: the policy setting behind each injected field, and behind each violation."""
    explainer = options.explainer
    assert explainer is not None
    namespace = _namespace(item, options)
    return {"injected": [{"path": inj.path, "source": str(inj.source), "at": explainer.injection(inj.source)}
                         for inj in decision.injections],
            "violations": [{"rule": v.rule, "at": explainer.violation(v, decision, namespace)}
                           for v in decision.violations]}


def _namespace(item: Item, options: Options) -> str:
    meta = item.obj.get("metadata") if isinstance(item.obj, dict) else None
    namespace = meta.get("namespace") if isinstance(meta, dict) else None
    return str(namespace or item.namespace or options.namespace)


def _unverified(decision: Decision, options: Options) -> str:
    if options.cluster:  # a view was given, but it holds no list of these objects' kinds
        return f"  ? not verified (the cluster view holds no list of their kinds): {', '.join(decision.unverified)}"
    return f"  ? not verified without a cluster view: {', '.join(decision.unverified)}"


def pods_text(summary: dict) -> str:
    """The Pods of a decided workload as what they are: the GPU workers grouped by GPUs per Pod, then the
    roles that request none (two 8-GPU workers and a CPU launcher: "2 \u00d7 8 nvidia.com/gpu + 1 CPU launcher")."""
    resource = summary.get("gpuResource")
    by_gpus: dict[int, int] = {}
    others: dict[str, int] = {}
    for role in summary.get("roles") or ():
        if role["gpus"]:
            by_gpus[role["gpus"]] = by_gpus.get(role["gpus"], 0) + role["pods"]
        else:
            others[role["role"]] = others.get(role["role"], 0) + role["pods"]
    parts = [f"{pods} × {gpus} {resource}" for gpus, pods in sorted(by_gpus.items(), reverse=True)]
    parts += [f"{pods} CPU {role}" for role, pods in others.items()]
    return " + ".join(parts) or f"{summary.get('pods')} × {summary.get('gpusPerPod')} {resource}"


def text(item: Item, decision: Decision, options: Options | None = None) -> str:
    options = options or Options()
    head = f"{item.label}: {identity(item, options.namespace)}: "
    if not decision.matched:
        line = head + f"not matched ({short_reason(decision.reason)})"
        return line + (f"\n    {decision.reason}" if options.explainer is not None else "")
    s = decision.summary
    lines = []
    if decision.allowed:
        detail = ""
        if s.get("gpuResource"):
            detail = (f" (pool {s.get('pool')}, {pods_text(s)}, "
                      f"gang {s.get('gang')}, topology {s.get('topology') or '-'}, "
                      f"priority {s.get('priority') or '-'})")
        lines.append(head + "ADMITTED" + detail)
        if decision.patch:
            concerns = sorted({i.concern for i in decision.injections})
            lines.append(f"  injected {', '.join(concerns)} ({len(decision.patch)} patch operations)")
    else:
        lines.append(head + f"DENIED ({_plural(len(decision.denials), 'problem')})")
    lines.extend(violation_lines(decision))
    for note in s.get("notes") or ():  # what was left to the user's choice, or to another component
        lines.append(f"  note: {note}")
    if decision.unverified:  # what the Pods need that nobody checked (see --cluster)
        lines.append(_unverified(decision, options))
    lines.extend(explain_lines(item, decision, options))
    for comp in decision.companions:
        meta = comp.get("metadata", {})
        lines.append(f"  reconciler creates {comp.get('kind')} {meta.get('namespace')}/{meta.get('name')} "
                     f"({comp.get('apiVersion')})")
    return "\n".join(lines)


def violation_lines(decision: Decision) -> list[str]:
    """Each denial with its fix, then each warning, then each note: how every command prints what a decision
    found."""
    lines = []
    for v in decision.denials:
        lines.append(f"  ✗ [{v.rule}] {v.path}: {v.message}")
        if v.hint:
            lines.append(f"    fix: {v.hint}")
    for v in decision.warnings:
        lines.append(f"  ! warning [{v.rule}] {v.path}: {v.message}" + (f" ({v.hint})" if v.hint else ""))
    for v in decision.notes:  # the platform's, or the workload's own choice: --strict does not fail on them
        lines.append(f"  note [{v.rule}] {v.path}: {v.message}" + (f" ({v.hint})" if v.hint else ""))
    return lines


def explain_lines(item: Item, decision: Decision, options: Options) -> list[str]:
    if options.explainer is None:
        return []
    data = explanation(item, decision, options)
    lines = [f"    {inj['path']}  <- {inj['source']}" + (f"  ({inj['at']})" if inj["at"] else "")
             for inj in data["injected"]]
    lines += [f"    [{v['rule']}] {v['at']}" for v in data["violations"]]
    return lines


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def to_json(value: Any) -> str:
    """``json.dumps(value, indent=2, ensure_ascii=False)``: the same text (``fastjson``)."""
    return fastjson.dumps(value)


def patch_element(item: Item, decision: Decision, options: Options | None = None) -> dict[str, Any]:
    """The `-o patch` element: where the object came from, the verdict and the JSON patch (none for a
    denied object: the apiserver would store nothing)."""
    out: dict[str, Any] = {"source": item.source, "document": item.index}
    if item.item is not None:
        out["item"] = item.item
    out.update({"object": identity(item, (options or Options()).namespace), "allowed": decision.allowed,
                "patch": decision.patch if decision.allowed else []})
    return out


YAML_OPTIONS = {"sort_keys": False, "default_flow_style": False, "width": 120}
# YAML ends a comment at any of its line breaks; a reason or name from the object could hold one
_YAML_BREAKS = {ord(c): f"\\u{ord(c):04x}" for c in "\n\r\x85\u2028\u2029"}


class Output(Protocol):
    """One report, written as the objects are decided: ``add`` each decision, ``problem`` each input
    that could not be decided (also printed on stderr by the command), ``close`` with the summary line."""

    def add(self, item: Item, decision: Decision) -> None: ...

    def problem(self, message: str, source: str | None, line: int | None = None,
                column: int | None = None) -> None: ...

    def close(self, summary: str) -> None: ...


class TextOutput:
    """A paragraph per object (with --quiet: per failed object), then the summary line."""

    def __init__(self, out: IO[str], options: Options | None = None):
        self.out, self.options = out, options or Options()

    def add(self, item: Item, decision: Decision) -> None:
        if self.options.quiet and not self.options.failed(decision):
            return
        self.out.write(text(item, decision, self.options) + "\n")

    def problem(self, message: str, source: str | None, line: int | None = None,
                column: int | None = None) -> None:
        pass

    def close(self, summary: str) -> None:
        self.out.write(summary + "\n")


class JsonOutput:
    """A JSON array written element by element: the bytes of ``to_json`` of the whole list.

    ``json.dumps`` never writes a raw line break inside a string, so indenting every line of an
    element by two spaces puts it one level deeper, exactly as the list's encoder would."""

    def __init__(self, out: IO[str], element: Callable[[Item, Decision, Options], Any],
                 options: Options | None = None):
        self.out, self.element, self.count = out, element, 0
        self.options = options or Options()

    def add(self, item: Item, decision: Decision) -> None:
        if self.options.quiet and not self.options.failed(decision):
            return
        self.out.write(("[\n  " if self.count == 0 else ",\n  ")
                       + to_json(self.element(item, decision, self.options)).replace("\n", "\n  "))
        self.count += 1

    def problem(self, message: str, source: str | None, line: int | None = None,
                column: int | None = None) -> None:
        pass

    def close(self, summary: str) -> None:
        self.out.write("\n]\n" if self.count else "[]\n")


class YamlOutput:
    """The objects as they will be stored (mutated, with the reconciler's companions), one YAML
    stream: the bytes of ``yaml.dump_all`` of them all with libyaml's dumper, so that
    ``check -o yaml | kubectl apply -f -`` applies exactly what admission would store.

    A denied object is not in the stream: a comment line stands in its place (the text output's
    head line for it) and its denial goes to stderr. An object no policy matches is stored as it
    is, after a comment line saying why. ``--explain`` adds its lines as comments before the object."""

    def __init__(self, out: IO[str], err: IO[str] | None = None, options: Options | None = None):
        self.out, self.err = out, err if err is not None else sys.stderr
        self.options = options or Options()
        self.dumper = fastyaml.open_dumper(out, **YAML_OPTIONS)

    def _comment(self, line: str) -> None:
        self.out.write("# " + line.translate(_YAML_BREAKS) + "\n")

    def add(self, item: Item, decision: Decision) -> None:
        if not decision.matched:  # the line, and with --explain the whole reason under it: a comment line each
            self._comment(text(item, decision, replace(self.options, explainer=None)))
            if self.options.explainer is not None:
                self._comment(decision.reason)
        for line in explain_lines(item, decision, self.options):
            self._comment(line.strip())
        if not decision.allowed:
            self._comment(f"{item.label}: {identity(item, self.options.namespace)}: DENIED "
                          f"({_plural(len(decision.denials), 'problem')}): not printed, it would not be stored")
            print(f"{item.label}: {decision.denial_message()}", file=self.err)
            return
        self.dumper.represent(decision.mutated if decision.mutated is not None else item.obj)
        for companion in decision.companions:
            self.dumper.represent(companion)

    def problem(self, message: str, source: str | None, line: int | None = None,
                column: int | None = None) -> None:
        pass

    def close(self, summary: str) -> None:
        try:
            self.dumper.close()
        finally:
            self.dumper.dispose()
