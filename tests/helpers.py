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


class CliResult:
    def __init__(self, returncode: int, stdout: str, stderr: str):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


def run_cli(*args: str, stdin: str | None = None) -> CliResult:
    """`trainadmit ARGS` in this process (the logic under test is the same; a process start is not):
    stdout, stderr and the exit code, as a subprocess would give them. A few tests still start the
    real program (`python -m trainadmit.cli`, and the installed wheel in test_packaging)."""
    import contextlib
    import io
    import sys

    from trainadmit.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    old_stdin = sys.stdin
    sys.stdin = io.StringIO(stdin or "")
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(args))
            except SystemExit as exc:  # argparse errors
                code = exc.code if isinstance(exc.code, int) else 2
    finally:
        sys.stdin = old_stdin
    return CliResult(code, out.getvalue(), err.getvalue())


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
    from conftest import POLICIES, load_yaml, write_policy

    [quota] = [d for d in load_yaml(POLICIES / "quotas.yaml") if d["metadata"]["name"] == "team-nlp"]
    quota = {**quota, "spec": {**quota["spec"], "allowedPools": [*quota["spec"]["allowedPools"], "a3-ultra"]}}
    return write_policy(directory, platform, extra=[A3_ULTRA_POOL], replace=[quota])
