"""Generated training Jobs for `bench/check.py`: varied shapes, as a CI repository holds them.

Deterministic (seeded) so that two runs, and two branches, check the same manifests. The mix is
what a repository of training manifests looks like: mostly admitted GPU Jobs on either pool (one
to sixteen workers, sidecars, environment, datasets, checkpoints, priorities), about one in eight
denied for a reason a user really gets wrong (partial nodes, an unknown pool, a tier the namespace
may not use, a non-Indexed gang) and a few CPU Jobs that no policy matches. Most files hold one
Job; every fourth holds several, as kustomize output or a multi-document manifest does.
"""

from __future__ import annotations

import random
from pathlib import Path

import yaml

NAMESPACES = ["team-nlp", "team-vision", "team-speech", "default"]
POOLS = {"h100-ib": 8, "l40s-eth": 4}
DATASETS = ["c4", "imagenet", "c4,imagenet"]
IMAGES = ["registry.local/llama:1.0", "registry.local/vit:2.3", "registry.local/whisper:0.9",
          "registry.local/mixtral:1.1"]


def _env(rng: random.Random, count: int) -> list[dict]:
    out = []
    for i in range(count):
        if rng.random() < 0.2:
            out.append({"name": f"POD_FIELD_{i}", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}})
        else:
            out.append({"name": f"TRAIN_SETTING_{i}", "value": rng.choice(["1", "true", "bf16", f"/data/run-{i}",
                                                                           "cosine", "0.0003"])})
    return out


def _container(rng: random.Random, name: str, gpus: int | None, env: int) -> dict:
    c: dict = {"name": name, "image": rng.choice(IMAGES)}
    if gpus is not None:
        c["command"] = ["torchrun", f"--nproc-per-node={max(gpus, 1)}", "train.py", "--config", f"configs/{name}.yaml"]
        limits: dict = {"nvidia.com/gpu": gpus, "memory": f"{max(gpus, 1) * rng.choice([20, 40, 64])}Gi",
                        "cpu": str(max(gpus, 1) * 12)}
        c["resources"] = {"limits": limits}
    else:
        c["resources"] = {"limits": {"cpu": "1", "memory": "2Gi"}}
    if env:
        c["env"] = _env(rng, env)
    if rng.random() < 0.5:
        c["volumeMounts"] = [{"name": "scratch", "mountPath": "/scratch"}]
    return c


def job(rng: random.Random, index: int) -> dict:
    """One Job; the kind of problem (if any) is drawn from the mix described above."""
    roll = rng.random()
    namespace = rng.choice(NAMESPACES)
    labels = {"owner": f"team-{index % 7}", "app.kubernetes.io/name": f"run-{index}"}
    annotations: dict = {}
    pool = "h100-ib"  # the default pool for nvidia.com/gpu
    if rng.random() < 0.7:
        pool = labels["trainadmit.io/pool"] = rng.choice(sorted(POOLS))
    per_node = POOLS[pool]
    # team-nlp may run 16 workers and 128 GPUs; the other namespaces 8 workers and 32 GPUs
    workers = rng.choice([1, 2, 4, 8, 16] if namespace == "team-nlp" else [1, 2, 4] if per_node == 8 else [1, 2, 4, 8])
    gpus = per_node if workers > 1 else rng.choice([1, 2, per_node])
    if rng.random() < 0.5:
        annotations["trainadmit.io/datasets"] = rng.choice(DATASETS)
    if rng.random() < 0.4:
        annotations["trainadmit.io/checkpoint"] = "shared"
    if rng.random() < 0.3:
        annotations["trainadmit.io/priority"] = rng.choice(["normal", "low"])
    indexed = True
    cpu_only = False
    if roll < 0.04:
        cpu_only = True
        labels.pop("trainadmit.io/pool", None)
        annotations.clear()
    elif roll < 0.07:
        gpus = per_node - 2 if per_node > 2 else 1  # partial nodes across workers
        workers = max(workers, 2)
    elif roll < 0.09:
        labels["trainadmit.io/pool"] = pool.replace("-", "_")  # a typo'd pool
    elif roll < 0.11:
        annotations["trainadmit.io/priority"] = "high"  # the teams quota does not allow it
        namespace = "team-vision"
    elif roll < 0.13:
        indexed = False
        workers = max(workers, 2)
    containers = [_container(rng, "trainer", None if cpu_only else gpus, rng.randint(6, 48))]
    for s in range(rng.randint(0, 3)):
        containers.append(_container(rng, f"sidecar-{s}", None, rng.randint(0, 12)))
    spec: dict = {"parallelism": workers, "completions": workers, "backoffLimit": rng.choice([0, 3, 6]),
                  "template": {"metadata": {"labels": {"app.kubernetes.io/name": f"run-{index}"}},
                               "spec": {"restartPolicy": "Never", "containers": containers,
                                        "volumes": [{"name": "scratch", "emptyDir": {}}]}}}
    if indexed:
        spec["completionMode"] = "Indexed"
    meta: dict = {"name": f"train-{index:05d}", "namespace": namespace, "labels": labels}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": spec}


def write_corpus(directory: Path, count: int, seed: int = 15) -> list[Path]:
    """``count`` Jobs under ``directory``: one per file, every fourth file holding up to five."""
    directory.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    files, index = [], 0
    while index < count:
        n = min(rng.randint(2, 5) if len(files) % 4 == 3 else 1, count - index)
        docs = [job(rng, index + i) for i in range(n)]
        index += n
        path = directory / f"job-{len(files):05d}.yaml"
        path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
        files.append(path)
    return files
