"""Stored versus predicted: what the apiserver stored through trainadmit's webhooks against `trainadmit check`.

The claim under test is DESIGN §4's "the CLI reads objects as users wrote them, the server gets them
defaulted, and both must reach the same decision and the same injected fields". The prediction is
`trainadmit check -o json` (the real command, in-process) over the objects as written, with a
``--cluster`` snapshot read from the same apiserver; the stored object is what a real create
through the registered webhooks returned.

How the two are compared (a comparison that cannot fail would prove nothing; tests/integration
shows this one failing when a field is dropped):

1. every operation of check's patch is found in the stored object (quantities compared as the
   apiserver writes them: ``8`` and ``"8"`` are one value);
2. the whole object is equal once both went through the same apiserver normalization: the
   prediction is created with ``dryRun=All`` in a namespace the webhooks skip (``RENDER_NS``), so it
   gets exactly the defaults, quantity canonicalization and pruning the stored one got. What differs by
   construction is removed from both, and only that: server-set metadata (uid, resourceVersion,
   creationTimestamp, managedFields, generation, namespace; the name of a ``generateName`` object),
   status, the Job's selector and the labels that carry its uid, a Pod's service-account token
   volume (its name has a random suffix), and the order of tolerations (a set: the
   DefaultTolerationSeconds plugin appends its own before the webhooks run when creating, after the
   prediction's when rendering).

Works for any kind the apiserver serves (custom resources too, with their CRD's defaults and pruning),
so an operator kind needs only its CRD installed and its example objects listed.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from support.cli import run_cli
from support.controlplane import KubeError, KubeHTTP

SNAPSHOT_LISTS = ("/api/v1/nodes", "/api/v1/resourcequotas", "/api/v1/persistentvolumeclaims",
                  "/apis/scheduling.k8s.io/v1/priorityclasses",
                  "/apis/k8s.cni.cncf.io/v1/network-attachment-definitions",
                  "/apis/scheduling.volcano.sh/v1beta1/queues", "/apis/kueue.x-k8s.io/v1beta1/localqueues",
                  "/apis/resource.k8s.io/v1/resourceclaimtemplates", "/apis/resource.k8s.io/v1/resourceclaims",
                  "/apis/resource.k8s.io/v1/deviceclasses", "/apis/trainer.kubeflow.org/v1alpha1/trainingruntimes",
                  "/apis/trainer.kubeflow.org/v1alpha1/clustertrainingruntimes", "/apis")
JOB_UID_LABELS = ("controller-uid", "batch.kubernetes.io/controller-uid")
JOB_NAME_LABELS = ("job-name", "batch.kubernetes.io/job-name")


def save_snapshot(http: KubeHTTP, directory: Path) -> list[str]:
    """What an operator saves for `check --cluster`: the lists (as the API returns them) and `/apis`."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, url in enumerate(SNAPSHOT_LISTS):
        try:
            body = http.request("GET", url)
        except KubeError as exc:
            if exc.status == 404:  # a kind whose CRD is not installed: nothing to save
                continue
            raise
        path = directory / f"{i:02d}-{url.strip('/').replace('/', '_')}.json"
        path.write_text(json.dumps(body))
        paths.append(str(path))
    return paths


def check_records(objects: list[dict], policy_dir: Path, snapshot: list[str], workdir: Path) -> list[dict]:
    """`trainadmit check -o json -p POLICY --cluster …` over the objects (one record per object)."""
    src = workdir / "objects.yaml"
    src.write_text(yaml.safe_dump_all(objects, sort_keys=False))
    args = ["check", str(src), "-p", str(policy_dir), "-o", "json"]
    for path in snapshot:
        args += ["--cluster", path]
    result = run_cli(*args)
    assert result.returncode in (0, 1), result.stderr
    records = json.loads(result.stdout)
    assert len(records) == len(objects)
    return records


def predicted(obj: dict, record: dict) -> dict:
    import jsonpatch

    return jsonpatch.JsonPatch(record["patch"]).apply(copy.deepcopy(obj)) if record["patch"] else copy.deepcopy(obj)


def loose(value):
    """A JSON value with numbers as the apiserver writes quantities (``8`` -> ``"8"``); booleans kept."""
    if isinstance(value, dict):
        return {k: loose(v) for k, v in value.items()}
    if isinstance(value, list):
        return [loose(v) for v in value]
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return value


def at(doc, pointer: str):
    cur = doc
    for token in pointer.lstrip("/").split("/"):
        token = token.replace("~1", "/").replace("~0", "~")
        cur = cur[int(token)] if isinstance(cur, list) else cur[token]
    return cur


def contains(stored, predicted) -> bool:
    """Whether a stored value carries a predicted one: maps key by key, lists item by item in any order (an
    admission plugin that ran before the webhooks, or the Job's selector generation, may have added entries
    next to what trainadmit injected), scalars as quantities."""
    if isinstance(predicted, dict):
        return isinstance(stored, dict) and all(k in stored and contains(stored[k], v) for k, v in predicted.items())
    if isinstance(predicted, list):
        return isinstance(stored, list) and all(any(contains(s, p) for s in stored) for p in predicted)
    return loose(stored) == loose(predicted)


def patch_problems(stored: dict, patch: list[dict]) -> list[str]:
    """Operations of check's patch that the stored object does not carry."""
    out = []
    for op in patch:
        path, value = op["path"], op.get("value")
        try:
            if path.endswith("/-"):
                ok = contains(at(stored, path[:-2]), [value])
            else:
                ok = contains(at(stored, path), value)
        except (KeyError, IndexError, TypeError, ValueError):
            ok = False
        if not ok:
            out.append(f"{op['op']} {path}: predicted {json.dumps(op.get('value'))[:200]}, not stored")
    return out


def normalized(obj: dict) -> dict:
    """The object without what differs between two creates of the same manifest (see the module doc)."""
    out = copy.deepcopy(obj)
    meta = out.setdefault("metadata", {})
    for key in ("uid", "resourceVersion", "creationTimestamp", "managedFields", "generation", "namespace", "selfLink"):
        meta.pop(key, None)
    generated = bool(meta.get("generateName"))
    if generated:
        meta.pop("name", None)
    out.pop("status", None)
    if out.get("kind") == "Job" and out.get("apiVersion") == "batch/v1":
        spec = out.get("spec") or {}
        spec.pop("selector", None)
        for labels in (((spec.get("template") or {}).get("metadata") or {}).get("labels") or {},
                       meta.get("labels") or {}):  # a Job without labels gets its template's, uid included
            for key in JOB_UID_LABELS + (JOB_NAME_LABELS if generated else ()):
                labels.pop(key, None)
    for pod_spec in (out.get("spec") or {}, ((out.get("spec") or {}).get("template") or {}).get("spec") or {}):
        if isinstance(pod_spec.get("tolerations"), list):  # a set: plugins before the webhooks append in their order
            pod_spec["tolerations"] = sorted(pod_spec["tolerations"], key=lambda t: json.dumps(t, sort_keys=True))
    if out.get("kind") == "Pod" and out.get("apiVersion") == "v1":
        spec = out.get("spec") or {}
        token = {v["name"] for v in spec.get("volumes") or [] if v.get("name", "").startswith("kube-api-access-")}
        spec["volumes"] = [v for v in spec.get("volumes") or [] if v.get("name") not in token] or None
        if spec["volumes"] is None:
            spec.pop("volumes")
        for group in ("containers", "initContainers"):
            for c in spec.get(group) or []:
                mounts = [m for m in c.get("volumeMounts") or [] if m.get("name") not in token]
                if mounts:
                    c["volumeMounts"] = mounts
                else:
                    c.pop("volumeMounts", None)
    return out


def differences(a, b, path: str = "") -> list[str]:
    """Field paths where two JSON values differ (for readable failures)."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for key in sorted(set(a) | set(b)):
            if key not in a or key not in b:
                side = "stored only" if key not in b else "predicted only"
                out.append(f"{path}/{key}: {side}: {json.dumps(a.get(key, b.get(key)))[:160]}")
            else:
                out += differences(a[key], b[key], f"{path}/{key}")
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in differences(x, y, f"{path}/{i}")]
    return [] if a == b else [f"{path}: stored {json.dumps(a)[:160]} != predicted {json.dumps(b)[:160]}"]


@dataclass
class Outcome:
    """One object through the apiserver, against check's record for it."""

    submitted: dict
    record: dict
    stored: dict | None = None
    refused: KubeError | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        meta = self.submitted.get("metadata") or {}
        return f"{self.submitted.get('kind')} {meta.get('namespace')}/{meta.get('name') or meta.get('generateName')}"


def with_drawn_name(obj: dict, record: dict, stored: dict) -> dict:
    """check names a ``generateName`` object ``<generateName>xxxxx`` (engine.naming), the webhook draws the 5
    characters: the prediction with the stored name in their place, so everything derived from it compares."""
    from trainadmit.engine.naming import generated

    prefix = (obj.get("metadata") or {}).get("generateName")
    name = (stored.get("metadata") or {}).get("name")
    if not prefix or (obj.get("metadata") or {}).get("name") or not name or not record.get("patch"):
        return record
    return {**record, "patch": json.loads(json.dumps(record["patch"]).replace(generated(prefix), name))}


def render(http: KubeHTTP, obj: dict, namespace: str) -> dict:
    """The apiserver's own rendering of ``obj`` (defaults, canonical quantities, pruning), stored nowhere."""
    body = copy.deepcopy(obj)
    body["metadata"]["namespace"] = namespace
    return http.create(body, dry_run=True)


def submit(http: KubeHTTP, obj: dict, record: dict, render_namespace: str) -> Outcome:
    """Create ``obj`` through the webhooks and compare with check's record: a refusal must carry every violation
    check reported; a stored object must equal the prediction (see the module doc)."""
    out = Outcome(obj, record)
    try:
        out.stored = http.create(obj)
    except KubeError as exc:
        out.refused = exc
    if not record["allowed"]:
        if out.refused is None:
            out.problems.append("stored, but check denies it: " + "; ".join(v["rule"] for v in record["violations"]))
        else:
            for v in record["violations"]:
                if f"[{v['rule']}] {v['path']}: {v['message']}" not in out.refused.message:
                    out.problems.append(f"refused without check's [{v['rule']}] {v['path']}: {v['message']}")
        return out
    if out.refused is not None:
        out.problems.append(f"refused, but check admits it: {out.refused.message}")
        return out
    assert out.stored is not None
    record = with_drawn_name(obj, record, out.stored)
    out.problems += patch_problems(out.stored, record["patch"])
    expected = render(http, predicted(obj, record), render_namespace)
    out.problems += differences(normalized(out.stored), normalized(expected))
    return out
