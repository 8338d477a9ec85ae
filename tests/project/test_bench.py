"""The benchmark scripts still run against the code they measure (their numbers are in docs/performance.md)."""

from __future__ import annotations

import runpy
import sys

from support.paths import ROOT


def test_engine_bench_runs_and_its_cache_column_is_the_servers_answer(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["engine.py", "--seconds", "0", "--cases", "1x1"])
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    runpy.run_path(str(ROOT / "bench" / "engine.py"), run_name="__main__")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:2] == ["case", "policy"] and len(lines) == 3
    engine = runpy.run_path(str(ROOT / "bench" / "engine.py"))
    policy = engine["bench_policy"](cel=True)
    raw = engine["bodies"](engine["job"](1, 16), 1)[0]
    from trainadmit.server.decisions import DecisionCache

    cache = DecisionCache(policy)
    assert engine["remembered"](raw, policy, cache) == engine["remembered"](raw, policy, cache) > 100
    assert cache.hits == 1


def test_preflight_bench_uses_the_engine_bench_as_it_is(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    preflight = runpy.run_path(str(ROOT / "bench" / "preflight.py"))
    raw = preflight["body"](preflight["job"](1))
    assert preflight["per_call"](preflight["decision"], [raw], preflight["load_policy"](ROOT / "policies"), None, 2) > 0


def test_time_to_start_compares_with_the_job_trainadmit_would_make_written_by_hand(monkeypatch, tmp_path):
    """bench/time_to_start.py's baseline is trainadmit's own decision, minus only trainadmit's bookkeeping."""
    from support.policies import write_policy

    from trainadmit.engine import Request, decide, load_policy

    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    bench = runpy.run_path(str(ROOT / "bench" / "time_to_start.py"))
    policy = load_policy(write_policy(tmp_path, bench["OUTCOME_PHASES"][bench["PHASE"]], [bench["QUOTA"]]))
    job = bench["gpu_job"]("t", bench["NAMESPACE"], 16, annotations={"trainadmit.io/topology": "rack"})
    podgroup, hand = bench["hand_configured"](policy, job)
    mutated = decide(policy, Request(job)).mutated
    assert podgroup["kind"] == "PodGroup" and podgroup["spec"]["schedulingPolicy"] == {"gang": {"minCount": 16}}
    assert hand["spec"]["template"]["spec"] == mutated["spec"]["template"]["spec"]
    assert not [k for k in {**hand["metadata"].get("labels", {}), **hand["metadata"].get("annotations", {})}
                if k.startswith("trainadmit.io/")]


def test_audit_bench_input_is_what_audit_reads(monkeypatch, tmp_path):
    """bench/audit.py's input (a `kubectl get -o json` List of stored Jobs): audit reads every item of it."""
    import json

    from support.cli import run_cli

    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    bench = runpy.run_path(str(ROOT / "bench" / "audit.py"))
    path = tmp_path / "workloads.json"
    bench["write_workloads"](path, 30)
    result = run_cli("audit", "-p", str(ROOT / "policies"), "-o", "json", str(path))
    doc = json.loads(result.stdout)
    assert result.returncode == 1 and sum(doc["summary"][k] for k in ("denied", "changes", "compliant", "skipped")) == 30
