"""`trainadmit policy init DIR`: the smallest policy set that loads, lints clean and is tested.

A platform team starts from here rather than from a copy of the bundled set, whose tests read files
outside it and whose pools describe someone else's cluster. Every file says what it is for; the one
example suite passes as written (a test runs init, lint and test on a fresh directory), so the first
edit starts from green. An existing non-empty directory is never written into.
"""

from __future__ import annotations

import json
from pathlib import Path

from .schema import policy_json_schema

SCHEMA_FILE = ".schema/policy.schema.json"  # hidden: the loader skips it, editors read it
_SCHEMA_LINE = f"# yaml-language-server: $schema={SCHEMA_FILE}\n"

PLATFORM = _SCHEMA_LINE + """\
# The one Platform document of the set: the cluster trainadmit serves and what applies to every Job.
# Every spec field is optional; `trainadmit policy schema` and the Reference of docs/policies.md list them.
apiVersion: trainadmit.io/v1alpha1
kind: Platform
metadata:
  name: platform
spec:
  kubernetesVersion: "1.37"
  # Feature gates the cluster runs with: the native gang backend needs the first two, native topology
  # constraints the third; `trainadmit check` warns when one the backend needs is missing.
  featureGates: [GenericWorkload, WorkloadWithJob, TopologyAwareWorkloadScheduling]
  gang:
    backend: native            # native | coscheduling | volcano | kueue
  defaults:
    priority: normal           # the PriorityTier of Jobs that name none (priorities.yaml)
  # enforce: [nodeSelector]    # fields the platform owns: a different user value is denied
"""

POOLS = _SCHEMA_LINE + """\
# One Pool per kind of GPU node: what a Job of the pool gets (placement, topology, RDMA, NCCL).
apiVersion: trainadmit.io/v1alpha1
kind: Pool
metadata:
  name: h100
spec:
  default: true                # the pool of Jobs that request nvidia.com/gpu and name no pool
  gpu:
    resource: nvidia.com/gpu
    product: NVIDIA-H100-80GB-HBM3     # as GPU Feature Discovery labels the nodes
    perNode: 8                 # multi-node Jobs must take whole nodes: 8 GPUs per worker
  nodeSelector:
    nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3
  tolerations:
  - {key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}
  topology:
    default: rack              # where a Job's workers go when it names no level (trainadmit.io/topology)
    levels:                    # smallest domain first; maxNodes is the size of the largest one
    - {name: node, nodeLabel: kubernetes.io/hostname, maxNodes: 1}
    - {name: rack, nodeLabel: topology.kubernetes.io/rack, maxNodes: 16}
  capacityNodes: 16            # nodes in the pool, when no cluster view says so
  # An RDMA fabric and its NCCL settings (checked against NCCL's documented grammar):
  # rdma:
  #   resources: {rdma/rdma_shared_device_a: 1}
  #   networks: [trainadmit-system/ib-net]
  # nccl:
  #   env: {NCCL_IB_HCA: "=mlx5_0,mlx5_1", NCCL_SOCKET_IFNAME: "=eth0"}
"""

PRIORITIES = _SCHEMA_LINE + """\
# Priority tiers users name with trainadmit.io/priority; each is a PriorityClass of the cluster.
apiVersion: trainadmit.io/v1alpha1
kind: PriorityTier
metadata:
  name: normal
spec:
  className: training-normal   # the PriorityClass (create it in the cluster)
  value: 10000                 # its value: bare Pods need it, the apiserver resolved priority before us
"""

EXAMPLE_TEST = """\
# The policy set's own tests: `trainadmit policy test DIR` runs every case through the engine.
# Each case sends one object (object:, file: relative to this file, or review:) and states the
# decision it expects (allowed:); unknown keys are errors, so a typo cannot make a test pass.
apiVersion: trainadmit.io/v1alpha1
kind: PolicyTest
metadata:
  name: example
cases:
- name: a 2-node job gets a gang, whole nodes in one rack, and the default priority
  object:
    apiVersion: batch/v1
    kind: Job
    metadata: {name: pretrain, namespace: team-a}
    spec:
      parallelism: 2
      completions: 2
      completionMode: Indexed
      template:
        spec:
          restartPolicy: Never
          containers:
          - name: trainer
            image: registry.example/trainer:1
            resources: {limits: {nvidia.com/gpu: 8}}
  expect:
    allowed: true
    denials: []
    warnings: []
    fields:
      spec.scheduling.schedulingPolicy.gang.minCount: 2
      spec.scheduling.schedulingConstraints.topology[0].key: topology.kubernetes.io/rack
      spec.template.spec.nodeSelector["nvidia.com/gpu.product"]: NVIDIA-H100-80GB-HBM3
      spec.template.spec.priorityClassName: training-normal
- name: workers on half a node are refused, with what to change
  object:
    apiVersion: batch/v1
    kind: Job
    metadata: {name: half-nodes, namespace: team-a}
    spec:
      parallelism: 2
      completions: 2
      completionMode: Indexed
      template:
        spec:
          restartPolicy: Never
          containers:
          - name: trainer
            image: registry.example/trainer:1
            resources: {limits: {nvidia.com/gpu: 4}}
  expect:
    allowed: false
    denials: [topology.whole-node]
    messages: ["whole nodes"]
"""

FILES = {
    "platform.yaml": PLATFORM,
    "pools.yaml": POOLS,
    "priorities.yaml": PRIORITIES,
    "tests/example.test.yaml": EXAMPLE_TEST,
}


class ScaffoldError(Exception):
    """The directory cannot be initialized (it has files already)."""


def write_scaffold(directory: str | Path) -> list[Path]:
    """Write the minimal policy set into ``directory`` (created if needed); the files written."""
    root = Path(directory)
    if root.exists() and (not root.is_dir() or any(root.iterdir())):
        raise ScaffoldError(f"{root} exists and is not an empty directory; nothing was written")
    written = []
    for name, text in {**FILES, SCHEMA_FILE: json.dumps(policy_json_schema(), indent=2) + "\n"}.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        written.append(path)
    return written
