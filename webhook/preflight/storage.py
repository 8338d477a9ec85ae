"""What the Pod's volumes give it: /dev/shm's size, readable datasets, a checkpoint mount that takes an
fsync'd write. A dataset PVC that is bound but empty, or a checkpoint volume mounted read-only, fails
hours into a run (at the first epoch, at the first checkpoint); here it fails before the first step."""

from __future__ import annotations

import os
import stat
from decimal import Decimal

from ..grammars.preflight import MARKER_DIR, Expectations
from ..grammars.quantity import QuantityError, format_bytes, parse_quantity
from .host import Budget, CheckFailed, Host

SHM = "/dev/shm"
_SAMPLE = 64  # directory entries looked at for a file to read


def shm(host: Host, expect: Expectations, budget: Budget) -> str:
    try:
        wanted = parse_quantity(expect.shm_size)
    except QuantityError:
        raise CheckFailed(f"the expected /dev/shm size {expect.shm_size!r} is not a quantity") from None
    path = host.path(SHM)
    if not path.is_dir():
        raise CheckFailed(f"{SHM} is missing")
    fs = os.statvfs(path)
    size = Decimal(fs.f_blocks * fs.f_frsize)
    if size < wanted:
        raise CheckFailed(f"{SHM} is {format_bytes(size)}, expected {expect.shm_size}: NCCL and data loaders fail or "
                          "crawl with a small /dev/shm")
    return f"{SHM} {format_bytes(size)}"


def datasets(host: Host, expect: Expectations, budget: Budget) -> str:
    for mount in expect.datasets:
        _readable(host, mount)
    return f"{len(expect.datasets)} readable"


def _readable(host: Host, mount: str) -> None:
    """The mount lists and one of its files reads (a stale or hung network mount fails or blocks here)."""
    path = host.path(mount)
    if not path.exists():
        raise CheckFailed(f"dataset mount {mount} is missing")
    if not path.is_dir():
        raise CheckFailed(f"dataset mount {mount} is not a directory")
    try:
        with os.scandir(path) as entries:
            sample = [e for _, e in zip(range(_SAMPLE), entries, strict=False)]
        if not sample:
            raise CheckFailed(f"dataset mount {mount} is empty: the volume is mounted but holds no files")
        first = next((e for e in sample if not e.is_dir()), None)
        if first is not None:
            with open(first.path, "rb") as f:
                f.read(1)
    except OSError as exc:
        raise CheckFailed(f"dataset mount {mount} is not readable: {exc.strerror or exc}") from None


def checkpoint(host: Host, expect: Expectations, budget: Budget) -> str:
    mount = expect.checkpoint or ""
    path = host.path(mount)
    if not path.is_dir():
        raise CheckFailed(f"checkpoint mount {mount} is missing")
    probe = path / MARKER_DIR / f"probe-{host.node or 'node'}-{os.getpid()}"
    try:
        probe.parent.mkdir(exist_ok=True)
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, b"trainadmit preflight\n")
            os.fsync(fd)
        finally:
            os.close(fd)
        _fsync_dir(probe.parent)
        if not stat.S_ISREG(os.stat(probe).st_mode) or probe.read_bytes() != b"trainadmit preflight\n":
            raise CheckFailed(f"checkpoint mount {mount} does not read back what was written")
        probe.unlink()
    except OSError as exc:
        raise CheckFailed(f"checkpoint mount {mount} is not writable: {exc.strerror or exc}") from None
    return f"{mount} writable (fsync)"


def _fsync_dir(path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
