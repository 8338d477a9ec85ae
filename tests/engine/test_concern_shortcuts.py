"""The shortcuts the concerns take on every decision (shared Sources, one pass over an env list, a memo of a memory
limit's half) give what the long way gives: each test compares with the long way written out here."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from trainadmit.engine.concerns import preflight, storage, topology


def _long_env_value(container: dict, name: str) -> str | None:
    for entry in container.get("env") or []:
        if isinstance(entry, dict) and entry.get("name") == name and "valueFrom" not in entry:
            value = entry.get("value")
            return value if isinstance(value, str) else None
    return None


@pytest.mark.parametrize("env", [
    [],
    [{"name": "NCCL_IB_HCA", "value": "mlx5_0"}],
    [{"name": "NCCL_IB_HCA", "valueFrom": {"fieldRef": {}}}, {"name": "NCCL_IB_HCA", "value": "mlx5_1"}],
    [{"name": "NCCL_IB_HCA", "value": 3}, {"name": "NCCL_IB_HCA", "value": "mlx5_1"}],  # the first decides: None
    [{"name": "NCCL_SOCKET_IFNAME", "value": "eth0"}, "junk", {"name": ["x"]},
     {"name": "NCCL_IB_HCA", "value": "a"}, {"name": "NCCL_IB_HCA", "value": "b"}],
    [{"name": "OTHER", "value": "x"}, {"value": "no name"}],
])
def test_one_pass_over_the_env_reads_what_each_look_up_reads(env):
    container = {"env": env}
    names = ("NCCL_IB_HCA", "NCCL_SOCKET_IFNAME")
    assert preflight._env_values(container, names) == {n: _long_env_value(container, n) for n in names}


def test_an_env_list_that_is_no_list_has_no_values():
    assert preflight._env_values({"env": "x"}, ("A",)) == {"A": None}
    assert preflight._env_values({}, ("A", "B")) == {"A": None, "B": None}


@pytest.mark.parametrize("limit", ["160Gi", "2Gi", "129Mi", "1000000001", "3.5Gi", "100M", "1E9"])
def test_the_remembered_half_of_a_memory_limit_is_the_half(limit):
    from trainadmit.grammars.quantity import format_bytes, parse_quantity

    value = parse_quantity(limit)
    expected = (value / 2 // storage.MIB) * storage.MIB
    for _ in range(2):
        assert storage._half(value) == expected and format_bytes(storage._half(value)) == format_bytes(expected)
    assert storage._half(Decimal(4 * storage.MIB)) == 2 * storage.MIB  # another limit: another answer


def test_the_compact_encoder_writes_what_json_dumps_writes():
    value = {"gang": "ns/a", "size": 4, "key": "topology.kubernetes.io/zone", "level": None,
             "pool": {"a": "é", "b": "x\"y"}}
    assert topology._COMPACT.encode(value) == json.dumps(value, separators=(",", ":"))


def _long_env_named(env: object, prefix: str) -> list:
    if not isinstance(env, list):
        return []
    return [(i, e, e.get("name")) for i, e in enumerate(env)
            if isinstance(e, dict) and isinstance(e.get("name"), str) and e.get("name").startswith(prefix)]


@pytest.mark.parametrize("env", [
    None, "x", [], [{"name": "A"}],
    [{"name": f"TRAIN_{i}", "value": "1"} for i in range(30)],
    [{"name": "TRAIN", "value": "1"}, {"name": "NCCL_DEBUG", "value": "INFO"}, {"name": "XNCCL_A"},
     {"name": "NCCL_IB_HCA", "value": "mlx5"}],
    [{"name": "A"}, "junk", {"name": "NCCL_A"}],  # an entry that is no map
    [{"name": 3}, {"value": "no name"}, {"name": "NCCL_B"}, {"name": None}],  # names that are no strings
    [{"name": "HAS_NCCL_INSIDE"}, {"name": "NCCL"}],  # the prefix inside a name, not at its start
])
@pytest.mark.parametrize("prefix", ["NCCL_", "", "TRAIN_"])
def test_env_named_finds_what_a_scan_of_every_entry_finds(env, prefix):
    from trainadmit.engine.workloads import env_named

    assert env_named(env, prefix) == _long_env_named(env, prefix)


@pytest.fixture(scope="module")
def bundled():
    from support.paths import POLICIES

    from trainadmit.engine import load_policy

    return load_policy(POLICIES)


def _selector_ops(policy, extra_spec=None) -> tuple[list[dict], list[str], list]:
    from support.builders import job

    from trainadmit.engine import Request, decide

    obj = job(labels={"trainadmit.io/pool": "h100-ib"}, extra_spec=extra_spec)
    decision = decide(policy, Request(obj, namespace="team-nlp"))
    ops = [op for op in decision.patch if "/spec/nodeSelector" in op["path"]]
    injected = [i.path for i in decision.injections if "/spec/nodeSelector" in i.path]
    return ops, injected, [v.rule for v in decision.violations if v.rule.startswith("placement")]


def test_a_template_without_a_selector_gets_the_pools_in_one_operation(bundled):
    ops, injected, _ = _selector_ops(bundled)
    assert ops == [{"op": "add", "path": "/spec/template/spec/nodeSelector",
                    "value": dict(bundled.pools["h100-ib"].nodeSelector)}]
    assert injected == ["/spec/template/spec/nodeSelector"]


def test_a_template_with_part_of_the_selector_gets_each_missing_key(bundled):
    ops, injected, rules = _selector_ops(bundled, {"nodeSelector": {"trainadmit.io/pool": "h100-ib"}})
    assert ops == [{"op": "add", "path": "/spec/template/spec/nodeSelector/nvidia.com~1gpu.product",
                    "value": "NVIDIA-H100-80GB-HBM3"}]
    assert injected == ["/spec/template/spec/nodeSelector/nvidia.com~1gpu.product"] and rules == []
    ops, _, rules = _selector_ops(bundled, {"nodeSelector": {"nvidia.com/gpu.product": "A100"}})
    assert [op["path"] for op in ops] == ["/spec/template/spec/nodeSelector/trainadmit.io~1pool"]
    assert rules == ["placement.contradiction"]
