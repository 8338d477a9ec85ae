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


def with_gpus(obj: dict, gpus: int = 8) -> dict:
    """The workload as a GPU workload: every regular container of every template asks for ``gpus`` GPUs
    (a TrainJob's in spec.trainer.resourcesPerNode, where Trainer puts them)."""
    import copy

    from trainadmit.engine.workloads import workload_of

    obj = copy.deepcopy(obj)
    if obj.get("kind") == "TrainJob":
        trainer = obj["spec"].setdefault("trainer", {})
        trainer.setdefault("resourcesPerNode", {}).setdefault("limits", {})["nvidia.com/gpu"] = gpus
        return obj
    for template in workload_of(obj).templates:
        for ref in template.main_containers:
            resources = ref.body.setdefault("resources", {})
            resources.setdefault("limits", {})["nvidia.com/gpu"] = gpus
            (resources.get("requests") or {}).pop("nvidia.com/gpu", None)
    return obj


def rules_of(decision) -> set[str]:
    return {v.rule for v in decision.violations}
