"""Hypothesis strategies for generated training workloads (Jobs and Pods with any mix of trainadmit's intent keys,
GPU and side containers, env, mounts, selectors, tolerations), and the bundled policy retargeted per gang backend:
shared by the engine's property tests and the server's decision-cache tests."""

from __future__ import annotations

import tempfile
from functools import cache
from pathlib import Path

from hypothesis import strategies as st

from support.policies import BACKENDS, write_policy
from trainadmit.engine import load_policy


@cache
def policy_for(backend: str):
    """The bundled policy retargeted at ``backend``, loaded once per process."""
    return load_policy(write_policy(Path(tempfile.mkdtemp()) / backend, BACKENDS[backend]))


names = st.from_regex(r"[a-z][a-z0-9-]{0,20}[a-z0-9]", fullmatch=True)
gpus = st.sampled_from([0, 1, 2, 4, 6, 8, 16])
env_entry = st.sampled_from([
    {"name": "NCCL_DEBUG", "value": "INFO"}, {"name": "NCCL_SOCKET_IFNAME", "value": "=eth1"},
    {"name": "MASTER_PORT", "value": "29500"}, {"name": "CHECKPOINT_DIR", "value": "/ckpt"},
    {"name": "NCCL_IB_HCA", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
])


@st.composite
def containers(draw, with_gpu: bool):
    count = draw(gpus) if with_gpu else 0
    c: dict = {"name": draw(names), "image": "registry.local/x:1"}
    res: dict = {}
    if count:
        res["limits"] = {"nvidia.com/gpu": draw(st.sampled_from([count, str(count)]))}
        if draw(st.booleans()):
            res["requests"] = {"nvidia.com/gpu": str(count)}
    if draw(st.booleans()):
        res.setdefault("limits", {})["memory"] = draw(st.sampled_from(["16Gi", "512Gi", "2Ti"]))
    if res:
        c["resources"] = res
    if draw(st.booleans()):
        c["env"] = draw(st.lists(env_entry, max_size=3, unique_by=lambda e: e["name"]))
    if draw(st.booleans()):
        c["volumeMounts"] = [{"name": "scratch", "mountPath": draw(st.sampled_from(["/scratch", "/dev/shm"]))}]
    if draw(st.booleans()):
        c["securityContext"] = draw(st.sampled_from([{}, {"capabilities": {"add": ["SYS_PTRACE"]}},
                                                     {"capabilities": {"add": ["IPC_LOCK"]}}]))
    return c


@st.composite
def workloads(draw):
    kind = draw(st.sampled_from(["Job", "Job", "Pod"]))
    labels = {}
    annotations = {}
    if draw(st.booleans()):
        labels["trainadmit.io/pool"] = draw(st.sampled_from(["h100-ib", "l40s-eth"]))
    if draw(st.booleans()):
        annotations["trainadmit.io/topology"] = draw(st.sampled_from(["node", "rack", "zone", "any"]))
    if draw(st.booleans()):
        annotations["trainadmit.io/datasets"] = draw(st.sampled_from(["c4", "imagenet", "c4,imagenet"]))
    if draw(st.booleans()):
        annotations["trainadmit.io/checkpoint"] = draw(st.sampled_from(["shared", "none"]))
    if draw(st.booleans()):
        annotations["trainadmit.io/priority"] = draw(st.sampled_from(["high", "normal", "low"]))
    if draw(st.booleans()):
        annotations["trainadmit.io/gang"] = draw(st.sampled_from(["true", "false"]))
    meta: dict = {"namespace": draw(st.sampled_from(["team-nlp", "team-cv", "default"]))}
    if draw(st.booleans()):
        meta["name"] = draw(names)
    else:
        meta["generateName"] = draw(names) + "-"
    if labels or draw(st.booleans()):
        meta["labels"] = labels
    if annotations:
        meta["annotations"] = annotations
    pod_spec: dict = {"containers": [draw(containers(True)), *draw(st.lists(containers(False), max_size=2))],
                      "restartPolicy": "Never"}
    names_seen = set()
    for i, c in enumerate(pod_spec["containers"]):
        if c["name"] in names_seen:
            c["name"] = f"{c['name']}-{i}"
        names_seen.add(c["name"])
    if any(m["name"] == "scratch" for c in pod_spec["containers"] for m in c.get("volumeMounts", [])):
        pod_spec["volumes"] = [{"name": "scratch", "emptyDir": {}}]
    if draw(st.booleans()):
        pod_spec["nodeSelector"] = draw(st.sampled_from([{"disk": "ssd"}, {"trainadmit.io/pool": "h100-ib"}]))
    if draw(st.booleans()):
        pod_spec["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    if draw(st.booleans()):
        pod_spec["schedulerName"] = "default-scheduler"
    if kind == "Pod":
        return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": pod_spec}
    workers = draw(st.integers(min_value=1, max_value=24))
    spec: dict = {"parallelism": workers, "template": {"spec": pod_spec}}
    if draw(st.booleans()):
        spec["completions"] = draw(st.sampled_from([workers, workers + 1]))
    if draw(st.booleans()):
        spec["completionMode"] = "Indexed"
    if draw(st.booleans()):
        spec["template"]["metadata"] = draw(st.sampled_from([{}, {"labels": {"app": "x"}}, {"annotations": {}}]))
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": spec}
