"""A GPU node as a training Pod sees it, laid out in a directory: what `trainadmit preflight` reads.

The layout is the kernel's: ``/dev/nvidia<N>`` per allocated GPU (plus the control devices, which
are not GPUs), ``/dev/infiniband/uverbs<N>`` per RDMA device the device plugin gave the container,
``/sys/class/infiniband/<hca>/ports/<n>/{state,link_layer,phys_state}`` with the strings the mlx5
driver writes (``4: ACTIVE``, ``1: DOWN``; ``InfiniBand``/``Ethernet``), ``/sys/class/net/<iface>``,
``/dev/shm``, and the dataset and checkpoint mounts as directories.
"""

from __future__ import annotations

from pathlib import Path

PORT_STATES = {"ACTIVE": "4: ACTIVE", "DOWN": "1: DOWN", "INIT": "2: INIT", "ARMED": "3: ARMED"}
PHYS_STATES = {"ACTIVE": "5: LinkUp", "DOWN": "3: Disabled", "INIT": "5: LinkUp", "ARMED": "5: LinkUp"}


def build_node(root: Path, *, gpus: int = 8, hcas: int = 8, port_state: dict[str, str] | None = None,
               link_layer: str = "InfiniBand", verbs: bool = True, interfaces: tuple[str, ...] = ("eth0", "lo"),
               datasets: dict[str, dict[str, bytes]] | None = None, checkpoint: str | None = "/checkpoints",
               shm: bool = True) -> Path:
    """Lay out a node under ``root``. ``port_state`` maps "mlx5_3" to a state name for port 1 (others ACTIVE)."""
    port_state = port_state or {}
    for sub in ("dev", "sys/class/net", "sys/class/infiniband"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    for i in range(gpus):
        (root / "dev" / f"nvidia{i}").touch()
    for control in ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"):  # present with any GPU, not GPUs themselves
        (root / "dev" / control).touch()
    if verbs and hcas:
        (root / "dev" / "infiniband").mkdir(exist_ok=True)
        (root / "dev" / "infiniband" / "rdma_cm").touch()
    for i in range(hcas):
        hca = f"mlx5_{i}"
        port = root / "sys/class/infiniband" / hca / "ports" / "1"
        port.mkdir(parents=True, exist_ok=True)
        state = port_state.get(hca, "ACTIVE")
        (port / "state").write_text(PORT_STATES[state] + "\n")
        (port / "phys_state").write_text(PHYS_STATES[state] + "\n")
        (port / "link_layer").write_text(link_layer + "\n")
        if verbs:
            (root / "dev" / "infiniband" / f"uverbs{i}").touch()
    for iface in interfaces:
        (root / "sys/class/net" / iface).mkdir(exist_ok=True)
    if shm:
        (root / "dev" / "shm").mkdir(exist_ok=True)
    for mount, files in (datasets if datasets is not None else {"/datasets/c4": {"part-00000.parquet": b"PAR1"}}).items():
        directory = root / mount.lstrip("/")
        directory.mkdir(parents=True, exist_ok=True)
        for name, data in files.items():
            (directory / name).write_bytes(data)
    if checkpoint:
        (root / checkpoint.lstrip("/")).mkdir(parents=True, exist_ok=True)
    return root
