"""Builders for small test Jobs and Pods (plain dicts, as a user would write them)."""

from __future__ import annotations


def job(name="train", namespace="team-nlp", workers=4, gpus=8, labels=None, annotations=None,
        indexed=True, completions=None, env=None, extra_spec=None, container=None) -> dict:
    c = {"name": "trainer", "image": "registry.local/t:1", "resources": {"limits": {"nvidia.com/gpu": gpus}}}
    if env:
        c["env"] = env
    if container:
        c.update(container)
    spec = {"parallelism": workers, "completions": workers if completions is None else completions,
            "template": {"spec": {"restartPolicy": "Never", "containers": [c]}}}
    if indexed:
        spec["completionMode"] = "Indexed"
    if extra_spec:
        spec["template"]["spec"].update(extra_spec)
    meta = {"name": name, "namespace": namespace}
    if labels:
        meta["labels"] = labels
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": spec}


def rules_of(decision) -> set[str]:
    return {v.rule for v in decision.violations}
