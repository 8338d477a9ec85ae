"""GPUs that come from DRA claims (NVIDIA's GPU DRA driver examples, tests/fixtures/dra/) and from a TrainJob's
runtime: the workloads and claim templates the engine, check and apiserver tests build alike."""

from __future__ import annotations

import copy

from support.builders import job
from support.manifests import load_yaml
from support.paths import FIXTURES

NVIDIA = FIXTURES / "dra" / "nvidia-dra-driver-gpu" / "examples"


def docs(path, kind: str | None = None) -> list[dict]:
    return [d for d in load_yaml(path) if kind is None or d.get("kind") == kind]


def one(path, kind: str) -> dict:
    [found] = docs(path, kind)
    return copy.deepcopy(found)


def dra_job(template: str, workers: int = 4, namespace: str = "team-nlp", name: str = "dra-train") -> dict:
    """A gang Job whose Pods take their GPUs from a claim template only (the issue's shape)."""
    obj = job(name=name, namespace=namespace, workers=workers)
    spec = obj["spec"]["template"]["spec"]
    spec["containers"][0]["resources"] = {"claims": [{"name": "gpus"}]}
    spec["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": template}]
    return obj


def eight_gpus(namespace: str = "team-nlp", name: str = "eight-gpus") -> dict:
    """NVIDIA's single-gpu template (gpu-test1) asking for a node's 8."""
    rct = one(NVIDIA / "gpu-test1.yaml", "ResourceClaimTemplate")
    rct["metadata"] = {"name": name, "namespace": namespace}
    rct["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"] = 8
    return rct


def trainjob(runtime: str, num_nodes: int | None = None, namespace: str = "team-nlp", kind: str | None = None,
             name: str = "tune") -> dict:
    """A TrainJob on ``runtime`` (a ClusterTrainingRuntime unless ``kind`` says otherwise), ``num_nodes`` if given."""
    trainer: dict = {}
    if num_nodes is not None:
        trainer["numNodes"] = num_nodes
    ref = {"name": runtime, **({"kind": kind} if kind else {})}
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": name, "namespace": namespace}, "spec": {"runtimeRef": ref, "trainer": trainer}}
