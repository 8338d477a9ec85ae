"""NCCL environment variables checked against NCCL's documented syntax.

Source: the NCCL User Guide "Environment Variables" page (see shared/reference/rdma.md §3). A
wrong NCCL value does not fail at submission: it fails, or silently falls back to sockets, hours
later on a multi-node job. So values a policy injects are checked when the policy loads, and
values a user sets are checked at admission.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    severity: str  # "error" (deny) or "warning"
    message: str


_HCA_TOKEN = re.compile(r"^[A-Za-z0-9_.-]+(:\d*(:-?\d+(:-?\d+)?)?)?$")
_IFNAME_TOKEN = re.compile(r"^=?[A-Za-z0-9_.@-]+$")
_LEVELS = {"LOC", "PIX", "PXB", "PHB", "SYS"}
_ALGOS = {"ring", "tree", "collnet", "collnetchain", "collnetdirect", "nvls", "nvlstree", "pat"}
_PROTOS = {"ll", "ll128", "simple"}
_SUBSYS = {"INIT", "COLL", "P2P", "SHM", "NET", "GRAPH", "TUNING", "ENV", "ALLOC", "ALLOC_HOST", "CALL",
           "PROXY", "NVLS", "BOOTSTRAP", "REG", "PROFILE", "RAS", "DESTROY", "ALL"}

# Variables NCCL documents as "Debugging": "should not be used in production nor retained in scripts".
DEBUGGING_VARS = frozenset({
    "NCCL_IB_DISABLE", "NCCL_NET_GDR_LEVEL", "NCCL_IB_GDR_LEVEL", "NCCL_ALGO", "NCCL_PROTO",
    "NCCL_IB_QPS_PER_CONNECTION", "NCCL_NVLS_ENABLE", "NCCL_NET_GDR_READ", "NCCL_P2P_LEVEL",
    "NCCL_IB_SPLIT_DATA_ON_QPS", "NCCL_IB_ADAPTIVE_ROUTING", "NCCL_MNNVL_ENABLE", "NCCL_CUMEM_ENABLE",
    "NCCL_BUFFSIZE",
})


def _int_range(value: str, low: int, high: int) -> Problem | None:
    if not re.fullmatch(r"-?\d+", value.strip()):
        return Problem("error", f"must be an integer from {low} to {high}")
    if not low <= int(value) <= high:
        return Problem("error", f"must be from {low} to {high}")
    return None


def _hca(value: str) -> Problem | None:
    body = value
    if body.startswith("^"):
        body = body[1:]
    exact = body.startswith("=")
    if exact:
        body = body[1:]
    tokens = [t for t in body.split(",")]
    if not body or any(not _HCA_TOKEN.match(t) for t in tokens):
        return Problem("error", "must be [^][=]hca[:port[:rail[:plane]]],… (for example =mlx5_0:1,mlx5_1:1)")
    if len(tokens) > 32:
        return Problem("error", "NCCL accepts at most 32 HCAs")
    if not exact:
        return Problem("warning", "without a leading '=' each name is a prefix (mlx5_1 also matches mlx5_10)")
    return None


def _ifname(value: str) -> Problem | None:
    body = value[1:] if value.startswith("^") else value
    if not body or any(not _IFNAME_TOKEN.match(t) for t in body.split(",")):
        return Problem("error", "must be [^]=?prefix,… (for example =eth0 or ^docker,lo)")
    return None


def _level(value: str, extra: set[str]) -> Problem | None:
    if value.upper() in _LEVELS | extra:
        return None
    if re.fullmatch(r"\d+", value):
        return Problem("warning", "integer levels are discouraged by NCCL; use LOC, PIX, PXB, PHB or SYS")
    return Problem("error", f"must be one of {', '.join(sorted(_LEVELS | extra))}")


def _token_list(value: str, allowed: set[str], what: str) -> Problem | None:
    # Since NCCL 2.24: "[func:]algo,algo;func:algo"; each part may start with '^'.
    for part in value.split(";"):
        part = part.split(":", 1)[1] if ":" in part else part
        part = part.lstrip("^")
        for token in part.split(","):
            if token.strip().lower() not in allowed:
                return Problem("error", f"{token.strip()!r} is not an NCCL {what} ({', '.join(sorted(allowed))})")
    return None


def _enum(value: str, allowed: tuple[str, ...]) -> Problem | None:
    if value not in allowed:
        return Problem("error", f"must be one of {', '.join(allowed)}")
    return None


def _subsys(value: str) -> Problem | None:
    for token in value.split(","):
        if token.strip().lstrip("^").upper() not in _SUBSYS:
            return Problem("error", f"{token!r} is not an NCCL debug subsystem")
    return None


_CHECKS = {
    "NCCL_IB_HCA": _hca,
    "NCCL_SOCKET_IFNAME": _ifname,
    "NCCL_IB_TIMEOUT": lambda v: _int_range(v, 0, 31),
    "NCCL_IB_RETRY_CNT": lambda v: _int_range(v, 0, 7),
    "NCCL_IB_GID_INDEX": lambda v: _int_range(v, -1, 255),
    "NCCL_IB_SL": lambda v: _int_range(v, 0, 15),
    "NCCL_IB_TC": lambda v: _int_range(v, 0, 255),
    "NCCL_IB_QPS_PER_CONNECTION": lambda v: _int_range(v, 1, 128),
    "NCCL_CROSS_NIC": lambda v: _enum(v, ("0", "1", "2")),
    "NCCL_NVLS_ENABLE": lambda v: _enum(v, ("0", "1", "2")),
    "NCCL_MNNVL_ENABLE": lambda v: _enum(v, ("0", "1", "2")),
    "NCCL_IB_DISABLE": lambda v: _enum(v, ("0", "1")),
    "NCCL_SOCKET_FAMILY": lambda v: _enum(v, ("AF_INET", "AF_INET6")),
    "NCCL_DEBUG": lambda v: _enum(v.upper(), ("VERSION", "WARN", "INFO", "TRACE")),
    "NCCL_DEBUG_SUBSYS": _subsys,
    "NCCL_NET_GDR_LEVEL": lambda v: _level(v, set()),
    "NCCL_P2P_LEVEL": lambda v: _level(v, {"NVL"}),
    "NCCL_ALGO": lambda v: _token_list(v, _ALGOS, "algorithm"),
    "NCCL_PROTO": lambda v: _token_list(v, _PROTOS, "protocol"),
    "NCCL_SOCKET_NTHREADS": lambda v: _int_range(v, 1, 16),
    "NCCL_NSOCKS_PERTHREAD": lambda v: _int_range(v, 1, 64),
}


def check_nccl_value(name: str, value: str) -> Problem | None:
    """The first problem with ``name=value`` under NCCL's documented grammar, or None."""
    check = _CHECKS.get(name)
    if check is None:
        return None
    if not isinstance(value, str):
        return Problem("error", "must be a string")
    return check(value)
