"""The preflight's contract: its checks, the command line that carries what the decision expects, the
environment it reads, and the result it leaves in its termination message.

Three parts of trainadmit meet here and nowhere else: the engine writes the init container's
arguments, `trainadmit preflight` parses them on the node, and the status reconciler reads the
termination message the preflight leaves. Declaring that vocabulary once keeps them from drifting.
It sits with the grammars because the preflight imports it: an init container must start fast, so
it cannot pull in the policy models, the engine, the web server or the Kubernetes client.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import field
from enum import StrEnum

from .lazydataclass import dataclass


class Check(StrEnum):
    """The preflight's checks, in the order they run: what the node is, then what the Pod was given."""

    gpus = "gpus"  # the GPU devices the device plugin gave the container
    rdma = "rdma"  # RDMA devices present, link layer as the pool's fabric, verbs devices in the container
    ports = "ports"  # every port of those HCAs ACTIVE
    nccl = "nccl"  # NCCL_IB_HCA / NCCL_SOCKET_IFNAME name devices and interfaces that exist here
    shm = "shm"  # /dev/shm at least the size the platform sets
    datasets = "datasets"  # every dataset mount present, readable and not empty
    checkpoint = "checkpoint"  # the checkpoint mount writable, with fsync
    gang = "gang"  # the checkpoint directory is the same one for every worker of the gang


CONTAINER_NAME = "trainadmit-preflight"  # the init container; the name is reserved in every pod template
COMMAND = "preflight"  # the `trainadmit` sub-command the init container runs
DEFAULT_TIMEOUT_SECONDS = 120
TERMINATION_LOG = "/dev/termination-log"  # the kubelet's default terminationMessagePath
MAX_MESSAGE_BYTES = 4096  # the kubelet keeps at most this much of a container's termination message
MARKER_DIR = ".trainadmit-preflight"  # under the checkpoint mount: the probe file and the gang's markers

# Environment the injected container sets through the downward API and the preflight reads.
ENV_NODE = "NODE_NAME"  # spec.nodeName: messages name the node
ENV_POD = "POD_NAME"  # metadata.name: one gang marker per Pod
ENV_RUN = "TRAINADMIT_GANG_RUN"  # a label unique to one run of the workload (a Job's controller-uid), if any
ENV_ROOT = "TRAINADMIT_PREFLIGHT_ROOT"  # prefix of every path the preflight reads (tests: a fake tree)

GPU_VENDORS = {"nvidia.com/gpu": "nvidia", "amd.com/gpu": "amd"}  # GPU resource -> the device nodes it gives


class LinkLayer(StrEnum):
    """An RDMA fabric's link layer, as ``/sys/class/infiniband/*/ports/*/link_layer`` spells it."""

    InfiniBand = "InfiniBand"
    Ethernet = "Ethernet"  # RoCE


@dataclass(frozen=True)
class Expectations:
    """What the admission decision expects a node to give one Pod; each check runs when its
    expectation is set (a check the policy skips is simply not given its argument)."""

    gpus: int | None = None
    gpu_vendor: str = "nvidia"
    rdma_link_layer: str | None = None
    active_ports: bool = False
    nccl_ib_hca: str | None = None
    nccl_socket_ifname: str | None = None
    shm_size: str | None = None
    datasets: tuple[str, ...] = ()
    checkpoint: str | None = None
    gang_size: int | None = None
    gang_id: str | None = None
    timeout_seconds: int = DEFAULT_TIMEOUT_SECONDS

    @property
    def checks(self) -> tuple[Check, ...]:
        wanted = {
            Check.gpus: self.gpus is not None,
            Check.rdma: self.rdma_link_layer is not None,
            Check.ports: self.active_ports,
            Check.nccl: self.nccl_ib_hca is not None or self.nccl_socket_ifname is not None,
            Check.shm: self.shm_size is not None,
            Check.datasets: bool(self.datasets),
            Check.checkpoint: self.checkpoint is not None,
            Check.gang: self.gang_size is not None and self.gang_id is not None and self.checkpoint is not None,
        }
        return tuple(c for c in Check if wanted[c])

    def to_args(self) -> list[str]:
        """The init container's arguments (after the sub-command), one ``--flag=value`` each, so that
        `kubectl get -o yaml` shows what each Pod is checked against."""
        out = [f"--timeout={self.timeout_seconds}"]
        if self.gpus is not None:
            out += [f"--gpus={self.gpus}", f"--gpu-vendor={self.gpu_vendor}"]
        if self.rdma_link_layer is not None:
            out.append(f"--rdma-link-layer={self.rdma_link_layer}")
        if self.active_ports:
            out.append("--active-ports")
        if self.nccl_ib_hca is not None:
            out.append(f"--nccl-ib-hca={self.nccl_ib_hca}")
        if self.nccl_socket_ifname is not None:
            out.append(f"--nccl-socket-ifname={self.nccl_socket_ifname}")
        if self.shm_size is not None:
            out.append(f"--shm-size={self.shm_size}")
        out += [f"--dataset={path}" for path in self.datasets]
        if self.checkpoint is not None:
            out.append(f"--checkpoint={self.checkpoint}")
        if self.gang_size is not None and self.gang_id is not None:
            out += [f"--gang-size={self.gang_size}", f"--gang-id={self.gang_id}"]
        return out


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not at least 1")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The expectation flags, as ``Expectations.to_args`` writes them."""
    parser.add_argument("--timeout", type=_positive, default=DEFAULT_TIMEOUT_SECONDS,
                        help="time budget for all checks, seconds (default %(default)s)")
    parser.add_argument("--gpus", type=_positive, help="GPU devices the container must see")
    parser.add_argument("--gpu-vendor", choices=sorted(set(GPU_VENDORS.values())), default="nvidia",
                        help="whose device files the GPUs are")
    parser.add_argument("--rdma-link-layer", choices=[layer.value for layer in LinkLayer],
                        help="link layer every RDMA port must have")
    parser.add_argument("--active-ports", action="store_true", help="every port of the RDMA devices must be ACTIVE")
    parser.add_argument("--nccl-ib-hca", help="NCCL_IB_HCA: the devices it names must exist")
    parser.add_argument("--nccl-socket-ifname", help="NCCL_SOCKET_IFNAME: an interface it names must exist")
    parser.add_argument("--shm-size", help="minimum size of /dev/shm (a quantity: 64Gi)")
    parser.add_argument("--dataset", action="append", default=[], help="dataset mount that must be readable")
    parser.add_argument("--checkpoint", help="checkpoint mount that must be writable")
    parser.add_argument("--gang-size", type=_positive, help="workers that must see one another's markers")
    parser.add_argument("--gang-id", help="names the gang's marker directory (namespace/name)")


def expectations_from(args: argparse.Namespace) -> Expectations:
    return Expectations(
        gpus=args.gpus, gpu_vendor=args.gpu_vendor, rdma_link_layer=args.rdma_link_layer,
        active_ports=args.active_ports, nccl_ib_hca=args.nccl_ib_hca, nccl_socket_ifname=args.nccl_socket_ifname,
        shm_size=args.shm_size, datasets=tuple(args.dataset), checkpoint=args.checkpoint,
        gang_size=args.gang_size, gang_id=args.gang_id, timeout_seconds=args.timeout)


def parse_args(argv: Sequence[str]) -> Expectations:
    """Expectations from the arguments ``to_args`` wrote (what the preflight and the tests read)."""
    parser = argparse.ArgumentParser(prog=f"trainadmit {COMMAND}")
    add_arguments(parser)
    return expectations_from(parser.parse_args(list(argv)))


@dataclass
class Result:
    """What one preflight run found: written as compact JSON to the termination message, read back by
    the status reconciler. ``check`` and ``message`` say what failed; ``passed`` what each passing
    check saw."""

    ok: bool
    node: str
    pod: str = ""
    check: str = ""
    message: str = ""
    passed: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0

    def line(self) -> str:
        """The one line a person reads: ``node gpu-17: mlx5_3 port 1 DOWN``."""
        if self.ok:
            return f"node {self.node}: preflight passed ({', '.join(self.passed) or 'no checks'})"
        return f"node {self.node}: {self.message}"

    def to_json(self) -> str:
        """At most ``MAX_MESSAGE_BYTES``: details of passing checks go first when space runs out."""
        body = {"ok": self.ok, "node": self.node, "pod": self.pod, "check": self.check, "message": self.message,
                "passed": dict(self.passed), "seconds": round(self.seconds, 3)}
        text = json.dumps(body, separators=(",", ":"), ensure_ascii=False)
        while len(text.encode()) > MAX_MESSAGE_BYTES and body["passed"]:
            body["passed"] = dict.fromkeys(body["passed"], "")
            text = json.dumps(body, separators=(",", ":"), ensure_ascii=False)
            if len(text.encode()) > MAX_MESSAGE_BYTES:
                body["passed"] = {}
                text = json.dumps(body, separators=(",", ":"), ensure_ascii=False)
        if len(text.encode()) > MAX_MESSAGE_BYTES:
            body["message"] = body["message"][: MAX_MESSAGE_BYTES // 2] + "…"
            text = json.dumps(body, separators=(",", ":"), ensure_ascii=False)
        return text

    @classmethod
    def parse(cls, text: str | None) -> Result | None:
        """A result from a termination message, or None when the message is not one (the container
        was killed before writing it, and the kubelet fell back to the log's tail)."""
        if not text:
            return None
        try:
            data = json.loads(text)
        except ValueError:
            return None
        if not isinstance(data, dict) or not isinstance(data.get("ok"), bool):
            return None
        passed = data.get("passed")
        seconds = data.get("seconds")
        return cls(ok=data["ok"], node=str(data.get("node") or ""), pod=str(data.get("pod") or ""),
                   check=str(data.get("check") or ""), message=str(data.get("message") or ""),
                   passed={str(k): str(v) for k, v in passed.items()} if isinstance(passed, dict) else {},
                   seconds=float(seconds) if isinstance(seconds, int | float) else 0.0)
