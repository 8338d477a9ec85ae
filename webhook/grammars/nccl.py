"""NCCL environment variables checked against NCCL's documented syntax.

Source: the NCCL User Guide "Environment Variables" page (see shared/reference/rdma.md §3). A
wrong NCCL value does not fail at submission: it fails, or silently falls back to sockets, hours
later on a multi-node job. So values a policy injects are checked when the policy loads, and
values a user sets are checked at admission.
"""

from __future__ import annotations

import re

from .lazydataclass import dataclass


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


# Every variable the NCCL User Guide "Environment Variables" page documents (env.rst of NCCL 2.30/2.31, the copy
# shared/reference/rdma.md §3 cites; docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html), by its section,
# plus the names the page gives for renamed ones (NCCL_IB_GDR_LEVEL, NCCL_MAX_NRINGS, NCCL_MIN_NRINGS) and the
# ones it refers to (NCCL_COMM_ID, NCCL_NET_MERGE_LEVEL). A name outside this set is most often a typo that NCCL
# ignores without a word; network plugins (gIB, TCPXO, aws-ofi-nccl) also read NCCL_* names of their own.
SYSTEM_CONFIGURATION_VARS = frozenset({
    "NCCL_SOCKET_IFNAME", "NCCL_SOCKET_FAMILY", "NCCL_SOCKET_MAGIC", "NCCL_SOCKET_RETRY_CNT",
    "NCCL_SOCKET_RETRY_SLEEP_MSEC", "NCCL_SOCKET_POLL_TIMEOUT_MSEC", "NCCL_SOCKET_NTHREADS", "NCCL_NSOCKS_PERTHREAD",
    "NCCL_CROSS_NIC", "NCCL_IB_HCA", "NCCL_IB_TIMEOUT", "NCCL_IB_RETRY_CNT", "NCCL_IB_GID_INDEX",
    "NCCL_IB_ADDR_FAMILY", "NCCL_IB_ADDR_RANGE", "NCCL_IB_ROCE_VERSION_NUM", "NCCL_IB_SL", "NCCL_IB_TC",
    "NCCL_IB_FIFO_TC", "NCCL_IB_RETURN_ASYNC_EVENTS", "NCCL_OOB_NET_ENABLE", "NCCL_OOB_NET_IFNAME",
    "NCCL_UID_STAGGER_THRESHOLD", "NCCL_UID_STAGGER_RATE", "NCCL_NET", "NCCL_NET_PLUGIN", "NCCL_TUNER_PLUGIN",
    "NCCL_PROFILER_PLUGIN", "NCCL_ENV_PLUGIN", "NCCL_IGNORE_CPU_AFFINITY", "NCCL_CONF_FILE", "NCCL_DEBUG",
    "NCCL_DEBUG_FILE", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_TIMESTAMP_FORMAT", "NCCL_DEBUG_TIMESTAMP_LEVELS",
    "NCCL_COLLNET_ENABLE", "NCCL_COLLNET_NODE_THRESHOLD", "NCCL_CTA_POLICY", "NCCL_NETDEVS_POLICY",
    "NCCL_MULTI_RANK_GPU_ENABLE", "NCCL_TOPO_FILE", "NCCL_TOPO_DUMP_FILE", "NCCL_SET_THREAD_NAME",
    "NCCL_COMM_ID",
})
DEBUGGING_SECTION_VARS = frozenset({
    "NCCL_P2P_DISABLE", "NCCL_P2P_LEVEL", "NCCL_P2P_DIRECT_DISABLE", "NCCL_SHM_DISABLE", "NCCL_BUFFSIZE",
    "NCCL_NTHREADS", "NCCL_MAX_NCHANNELS", "NCCL_MAX_NRINGS", "NCCL_MIN_NCHANNELS", "NCCL_MIN_NRINGS",
    "NCCL_CHECKS_DISABLE", "NCCL_CHECK_POINTERS", "NCCL_CHECK_MODE", "NCCL_LAUNCH_MODE", "NCCL_IB_DISABLE",
    "NCCL_IB_AR_THRESHOLD", "NCCL_IB_OOO_RQ", "NCCL_IB_QPS_PER_CONNECTION", "NCCL_IB_SPLIT_DATA_ON_QPS",
    "NCCL_IB_CUDA_SUPPORT", "NCCL_IB_PCI_RELAXED_ORDERING", "NCCL_IB_ADAPTIVE_ROUTING", "NCCL_IB_ECE_ENABLE",
    "NCCL_MEM_SYNC_DOMAIN", "NCCL_CUMEM_ENABLE", "NCCL_CUMEM_HOST_ENABLE", "NCCL_NET_GDR_LEVEL",
    "NCCL_IB_GDR_LEVEL", "NCCL_NET_GDR_C2C", "NCCL_NET_GDR_READ", "NCCL_GDRCOPY_ENABLE", "NCCL_GDRCOPY_FIFO_ENABLE",
    "NCCL_GDRCOPY_SYNC_ENABLE", "NCCL_GDRCOPY_FLUSH_ENABLE", "NCCL_NET_SHARED_BUFFERS", "NCCL_NET_SHARED_COMMS",
    "NCCL_IGNORE_NET_MISMATCH", "NCCL_IGNORE_COLLNET_MISMATCH", "NCCL_SINGLE_RING_THRESHOLD", "NCCL_LL_THRESHOLD",
    "NCCL_TREE_THRESHOLD", "NCCL_ALGO", "NCCL_PROTO", "NCCL_NVB_DISABLE", "NCCL_PXN_DISABLE", "NCCL_P2P_PXN_LEVEL",
    "NCCL_PXN_C2C", "NCCL_RUNTIME_CONNECT", "NCCL_GRAPH_REGISTER", "NCCL_LOCAL_REGISTER",
    "NCCL_LEGACY_CUDA_REGISTER", "NCCL_WIN_ENABLE", "NCCL_SET_STACK_SIZE", "NCCL_GRAPH_MIXING_SUPPORT",
    "NCCL_GRAPH_STREAM_ORDERING", "NCCL_DMABUF_ENABLE", "NCCL_P2P_NET_CHUNKSIZE", "NCCL_P2P_LL_THRESHOLD",
    "NCCL_ALLOC_P2P_NET_LL_BUFFERS", "NCCL_COMM_BLOCKING", "NCCL_CGA_CLUSTER_SIZE", "NCCL_MAX_CTAS", "NCCL_MIN_CTAS",
    "NCCL_NVLS_ENABLE", "NCCL_IB_MERGE_NICS", "NCCL_NET_MERGE_POLICY", "NCCL_NET_MERGE_LEVEL", "NCCL_MNNVL_ENABLE",
    "NCCL_MNNVL_UUID", "NCCL_MNNVL_CLIQUE_ID", "NCCL_RAS_ENABLE", "NCCL_RAS_ADDR", "NCCL_RAS_TIMEOUT_FACTOR",
    "NCCL_LAUNCH_ORDER_IMPLICIT", "NCCL_LAUNCH_RACE_FATAL", "NCCL_IPC_USE_ABSTRACT_SOCKET",
    "NCCL_SYM_GIN_KERNELS_ENABLE",
})
KNOWN_VARS = SYSTEM_CONFIGURATION_VARS | DEBUGGING_SECTION_VARS

# The variables that choose or describe the network NCCL runs over (its transport): the network plugin, the
# InfiniBand/RoCE HCAs and their settings, the sockets' interfaces, cross-NIC rings, GPUDirect RDMA, CollNet and
# the out-of-band network. A pool's values of these are for the pool's NICs; a pod template that brings its own
# NICs gets none of them (NCCL_DEBUG and the other tuning variables are not about the network).
VARIABLE_PREFIX = "NCCL_"  # what every NCCL variable's name starts with, the transport's below too
TRANSPORT_PREFIXES = ("NCCL_NET", "NCCL_IB_", "NCCL_SOCKET_", "NCCL_OOB_NET_", "NCCL_COLLNET_")
TRANSPORT_VARS = frozenset({"NCCL_NSOCKS_PERTHREAD", "NCCL_CROSS_NIC"})


def is_transport_variable(name: str) -> bool:
    """Whether an NCCL variable chooses or describes NCCL's network (``TRANSPORT_PREFIXES``)."""
    return name.startswith(TRANSPORT_PREFIXES) or name in TRANSPORT_VARS


def closest_known(name: str) -> str | None:
    """The documented NCCL variable ``name`` most likely misspells, if one is close enough."""
    import difflib

    found = difflib.get_close_matches(name, sorted(KNOWN_VARS), n=1, cutoff=0.8)
    return found[0] if found else None


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


@dataclass(frozen=True)
class NameList:
    """What an NCCL device or interface list selects (NCCL_IB_HCA, NCCL_SOCKET_IFNAME): ``^`` excludes,
    ``=`` matches names exactly, otherwise each entry is a prefix; an HCA entry may name a port."""

    exclude: bool
    exact: bool
    items: tuple[tuple[str, int | None], ...]  # (name or prefix, port or None)

    def matches(self, name: str, entry: str) -> bool:
        return name == entry if self.exact else name.startswith(entry)

    def selects(self, name: str) -> bool:
        hit = any(self.matches(name, entry) for entry, _ in self.items)
        return not hit if self.exclude else hit

    def ports(self, name: str) -> set[int] | None:
        """Ports an include list names for a device it selects; None means all of its ports."""
        if self.exclude:
            return None
        found = [port for entry, port in self.items if self.matches(name, entry)]
        return None if not found or None in found else {p for p in found if p is not None}


def parse_name_list(value: str) -> NameList | None:
    """An NCCL_IB_HCA or NCCL_SOCKET_IFNAME value as a ``NameList``; None when it is outside the grammar
    (``check_nccl_value`` says why)."""
    body = value.strip()
    exclude = body.startswith("^")
    body = body[1:] if exclude else body
    exact = body.startswith("=")
    body = body[1:] if exact else body
    items = []
    for token in body.split(","):
        token = token.strip().lstrip("=")
        name, _, rest = token.partition(":")
        port = rest.split(":", 1)[0]
        if not name or (port and not port.isdigit()):
            return None
        items.append((name, int(port) if port else None))
    return NameList(exclude, exact, tuple(items))
