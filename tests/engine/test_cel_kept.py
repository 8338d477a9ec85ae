"""What a decision leaves behind in memory: only what the CEL library keeps of host-function calls, counted.

cel-expr-python keeps the argument tuple, the converted arguments and the result of every call of a Python
host function (``quantity()`` and the other Kubernetes functions); nothing else of an evaluation (the
activation, the object, the compiled programs) may stay. Memory is counted with tracemalloc over many
decisions, never timed, so a loaded machine changes nothing. The server replaces a worker once what the
library kept passes ``TRAINADMIT_CEL_KEPT_BYTES``.
"""

from __future__ import annotations

import contextlib
import copy
import gc
import threading
import tracemalloc
from collections.abc import Callable

import pytest
from support.manifests import load_yaml, review
from support.paths import FIXTURES, POLICIES
from support.server import Server, issue_certs, wait_until

from trainadmit.engine import Request, decide, load_policy
from trainadmit.grammars import cel

# kubernetes-sigs/scheduler-plugins' sakkara job-a: 8 workers of 1 GPU and 128Mi each, so the bundled rule
# memory-per-gpu calls quantity() and compareTo() for its container (and warns: 128Mi < 16Gi per GPU)
SAKKARA = load_yaml(FIXTURES / "real-world" / "schedplugins-sakkara-job-a.yaml")[0]


def retained(run: Callable[[int], None], count: int, rounds: int = 4, warmup: int = 0) -> tuple[float, float]:
    """(bytes tracemalloc sees retained, bytes ``kept_bytes`` counted) per call of ``run(i)``, in the round of
    ``count`` calls that kept the least: the first calls fill caches that then stop growing (interned names,
    the runtime's own tables, an allocator's free lists), and a round can end just after a dict grew, so the
    least a round kept is what every call keeps. ``warmup`` calls first, unmeasured: a process that has made
    few decisions before (the test run alone, or first on its pytest worker) is still filling those caches."""
    for i in range(warmup):
        run(rounds * count + i)
    tracemalloc.start()
    try:
        best: tuple[float, float] | None = None
        for r in range(rounds):
            gc.collect()
            before, counted = tracemalloc.get_traced_memory()[0], cel.kept_bytes()
            for i in range(count):
                run(r * count + i)
            gc.collect()
            now = ((tracemalloc.get_traced_memory()[0] - before) / count, (cel.kept_bytes() - counted) / count)
            best = now if best is None or now[0] < best[0] else best
        assert best is not None
        return best
    finally:
        tracemalloc.stop()


def sakkara(memory: str = "128Mi", env: int = 0) -> dict:
    """A copy of the job, with the given memory limit and ``env`` variables."""
    obj = copy.deepcopy(SAKKARA)
    container = obj["spec"]["template"]["spec"]["containers"][0]
    container["resources"]["limits"]["memory"] = memory
    if env:
        container["env"] = [{"name": f"SETTING_{k}", "value": f"value-{k}"} for k in range(env)]
    return obj


@pytest.fixture(scope="module")
def policy():
    return load_policy(POLICIES)


def test_a_decision_keeps_only_what_the_cel_library_keeps_of_its_host_calls(policy):
    """The job as published keeps what the count says, to the byte; with 400 variables (~30 KB once converted
    for CEL) it keeps no more than a few hundred bytes besides, so neither the activation nor the object stays.
    (The first decisions over large objects fill a cache of the runtime's own: 124-byte blocks, ~20-40 KB in
    all, which stops growing after a few hundred decisions; the least a round keeps is within it.)"""
    decided = {"all": 0, "fired": 0}  # counts, not a list: a list would grow by 8 bytes a decision

    def deciding(obj: dict) -> Callable[[int], None]:
        def run(i: int) -> None:
            decision = decide(policy, Request(copy.deepcopy(obj), namespace="default"))
            decided["all"] += 1
            decided["fired"] += any(v.rule == "custom.memory-per-gpu" for v in decision.violations)
        return run

    kept, counted = retained(deciding(sakkara()), 40, warmup=300)
    assert decided["fired"] == decided["all"], "the bundled memory-per-gpu rule must fire (it is what calls the host functions)"
    assert counted > 200  # quantity('128Mi') and '128Mi'.compareTo('16Gi'): 265 bytes
    assert abs(kept - counted) <= 0.02 * counted + 2, f"{kept:,.1f} bytes kept per decision, {counted:,.1f} counted"
    kept_large, counted_large = retained(deciding(sakkara(env=400)), 20, rounds=3)
    assert counted_large == counted
    assert kept_large < counted + 500, f"{kept_large:,.1f} bytes kept per decision of a 400-variable job"


def test_evaluations_without_host_functions_keep_nothing():
    program = cel.compile_expression("object.spec.template.spec.containers.all(c, c.name.startsWith('m')) && "
                                     "'owner' in object.metadata.labels")
    objects = [sakkara(env=50) for _ in range(40)]
    for obj in objects:
        obj["metadata"]["labels"] = {"owner": "team-a"}

    def run(i: int) -> None:
        assert program.evaluate(cel.activation({"object": objects[i % 40]}), 60) is True

    kept, counted = retained(run, 500)
    assert counted == 0
    assert kept < 2, f"{kept:,.1f} bytes kept per evaluation that calls no host function"


@pytest.mark.parametrize("expression", [
    "quantity(object.m) != ''",  # returns its argument: the argument is what stays
    "isQuantity(object.m)",  # a bool: nothing of the result stays
    "object.m.compareTo('16Gi') < 0",
    "object.m.isGreaterThan('1') && object.m.isLessThan('" + "9" * 200 + "')",
    "object.m.asApproximateFloat() > 1.0",  # a new float each call
    "object.n.asInteger() > 0",  # a new int each call (not a small one)
    "quantity(object.bad) == ''",  # raises: the arguments stay all the same
    "object.list.all(s, isQuantity(s))",  # one call per item
])
def test_the_count_matches_what_the_library_keeps_per_host_function(expression):
    program = cel.compile_expression(expression)
    data = {"m": "1600Gi", "n": "123456789012", "bad": "twelve", "list": [f"{k}Mi" for k in range(100, 140)]}

    def run(i: int) -> None:
        with contextlib.suppress(cel.CelError):
            program.evaluate(cel.activation({"object": data}), 40)

    kept, counted = retained(run, 250)
    assert counted > 0
    assert abs(kept - counted) <= 0.02 * counted + 2, f"{kept:,.1f} bytes kept per evaluation, {counted:,.1f} counted"


def test_a_worker_is_replaced_once_the_cel_library_has_kept_its_budget(tmp_path):
    """Each review below keeps ~265 bytes (the rule's two host calls): with a 2,000-byte budget the worker is
    replaced after a few, as ``max_requests`` replaces it: every request still answered."""
    server = Server(POLICIES, issue_certs(tmp_path / "tls"), workers=1, extra=["--threads", "2"],
                    env_extra={"TRAINADMIT_CEL_KEPT_BYTES": "2000"})
    try:
        server.wait_ready()
        first = wait_until(lambda: server.worker_pids(), message="no worker")
        body = review("job-03-mutate-Job-CREATE.json")
        body["request"]["namespace"] = "default"
        results: list[object] = []

        def send(start: int) -> None:
            client = server.client()
            for i in range(start, start + 15):
                body_i = copy.deepcopy(body)
                body_i["request"]["object"] = sakkara(f"{128 + i}Mi")  # the server remembers repeats
                try:
                    results.append(client.post_review("/mutate", body_i)[0])
                except OSError as exc:
                    results.append(exc)
                    client.close()

        senders = [threading.Thread(target=send, args=(n * 100,)) for n in range(2)]
        for t in senders:
            t.start()
        for t in senders:
            t.join(60)
        assert results == [200] * 30
        wait_until(lambda: (now := server.worker_pids()) and not now & first, 20, "the worker was never replaced")
        assert any("CEL library keeps" in line.get("message", "") for line in server.log_lines())
    finally:
        assert server.stop() == 0
