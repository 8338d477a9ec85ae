"""What the apiserver says about itself: its version (``/version``) and the group/versions it serves (``/apis``).

Both are open to every authenticated user (the ``system:discovery`` and ``system:public-info-viewer``
ClusterRoles), so discovery needs no RBAC of its own. The live view reads them when it starts and every
``discovery_interval`` after (an operator's CRD installed later shows up then), `check --kubeconfig` once;
``engine.target`` chooses from them what the policy leaves to ``auto``. A snapshot holds the same two
documents as ``kubectl get --raw /version`` and ``kubectl get --raw /apis`` print them (``snapshot``).
"""

from __future__ import annotations

import json
import re
from typing import Any

_MINOR = re.compile(r"^(\d+)")  # "36", or "36+" as some providers report it


def parse_version(info: Any) -> tuple[tuple[int, int] | None, str]:
    """(major, minor) and the gitVersion of a ``/version`` document (also the ``serverVersion`` of `kubectl
    version -o json`); (None, "") for anything else."""
    if isinstance(info, dict) and isinstance(info.get("serverVersion"), dict):
        info = info["serverVersion"]
    if not isinstance(info, dict):
        return None, ""
    git = info.get("gitVersion") if isinstance(info.get("gitVersion"), str) else ""
    major, minor = _MINOR.match(str(info.get("major", ""))), _MINOR.match(str(info.get("minor", "")))
    if major and minor:
        return (int(major.group(1)), int(minor.group(1))), git
    found = re.match(r"^v(\d+)\.(\d+)", git)  # providers that leave major/minor empty still set gitVersion
    return ((int(found.group(1)), int(found.group(2))), git) if found else (None, git)


def is_version_document(doc: Any) -> bool:
    """Whether ``doc`` is a ``/version`` answer (it has no kind) or `kubectl version -o json`'s output."""
    return isinstance(doc, dict) and "kind" not in doc and (
        "gitVersion" in doc or isinstance(doc.get("serverVersion"), dict))


def api_versions(group_list: Any) -> set[str]:
    """Every groupVersion of an ``APIGroupList`` (``/apis``), and the core ``v1``."""
    groups = group_list.get("groups") if isinstance(group_list, dict) else None
    found = {"v1"}
    for group in groups or []:
        for version in (group or {}).get("versions") or []:
            if isinstance(version, dict) and isinstance(version.get("groupVersion"), str):
                found.add(version["groupVersion"])
    return found


def read(api_client, call) -> tuple[set[str], tuple[int, int] | None, str]:
    """``/apis`` and ``/version`` through ``api_client``; ``call`` runs a generated client function and turns
    a non-2xx answer into the caller's error (``live._call``)."""
    from kubernetes import client

    apis = call(client.ApisApi(api_client).get_api_versions, _preload_content=False, _request_timeout=(10, 30))
    served = api_versions(json.loads(apis.data))
    version = call(client.VersionApi(api_client).get_code, _preload_content=False, _request_timeout=(10, 30))
    parsed, git = parse_version(json.loads(version.data))
    return served, parsed, git
