"""`trainadmit check` as CI runs it: real files, exit codes 0 / 1 / 2 (one test starts the real
program; the others run the same command line in-process)."""

from __future__ import annotations

import json
import subprocess
import sys

import yaml
from support.builders import job
from support.cli import run_cli
from support.manifests import load_yaml
from support.patches import apply_patch
from support.paths import EXAMPLES, FIXTURES, POLICIES, ROOT

trainadmit = run_cli


def program(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "trainadmit.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)


def test_admitted_file_exits_0_and_denied_exits_1():
    ok = program("check", str(EXAMPLES / "llama-pretrain.yaml"))
    assert ok.returncode == 0, ok.stderr
    assert "ADMITTED" in ok.stdout and "1 admitted, 0 denied" in ok.stdout
    bad = program("check", str(EXAMPLES / "denied-partial-nodes.yaml"))
    assert bad.returncode == 1
    assert "[topology.whole-node]" in bad.stdout and 'fix: set spec.template.spec.containers[0].resources.limits["nvidia.com/gpu"]: 8 and spec.parallelism: 3 and spec.completions: 3' in bad.stdout


def test_directory_of_examples_reports_each_object():
    r = trainadmit("check", str(EXAMPLES))
    assert r.returncode == 1
    # the 8 example workloads and, in examples/prerequisites/, the 6 objects they need (2 namespaces, 3 claims,
    # the pool's network), which no policy matches
    assert "14 objects: 3 admitted, 4 denied, 7 not matched" in r.stdout


def test_stdin_multi_document_and_json():
    docs = yaml.safe_dump_all([job(name="a"), job(name="b", gpus=3)])
    r = trainadmit("check", "-", "-o", "json", stdin=docs)
    assert r.returncode == 1
    records = json.loads(r.stdout)
    assert [x["allowed"] for x in records] == [True, False]
    assert records[1]["violations"][0]["rule"] == "topology.whole-node"
    r = trainadmit("check", "-", stdin=json.dumps(job(name="c")))
    assert r.returncode == 0


def test_patch_and_yaml_outputs_describe_the_same_object():
    src = EXAMPLES / "llama-pretrain.yaml"
    patch = json.loads(trainadmit("check", str(src), "-o", "patch").stdout)[0]["patch"]
    mutated = next(iter(yaml.safe_load_all(trainadmit("check", str(src), "-o", "yaml").stdout)))
    assert apply_patch(load_yaml(src)[0], patch) == mutated


def test_unreadable_input_and_invalid_policy_exit_2(tmp_path):
    r = trainadmit("check", str(tmp_path / "missing.yaml"))
    assert r.returncode == 2 and "no such file or directory" in r.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: Job\n  metadata: [\n")
    r = trainadmit("check", str(bad))
    assert r.returncode == 2 and "bad.yaml:2:11: not valid YAML: mapping values are not allowed" in r.stderr
    pol = tmp_path / "pol"
    pol.mkdir()
    (pol / "platform.yaml").write_text("apiVersion: trainadmit.io/v1alpha1\nkind: Platform\nmetadata: {name: p}\n"
                                       "spec: {gang: {backend: slurm}}\n")
    r = trainadmit("check", "-p", str(pol), str(EXAMPLES / "llama-pretrain.yaml"))
    assert r.returncode == 2
    assert "platform.yaml:4 (document 1): spec.gang.backend:" in r.stderr  # the line of the field


def test_admission_review_input_and_cluster_snapshot():
    r = trainadmit("check", str(FIXTURES / "admission-reviews" / "job-03-mutate-Job-CREATE.json"),
                   "--cluster", str(FIXTURES / "apiserver" / "nodes-list.json"),
                   "--cluster", str(FIXTURES / "apiserver" / "resourcequotas-list-with-usage.json"))
    assert r.returncode == 1
    assert "has 16 of 64 free (ResourceQuota)" in r.stdout
    assert "largest rack of pool h100-ib has 2 nodes (in the cluster)" in r.stdout


def test_explain_prints_field_lines_and_rule_declarations():
    r = trainadmit("check", "--explain", str(EXAMPLES / "denied-typos-and-shape.yaml"))
    assert r.returncode == 1
    lines = r.stdout.splitlines()
    priority = next(line for line in lines if "<- PriorityTier normal: spec.className" in line)
    assert priority.rstrip().endswith(")") and "(priorities.yaml:" in priority
    assert any("[custom.owner-label] Rule owner-label at rules.yaml:" in line for line in lines)
    assert any(line.strip().startswith("[nccl.syntax] built-in rule declared at webhook/engine/concerns/nccl.py:")
               for line in lines)


def test_policy_lint_and_schema():
    r = trainadmit("policy", "lint", str(POLICIES))
    assert r.returncode == 0 and "OK" in r.stdout
    schema = json.loads(trainadmit("policy", "schema").stdout)
    assert "Pool" in schema["discriminator"]["mapping"]
