"""Policy directories for a test: the bundled policies with a few fields changed, and one per gang backend."""

from __future__ import annotations

from pathlib import Path

import yaml

from support.manifests import load_yaml
from support.paths import POLICIES


def write_policy(directory: Path, platform: dict | None = None, extra: list[dict] | None = None,
                 replace: list[dict] | None = None) -> Path:
    """Copy the bundled policies into ``directory`` with Platform.spec fields overridden, ``extra`` documents
    added and ``replace`` documents instead of the bundled ones of the same kind and name."""
    directory.mkdir(parents=True, exist_ok=True)
    instead = {(d["kind"], d["metadata"]["name"]): d for d in replace or []}
    for src in POLICIES.glob("*.yaml"):
        docs = [instead.get((d["kind"], d["metadata"]["name"]), d) for d in load_yaml(src)]
        for doc in docs:
            if doc["kind"] == "Platform" and platform:
                for key, value in platform.items():
                    if isinstance(value, dict) and isinstance(doc["spec"].get(key), dict):
                        doc["spec"][key] = {**doc["spec"][key], **value}
                    else:
                        doc["spec"][key] = value
        (directory / src.name).write_text(yaml.safe_dump_all(docs, sort_keys=False))
    if extra:
        (directory / "extra.yaml").write_text(yaml.safe_dump_all(extra, sort_keys=False))
    return directory


BACKENDS = {
    # a 1.37 cluster with the gates Job.spec.scheduling and its topology constraint need (the bundled policy
    # leaves the version and backend to auto and declares no gates)
    "native-job": {"kubernetesVersion": "1.37",
                   "featureGates": ["GenericWorkload", "WorkloadWithJob", "TopologyAwareWorkloadScheduling"],
                   "gang": {"backend": "native", "nativeMode": "job-scheduling"}},
    "native-podgroup": {"gang": {"backend": "native", "nativeMode": "pod-group"}},
    "coscheduling": {"gang": {"backend": "coscheduling"}},
    "volcano": {"gang": {"backend": "volcano", "queue": "training"}},
    "kueue": {"gang": {"backend": "kueue", "queue": "team-queue"}},
}


# A platform that runs GKE's A3 Ultra machines: a pool whose fabric is GPUDirect-RDMA (GKE multi-networking
# interfaces), which team-nlp may use. The bundled pools are InfiniBand and Ethernet, so GKE's public A3 Ultra
# manifests (tests/fixtures/real-world/gke-ctk-a3ultra-*) are refused there (intent.no-pool) and admitted here.
A3_ULTRA_POOL = {
    "apiVersion": "trainadmit.io/v1alpha1", "kind": "Pool", "metadata": {"name": "a3-ultra"},
    "spec": {"fabric": "gke-gpudirect-rdma", "gpu": {"resource": "nvidia.com/gpu", "perNode": 8},
             "nodeSelector": {"cloud.google.com/gke-accelerator": "nvidia-h200-141gb"},
             "topology": {"default": "any", "levels": [{"name": "node", "nodeLabel": "kubernetes.io/hostname",
                                                         "maxNodes": 1}]}}}


def a3_ultra_policy_dir(directory, platform: dict | None = None):
    """The bundled policies with ``A3_ULTRA_POOL``, and team-nlp's Quota allowing it as well (Platform.spec
    fields overridden by ``platform``)."""
    [quota] = [d for d in load_yaml(POLICIES / "quotas.yaml") if d["metadata"]["name"] == "team-nlp"]
    quota = {**quota, "spec": {**quota["spec"], "allowedPools": [*quota["spec"]["allowedPools"], "a3-ultra"]}}
    return write_policy(directory, platform, extra=[A3_ULTRA_POOL], replace=[quota])
