"""A preflight run as a kubelet would report it: the Pod's own preflight arguments run on a fake node tree
(support.fake_node), and the init container's terminated status with the termination message it left. Shared by
the status reconciler's tests on the fake and the real apiserver and by the outcome tier."""

from __future__ import annotations

import dataclasses
import datetime as dt

from support.fake_node import build_node
from trainadmit.grammars.preflight import CONTAINER_NAME, parse_args
from trainadmit.preflight import Host, report, run


def after(obj: dict, seconds: int) -> str:
    """A timestamp ``seconds`` after the object's creation, as the kubelet writes them."""
    created = dt.datetime.fromisoformat(obj["metadata"]["creationTimestamp"].replace("Z", "+00:00"))
    return (created + dt.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def preflight_status(pod: dict, tmp_path, finished: str, **node) -> dict:
    """Run the Pod's own preflight arguments on a fake node; the status the kubelet would then report."""
    container = next(c for c in pod["spec"]["initContainers"] if c["name"] == CONTAINER_NAME)
    expect = dataclasses.replace(parse_args(container["args"][1:]), shm_size="1Mi", gang_size=None, gang_id=None)
    root = build_node(tmp_path / pod["metadata"]["name"], **node)
    host = Host(root=root, node=pod["spec"]["nodeName"], pod=pod["metadata"]["name"])
    result, _ = run(expect, host)
    report(result, host, container["terminationMessagePath"])  # the kubelet copies that file into the status
    terminated = {"exitCode": 0 if result.ok else 1, "reason": "Completed" if result.ok else "Error",
                  "message": host.path(container["terminationMessagePath"]).read_text(),
                  "startedAt": finished, "finishedAt": finished}
    return {"phase": "Running" if result.ok else "Failed",
            "initContainerStatuses": [{"name": CONTAINER_NAME, "image": container["image"], "imageID": "",
                                       "ready": result.ok, "restartCount": 0, "state": {"terminated": terminated}}]}
