"""Why trainadmit leaves an object alone: the reason names the object and who does what ("it" was ambiguous)."""

from __future__ import annotations

import pytest
from support.builders import job

from trainadmit.engine import match

POD_OF_JOB = {"apiVersion": "v1", "kind": "Pod",
              "metadata": {"name": "train-0", "ownerReferences": [
                  {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "controller": True}]},
              "spec": {"containers": [{"name": "t", "resources": {"limits": {"nvidia.com/gpu": 8}}}]}}
CPU_JOB = job(gpus=0, container={"resources": {"limits": {"cpu": "4"}}})


@pytest.mark.parametrize("obj,namespace,user,says", [
    ({"apiVersion": "apps/v1", "kind": "Deployment"}, "team-a", None,
     ["apps/v1/Deployment is left alone", "PyTorchJob", "the objects their controllers create"]),
    (POD_OF_JOB, "team-a", {"username": "system:serviceaccount:kube-system:job-controller"},
     ["Job train", "as system:serviceaccount:kube-system:job-controller", "configured the Job when the Job was created",
      "left as the controller made this object"]),
    (CPU_JOB, "team-a", None, ["not a GPU workload", "nvidia.com/gpu", "trainadmit.io/"]),
    (job(), "kube-system", None, ["namespace kube-system", "exemptNamespaces"]),
])
def test_not_matched_reasons(policy, obj, namespace, user, says):
    workload, reason = match(policy, obj, namespace, user)
    assert workload is None
    for part in says:
        assert part in reason, reason
    assert " it " not in f" {reason} "
