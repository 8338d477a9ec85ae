"""`trainadmit preflight`: the start-up check the webhook injects as an init container.

It runs on the node, in the training Pod, before training starts, and checks what the admission
decision expects the node to give that Pod (``grammars.preflight.Expectations``): the GPU devices,
the RDMA devices, their link layer and port states, the devices NCCL's variables name, /dev/shm, the
dataset and checkpoint mounts, and that the gang shares one checkpoint directory. It stops at the
first failure with one line naming the node and what is wrong, leaves a JSON result in the
container's termination message (the status reconciler reads it), and keeps to a time budget even
when a mount hangs.

Only the standard library and ``trainadmit.grammars``: the init container runs the webhook's image,
and importing the policy models, the engine, the web server or the Kubernetes client would cost it
seconds on every Pod start. Every path is read under a root (``--root``), so tests run it against a
fake ``/sys``, ``/dev`` and mount tree.
"""

from .host import Host
from .runner import report, run

__all__ = ["Host", "report", "run"]
