"""`trainadmit preflight` against fake /sys, /dev and mount trees: each check passing, each failure
with its one line, and the time budget (a gang that never completes, a read that hangs)."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from support.cli import loaded, program_modules, run_cli
from support.fake_node import build_node
from support.paths import ROOT

from trainadmit.grammars.preflight import MAX_MESSAGE_BYTES, Check, Expectations, Result, parse_args
from trainadmit.grammars.quantity import parse_quantity
from trainadmit.preflight import Host, run

HCAS = ",".join(f"mlx5_{i}" for i in range(8))
FULL = Expectations(gpus=8, gpu_vendor="nvidia", rdma_link_layer="InfiniBand", active_ports=True,
                    nccl_ib_hca=f"={HCAS}", nccl_socket_ifname="=eth0", shm_size="1Mi", datasets=("/datasets/c4",),
                    checkpoint="/checkpoints", timeout_seconds=10)


def _host(root: Path, node: str = "gpu-17", pod: str = "train-0", run_id: str = "") -> Host:
    return Host(root=root, node=node, pod=pod, run=run_id)


def _only(check: Check, **changes) -> Expectations:
    """FULL reduced to one check (the others' expectations unset), with ``changes`` applied."""
    keep = {Check.gpus: ("gpus", "gpu_vendor"), Check.rdma: ("rdma_link_layer", "nccl_ib_hca"),
            Check.ports: ("active_ports", "nccl_ib_hca"), Check.nccl: ("nccl_ib_hca", "nccl_socket_ifname"),
            Check.shm: ("shm_size",), Check.datasets: ("datasets",), Check.checkpoint: ("checkpoint",),
            Check.gang: ("checkpoint", "gang_size", "gang_id")}[check]
    base = Expectations(timeout_seconds=FULL.timeout_seconds,
                        **{k: getattr(FULL, k) for k in keep if getattr(FULL, k) is not None})
    return dataclasses.replace(base, **changes)


def _fails(root: Path, expect: Expectations) -> Result:
    result, stuck = run(expect, _host(root))
    assert not result.ok and not stuck, result
    return result


def test_a_healthy_node_passes_every_check_in_order(tmp_path):
    result, stuck = run(FULL, _host(build_node(tmp_path)))
    assert result.ok and not stuck and result.message == ""
    assert list(result.passed) == [c.value for c in Check if c is not Check.gang]
    assert result.passed["gpus"].startswith("8 GPUs (nvidia0, ")
    assert result.line() == "node gpu-17: preflight passed (gpus, rdma, ports, nccl, shm, datasets, checkpoint)"
    assert not any((tmp_path / "checkpoints" / ".trainadmit-preflight").glob("probe-*"))  # the probe is removed


def test_gpus(tmp_path):
    r = _fails(build_node(tmp_path / "a", gpus=7), _only(Check.gpus))
    assert r.check == "gpus" and r.message.startswith("sees 7 of its 8 GPUs in /dev (nvidia0, ")
    r = _fails(build_node(tmp_path / "b", gpus=16), _only(Check.gpus))
    assert r.message.startswith("sees 16 GPUs in /dev but was given 8: the GPUs are not isolated")
    amd = build_node(tmp_path / "c", gpus=0)
    (amd / "dev" / "dri").mkdir()
    for i in range(128, 132):
        (amd / "dev" / "dri" / f"renderD{i}").touch()
    (amd / "dev" / "dri" / "card0").touch()  # a display node, not a compute device
    result, _ = run(_only(Check.gpus, gpus=4, gpu_vendor="amd"), _host(amd))
    assert result.ok and result.passed["gpus"] == "4 GPUs (renderD128, renderD129, renderD130, renderD131)"


def test_rdma(tmp_path):
    r = _fails(build_node(tmp_path / "a", hcas=0), _only(Check.rdma))
    assert r.message == "no RDMA device in /sys/class/infiniband: the node has no HCA, or its driver is not loaded"
    r = _fails(build_node(tmp_path / "b", link_layer="Ethernet"), _only(Check.rdma))
    assert r.message.startswith("mlx5_0 port 1 is Ethernet, mlx5_1 port 1 is Ethernet")
    assert r.message.endswith("; the pool's fabric is InfiniBand")
    r = _fails(build_node(tmp_path / "c", verbs=False), _only(Check.rdma))
    assert r.message.startswith("no RDMA verbs device in /dev/infiniband")
    # only the HCAs NCCL_IB_HCA selects must have the fabric's link layer (a RoCE NIC for storage may differ)
    node = build_node(tmp_path / "d")
    (node / "sys/class/infiniband/mlx5_7/ports/1/link_layer").write_text("Ethernet\n")
    result, _ = run(_only(Check.rdma, nccl_ib_hca="=mlx5_0,mlx5_1,mlx5_2,mlx5_3,mlx5_4,mlx5_5,mlx5_6"), _host(node))
    assert result.ok and result.passed["rdma"].startswith("7 of 8 HCAs in use")


def test_ports_name_every_port_that_is_not_active(tmp_path):
    r = _fails(build_node(tmp_path / "a", port_state={"mlx5_3": "DOWN"}), _only(Check.ports))
    assert (r.check, r.message) == ("ports", "mlx5_3 port 1 DOWN")
    assert r.line() == "node gpu-17: mlx5_3 port 1 DOWN"
    r = _fails(build_node(tmp_path / "b", port_state={"mlx5_3": "DOWN", "mlx5_5": "INIT"}), _only(Check.ports))
    assert r.message == "mlx5_3 port 1 DOWN, mlx5_5 port 1 INIT"
    # a port NCCL_IB_HCA leaves out may be down
    result, _ = run(_only(Check.ports, nccl_ib_hca="^=mlx5_3"),
                    _host(build_node(tmp_path / "c", port_state={"mlx5_3": "DOWN"})))
    assert result.ok and result.passed["ports"] == "7 ports ACTIVE"


def test_nccl_variables_name_devices_that_exist(tmp_path):
    node = build_node(tmp_path, hcas=4, interfaces=("eth0", "lo"))
    r = _fails(node, _only(Check.nccl))  # the pool names mlx5_0..7; this node has four
    assert r.message == ("NCCL_IB_HCA names mlx5_4, mlx5_5, mlx5_6, mlx5_7, which this node does not have "
                         "(it has mlx5_0, mlx5_1, mlx5_2, mlx5_3)")
    r = _fails(node, _only(Check.nccl, nccl_ib_hca="=mlx5_0:2"))
    assert r.message.startswith("NCCL_IB_HCA names mlx5_0:2, which")  # the port does not exist
    r = _fails(node, _only(Check.nccl, nccl_ib_hca="^mlx5"))
    assert r.message == "NCCL_IB_HCA=^mlx5 excludes every RDMA device of this node (mlx5_0, mlx5_1, mlx5_2, mlx5_3)"
    r = _fails(node, _only(Check.nccl, nccl_ib_hca="mlx5", nccl_socket_ifname="=ib0"))
    assert r.message == "NCCL_SOCKET_IFNAME==ib0 matches no network interface of this Pod (eth0, lo)"
    result, _ = run(_only(Check.nccl, nccl_ib_hca="mlx5", nccl_socket_ifname="^lo,docker"), _host(node))
    assert result.ok and result.passed["nccl"].endswith("NCCL_SOCKET_IFNAME selects eth0")


def test_shm(tmp_path):
    node = build_node(tmp_path)
    fs = os.statvfs(node / "dev" / "shm")
    size = fs.f_blocks * fs.f_frsize
    result, _ = run(_only(Check.shm, shm_size=str(size)), _host(node))  # exactly the filesystem's size passes
    assert result.ok
    r = _fails(node, _only(Check.shm, shm_size=str(size + 1)))
    assert r.message.startswith("/dev/shm is ") and f"expected {size + 1}: NCCL and data loaders" in r.message
    (node / "dev" / "shm").rmdir()
    assert _fails(node, _only(Check.shm)).message == "/dev/shm is missing"


def test_shm_sizes_are_written_as_quantities(tmp_path):
    """The size shown is in the expectation's notation (64Gi) and exact: it parses back to the filesystem's size."""
    node = build_node(tmp_path)
    fs = os.statvfs(node / "dev" / "shm")
    size = fs.f_blocks * fs.f_frsize
    r = _fails(node, _only(Check.shm, shm_size=str(size + 1)))
    shown = r.message.removeprefix("/dev/shm is ").partition(",")[0]
    assert parse_quantity(shown) == size


def test_datasets(tmp_path):
    missing = build_node(tmp_path / "a", datasets={})
    assert _fails(missing, _only(Check.datasets)).message == "dataset mount /datasets/c4 is missing"
    empty = build_node(tmp_path / "b", datasets={"/datasets/c4": {}})
    assert _fails(empty, _only(Check.datasets)).message == ("dataset mount /datasets/c4 is empty: the volume is "
                                                            "mounted but holds no files")
    stale = build_node(tmp_path / "c", datasets={"/datasets/c4": {}})
    (stale / "datasets/c4/part-0").symlink_to(tmp_path / "gone")  # lists, but the file cannot be opened
    assert _fails(stale, _only(Check.datasets)).message == ("dataset mount /datasets/c4 is not readable: "
                                                            "No such file or directory")
    two = build_node(tmp_path / "d", datasets={"/datasets/c4": {"a": b"1"}, "/datasets/imagenet": {"b": b"2"}})
    result, _ = run(_only(Check.datasets, datasets=("/datasets/c4", "/datasets/imagenet")), _host(two))
    assert result.ok and result.passed["datasets"] == "2 readable"


def test_checkpoint(tmp_path):
    node = build_node(tmp_path / "a", checkpoint=None)
    assert _fails(node, _only(Check.checkpoint)).message == "checkpoint mount /checkpoints is missing"
    # sysfs refuses new files to every user, root included: a mount that cannot be written
    refusing = build_node(tmp_path / "b", checkpoint=None)
    (refusing / "checkpoints").symlink_to("/sys/kernel")
    r = _fails(refusing, _only(Check.checkpoint))
    assert r.message.startswith("checkpoint mount /checkpoints is not writable: ")


def _gang(tmp_path: Path, roots: list[Path], size: int, timeout: int, run_id: str = "") -> list[Result]:
    expect = _only(Check.gang, gang_size=size, gang_id="team-nlp/llama", timeout_seconds=timeout)
    results: list[Result] = [None] * len(roots)  # type: ignore[list-item]

    def worker(i: int) -> None:
        results[i], _ = run(expect, _host(roots[i], node=f"gpu-{i}", pod=f"llama-{i}", run_id=run_id))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(roots))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def test_gang_sees_every_worker_on_a_shared_checkpoint(tmp_path):
    shared = build_node(tmp_path / "node")
    results = _gang(tmp_path, [shared] * 3, size=3, timeout=10, run_id="uid-1")
    assert all(r.ok for r in results), results
    assert sorted(p.name for p in (shared / "checkpoints/.trainadmit-preflight/team-nlp.llama-uid-1").iterdir()) == \
        ["llama-0.json", "llama-1.json", "llama-2.json"]


def test_gang_on_volumes_that_are_not_shared_fails_within_the_budget(tmp_path):
    roots = [build_node(tmp_path / f"node-{i}") for i in range(2)]  # each worker sees a checkpoint of its own
    start = time.monotonic()
    results = _gang(tmp_path, roots, size=2, timeout=2)
    elapsed = time.monotonic() - start
    assert elapsed < 3.5, elapsed  # the 2 s budget, and slack for a loaded machine
    for r in results:
        assert r.check == "gang" and r.message.startswith(
            "sees 1 of 2 workers' markers in /checkpoints/.trainadmit-preflight/team-nlp.llama after ")
        assert r.message.endswith("the checkpoint volume is not shared by the whole gang, or some workers did not start")


def test_gang_ignores_markers_of_an_earlier_run(tmp_path):
    node = build_node(tmp_path)
    old = node / "checkpoints/.trainadmit-preflight/team-nlp.llama"
    old.mkdir(parents=True)
    (old / "llama-1.json").write_text(json.dumps({"pod": "llama-1", "node": "gpu-1", "time": time.time() - 3600}))
    results = _gang(tmp_path, [node], size=2, timeout=1)  # the hour-old marker does not count
    assert results[0].message.startswith("sees 1 of 2 workers' markers")


def test_a_hung_read_is_cut_off_by_the_budget(tmp_path):
    """A FIFO with no writer blocks open() in the kernel, as a read from a hung NFS server does."""
    node = build_node(tmp_path, datasets={"/datasets/c4": {}})
    fifo = node / "datasets/c4/part-0"
    os.mkfifo(fifo)
    start = time.monotonic()
    try:
        result, stuck = run(_only(Check.datasets, timeout_seconds=1), _host(node))
        elapsed = time.monotonic() - start
    finally:
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)  # release the blocked reader
        os.close(fd)
    assert stuck and 1.0 <= elapsed < 3.0
    assert (result.check, result.message) == ("datasets", "the datasets check did not finish within the 1s budget "
                                                          "(a hung mount or device?)")


def test_the_command_fails_with_one_line_and_leaves_the_result(tmp_path):
    node = build_node(tmp_path, port_state={"mlx5_3": "DOWN"})
    args = ["preflight", "--root", str(node), "--node", "gpu-17", *FULL.to_args()]
    r = run_cli(*args)
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.splitlines() == ["trainadmit preflight: node gpu-17: mlx5_3 port 1 DOWN [check ports]"]
    result = Result.parse((node / "dev/termination-log").read_text())
    assert (result.ok, result.node, result.check, result.message) == (False, "gpu-17", "ports", "mlx5_3 port 1 DOWN")
    assert list(result.passed) == ["gpus", "rdma"]
    (node / "sys/class/infiniband/mlx5_3/ports/1/state").write_text("4: ACTIVE\n")
    r = run_cli(*args)
    assert r.returncode == 0 and r.stderr == "" and "node gpu-17: preflight passed" in r.stdout
    assert Result.parse((node / "dev/termination-log").read_text()).ok


def test_arguments_round_trip_and_unknown_ones_are_usage_errors():
    full = dataclasses.replace(FULL, datasets=("/a", "/b"), gang_size=16, gang_id="ns/job", nccl_ib_hca="^=mlx5_1:1")
    assert parse_args(full.to_args()) == full
    assert parse_args(Expectations().to_args()) == Expectations()
    assert run_cli("preflight", "--gpus=0").returncode == 2
    assert run_cli("preflight", "--no-such-check").returncode == 2


def test_the_termination_message_stays_within_the_kubelets_limit():
    huge = Result(ok=False, node="n", check="nccl", message="x" * 10_000, passed={"gpus": "y" * 3000})
    text = huge.to_json()
    assert len(text.encode()) <= MAX_MESSAGE_BYTES
    back = Result.parse(text)
    assert back is not None and back.check == "nccl" and back.message.startswith("xxx")
    assert Result.parse("Error: OOMKilled") is None and Result.parse('{"ok": "yes"}') is None


# what the init container must never import: the web server, the Kubernetes client, the policy models
HEAVY = ("flask", "gunicorn", "kubernetes", "prometheus_client", "pydantic", "cel_expr_python", "werkzeug",
         "cryptography")


@pytest.mark.xdist_group("processes")
def test_the_process_stays_light_and_a_hung_check_ends_it(tmp_path):
    """The init container starts the real program: it must not import the web server, the Kubernetes
    client or the policy models, and a check stuck in the kernel must not keep it alive."""
    code, out, modules = program_modules("preflight", "--root", str(build_node(tmp_path / "ok")), "--timeout=5",
                                         env={"PYTHONPATH": str(ROOT / "tests")}, timeout=60)
    assert (code, loaded(modules, HEAVY)) == (0, []), out
    hung = build_node(tmp_path / "hung", datasets={"/datasets/c4": {}})
    os.mkfifo(hung / "datasets/c4/part-0")
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "trainadmit.cli", "preflight", "--root", str(hung), "--node", "gpu-3",
                           "--timeout=1", "--dataset=/datasets/c4"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and time.monotonic() - start < 10
    assert "node gpu-3: the datasets check did not finish within the 1s budget" in done.stderr
    assert Result.parse((hung / "dev/termination-log").read_text()).check == "datasets"
