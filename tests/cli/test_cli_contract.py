"""The command line's contract (docs/cli.md): exit codes and streams a CI step can rely on.

Each test is a row of what broke it before: a closed stdout read as success, denied objects printed
as storable YAML, documents that are not Kubernetes objects "left alone" with exit 0, no input read
as "0 objects, admitted", labels and namespaces that did not say which object, policy commands with
different exit codes for the same missing directory, and help that named internal variables."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml
from support.builders import job
from support.cli import run_cli
from support.corpus import generated_jobs
from support.paths import EXAMPLES, FIXTURES, POLICIES, ROOT

EXIT_CODES = {0, 1, 2, 130}


def program(*args: str, stdin: str | None = None, shell_suffix: str = "", timeout: float = 120):
    """``python -m trainadmit.cli ARGS`` in a shell (for redirections such as ``>&-`` and pipes)."""
    command = " ".join([sys.executable, "-m", "trainadmit.cli", *(f"'{a}'" for a in args)]) + shell_suffix
    return subprocess.run(["bash", "-o", "pipefail", "-c", command], capture_output=True, text=True, cwd=ROOT,
                          input=stdin, timeout=timeout)


# ---- stdout that stops taking output ---------------------------------------------------------

@pytest.fixture(scope="module")
def many_jobs(tmp_path_factory):
    """Enough output (about 400 KB) that a reader which stops after one line closes the pipe mid-run."""
    directory = tmp_path_factory.mktemp("many")
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # libyaml's: the same YAML, written 10x faster
    (directory / "jobs.yaml").write_text(yaml.dump_all(generated_jobs(600), Dumper=dumper, sort_keys=False))
    return directory


@pytest.mark.parametrize("output", ["text", "json", "yaml"])
def test_a_reader_that_stops_early_fails_the_run(many_jobs, output):
    r = program("check", str(many_jobs), "-o", output, shell_suffix=" | head -1")
    assert r.returncode == 2, r.stderr  # pipefail: the first command's exit code
    # -o yaml reports each denial on stderr as it meets it: how many came before the pipe broke is timing
    lines = [line for line in r.stderr.splitlines() if "trainadmit denied this object" not in line]
    assert len(lines) == 1 and "stdout stopped taking output" in r.stderr
    assert "Traceback" not in r.stderr and "Exception ignored" not in r.stderr


def test_a_closed_stdout_is_a_failure_even_when_everything_is_admitted():
    ok = program("check", str(EXAMPLES / "llama-pretrain.yaml"))
    assert ok.returncode == 0
    closed = program("check", str(EXAMPLES / "llama-pretrain.yaml"), shell_suffix=" >&-")
    assert closed.returncode == 2 and "stdout is closed" in closed.stderr


def test_a_full_disk_is_a_failure():
    r = program("check", str(EXAMPLES), shell_suffix=" > /dev/full")
    assert r.returncode == 2 and "No space left on device" in r.stderr and "Traceback" not in r.stderr


# ---- -o yaml prints what would be stored, and only that ----------------------------------------

def test_yaml_never_prints_a_denied_object():
    r = run_cli("check", str(EXAMPLES), "-o", "yaml")
    assert r.returncode == 1
    stored = [d for d in yaml.safe_load_all(r.stdout) if d]
    names = sorted(d["metadata"].get("name") or d["metadata"]["generateName"] for d in stored if d["kind"] == "Job")
    # the examples' own headers say which three are admitted and which one is left alone (not a GPU Job)
    assert names == sorted(["bert-finetune", "llama-pretrain", "eval-", "tokenize"])
    assert all("trainadmit.io/applied" in d["metadata"].get("annotations", {}) for d in stored
               if d["kind"] == "Job" and d["metadata"].get("name") != "tokenize")
    denied = [line for line in r.stdout.splitlines() if "DENIED" in line]
    assert len(denied) == 4 and all(line.startswith("# ") for line in denied)
    assert r.stderr.count("trainadmit denied this object") == 4


# ---- input that is not a Kubernetes object -------------------------------------------------------

@pytest.mark.parametrize("text, message", [
    ("- a\n- b\n", "#1: not a Kubernetes object (a list, where a mapping with apiVersion and kind belongs)"),
    ("just a string\n", "#1: not a Kubernetes object (a string"),
    ("42\n", "#1: not a Kubernetes object (a number"),
    ("kind: Job\nmetadata: {name: x}\n", "#1: not a Kubernetes object: apiVersion missing or not a string"),
    ("apiVersion: batch/v1\nmetadata: {name: x}\n", "#1: not a Kubernetes object: kind missing or not a string"),
    ("apiVersion: batch/v1\nkind: Job\nmetadata: [x]\n", "#1: Job: metadata is not a mapping"),
])
def test_a_document_that_is_not_an_object_is_an_input_problem(tmp_path, text, message):
    path = tmp_path / "doc.yaml"
    path.write_text(text)
    r = run_cli("check", str(path))
    assert r.returncode == 2 and f"{path}{message}" in r.stderr
    assert ": not matched (" not in r.stdout


def test_the_other_documents_are_still_decided(tmp_path):
    path = tmp_path / "mixed.yaml"
    path.write_text("- not\n- an object\n---\n" + yaml.safe_dump(job(name="after")))
    r = run_cli("check", str(path), "-o", "json")
    assert r.returncode == 2 and [x["object"] for x in json.loads(r.stdout)] == ["Job team-nlp/after"]


def test_an_empty_file_and_no_arguments_are_input_problems(tmp_path):
    empty = tmp_path / "empty.yaml"
    empty.write_text("# nothing here yet\n")
    r = run_cli("check", str(empty))
    assert r.returncode == 2 and f"{empty}: no Kubernetes objects (empty)" in r.stderr
    bare = run_cli("check", stdin=yaml.safe_dump(job()))  # stdin only when asked with -
    assert bare.returncode == 2 and "no input: give FILE arguments (files or directories), or - to read stdin" in bare.stderr
    assert run_cli("check", "-", stdin=yaml.safe_dump(job())).returncode == 0


# ---- which object a line is about -------------------------------------------------------------

def test_each_item_of_a_list_has_its_own_label(tmp_path):
    path = tmp_path / "list.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [job(name="a"), job(name="b", gpus=3)]}))
    r = run_cli("check", str(path))
    assert r.stdout.splitlines()[0].startswith(f"{path}#1.items[0]: Job team-nlp/a: ADMITTED")
    assert any(line.startswith(f"{path}#1.items[1]: Job team-nlp/b: DENIED") for line in r.stdout.splitlines())
    records = json.loads(run_cli("check", str(path), "-o", "json").stdout)
    assert [(x["document"], x["item"]) for x in records] == [(1, 0), (1, 1)]


def test_a_typed_list_from_the_api_is_decided_item_by_item(tmp_path):
    """The API's JobList items carry no kind or apiVersion: they are Jobs (not "kind None/Job")."""
    items = [{k: v for k, v in job(name=n).items() if k not in ("kind", "apiVersion")} for n in ("a", "b")]
    path = tmp_path / "joblist.json"
    path.write_text(json.dumps({"apiVersion": "batch/v1", "kind": "JobList", "metadata": {}, "items": items}))
    r = run_cli("check", str(path))
    assert r.returncode == 0 and r.stdout.count(": ADMITTED") == 2


def test_the_namespace_given_is_the_one_every_line_names():
    unnamespaced = job(name="vision-run", gpus=8, workers=8)
    del unnamespaced["metadata"]["namespace"]
    r = run_cli("check", "-n", "team-vision", "-", stdin=yaml.safe_dump(unnamespaced))
    head = r.stdout.splitlines()[0]
    assert head.startswith("<stdin>#1: Job team-vision/vision-run: DENIED"), head
    assert "namespace team-vision" in r.stdout


def test_a_given_cluster_view_is_not_called_missing():
    nodes = FIXTURES / "apiserver" / "nodes-list.json"
    r = run_cli("check", "--cluster", str(nodes), str(EXAMPLES / "llama-pretrain.yaml"))
    assert "without a cluster view" not in r.stdout
    [line] = [line for line in r.stdout.splitlines() if line.startswith("  ? not verified")]
    assert line.startswith("  ? not verified (the cluster view holds no list of their kinds): ")
    # nodes alone hold no /apis and /version either: the gang backend is what auto assumed, and said so
    assert "the gang backend native/pod-group (without the cluster's discovery" in line
    assert ", PriorityClass training-high," in line


def test_a_cluster_snapshot_that_is_not_text_is_one_line(tmp_path):
    binary = tmp_path / "nodes.json"
    binary.write_bytes(bytes(range(256)) * 4)
    r = run_cli("check", "--cluster", str(binary), str(EXAMPLES / "llama-pretrain.yaml"))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and f"{binary}: not UTF-8 text" in r.stderr


# ---- --explain --------------------------------------------------------------------------------

def test_explain_in_yaml_is_comments_and_in_json_is_data():
    src = EXAMPLES / "llama-pretrain.yaml"
    out = run_cli("check", "--explain", "-o", "yaml", str(src)).stdout
    comments = [line for line in out.splitlines() if line.startswith("# ")]
    assert any("/spec/template/spec/priorityClassName  <- PriorityTier" in line for line in comments)
    # the Job, then the PodGroup of its native gang (the reconciler's, in pod-group mode)
    assert [(d["kind"], d["metadata"]["name"]) for d in yaml.safe_load_all(out) if d] == \
        [("Job", "llama-pretrain"), ("PodGroup", "llama-pretrain-gang")]
    [record] = json.loads(run_cli("check", "--explain", "-o", "json", str(src)).stdout)
    assert any(i["path"] == "/spec/template/spec/priorityClassName" and i["at"].startswith("priorities.yaml:")
               for i in record["explain"]["injected"])


def test_explain_names_the_quota_setting_behind_a_quota_denial():
    r = run_cli("check", "--explain", str(EXAMPLES / "denied-team-limits.yaml"))
    line = next(x for x in r.stdout.splitlines() if x.strip().startswith("[quota.gpus-per-job]"))
    # policies/quotas.yaml: the second document, Quota "teams", sets maxGPUsPerJob: 32 on line 21
    assert "set by Quota teams: spec.maxGPUsPerJob (quotas.yaml:21)" in line
    assert "built-in rule declared at webhook/engine/concerns/quota.py:" in line


def test_explain_calls_a_default_a_default(tmp_path):
    assert run_cli("policy", "init", str(tmp_path / "p")).returncode == 0  # its platform.yaml sets no shm
    r = run_cli("check", "-p", str(tmp_path / "p"), "--explain", str(EXAMPLES / "llama-pretrain.yaml"))
    shm = next(x for x in r.stdout.splitlines() if x.strip().startswith("/spec/template/spec/volumes/0"))
    assert "default: Platform platform at platform.yaml:" in shm and "does not set spec.shm.sizeLimit" in shm


# ---- policy commands ----------------------------------------------------------------------------

@pytest.mark.parametrize("command", ["lint", "test", "configmap", "webhooks", "priorityclasses"])
def test_every_policy_command_answers_a_missing_or_wrong_directory_alike(tmp_path, command):
    missing = run_cli("policy", command, str(tmp_path / "nope"))
    assert missing.returncode == 2 and f"{tmp_path / 'nope'}: no such directory" in missing.stderr
    afile = tmp_path / "platform.yaml"
    afile.write_text("kind: Platform\n")
    r = run_cli("policy", command, str(afile))
    assert r.returncode == 2 and "a file, not a directory" in r.stderr


def test_lint_counts_in_the_singular(tmp_path):
    run_cli("policy", "init", str(tmp_path / "p"))
    out = run_cli("policy", "lint", str(tmp_path / "p")).stdout
    assert ": 1 pool, 0 datasets, 0 checkpoint classes, 1 priority tier, 0 quotas, 0 rules: OK" in out


def test_generated_headers_name_the_directory_given(tmp_path):
    run_cli("policy", "init", str(tmp_path / "p"))
    for command in ("webhooks", "configmap", "priorityclasses"):
        first = run_cli("policy", command, str(tmp_path / "p")).stdout.splitlines()[0]
        assert first == f"# Generated by `trainadmit policy {command} {tmp_path / 'p'}`; do not edit."


def test_configmap_keeps_the_files_readable():
    out = run_cli("policy", "configmap", str(POLICIES)).stdout
    assert "  platform.yaml: |\n    # yaml-language-server" in out  # a literal block, not an escaped string
    cm = yaml.safe_load(out)
    assert cm["data"]["quotas.yaml"] == (POLICIES / "quotas.yaml").read_text()


# ---- help ---------------------------------------------------------------------------------------

def test_the_program_alone_lists_its_commands():
    r = run_cli()
    assert r.returncode == 0
    assert all(name in r.stdout for name in ("check", "policy", "serve", "preflight", "certs"))
    group = run_cli("policy")
    assert group.returncode == 0 and "lint" in group.stdout and "policy_command" not in group.stdout + group.stderr


@pytest.mark.parametrize("args", [[], ["check"], ["policy"], ["policy", "lint"], ["certs", "issue"], ["serve"],
                                  ["preflight"]])
def test_version_everywhere(args):
    r = run_cli(*args, "--version")
    assert (r.returncode, r.stdout.strip()) == (0, "trainadmit 0.1.0")


def test_a_usage_error_is_one_line_naming_the_argument():
    r = run_cli("check", "-o", "xml", "x.yaml")
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    assert "argument -o/--output: invalid choice: 'xml'" in r.stderr
    unknown = run_cli("certs", "bogus")
    assert unknown.returncode == 2 and "certs_command" not in unknown.stderr and unknown.stderr.count("\n") == 1


def _actions(parser, path=()):
    import argparse

    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _actions(sub, (*path, name))
        elif not isinstance(action, argparse._HelpAction):
            yield path, action, parser


def _unwrapped(parser) -> str:
    """The parser's help as one line: argparse wraps at hyphens (``trainadmit-`` / ``system``) and spaces."""
    import re

    return " ".join(re.sub(r"-\n\s+", "-", parser.format_help()).split())


def test_every_option_has_help_and_shows_its_default():
    from trainadmit.cli.main import build_parser

    parser = build_parser()
    missing, no_default = [], []
    for path, action, sub in _actions(parser):
        name = " ".join(path) + " " + (action.option_strings[-1] if action.option_strings else action.dest)
        if not action.help:
            missing.append(name)
        elif action.default not in (None, False, [], "==SUPPRESS==") and str(action.default) not in _unwrapped(sub):
            no_default.append(name)
    assert missing == [], "options without help text"
    assert no_default == [], "options whose --help does not show their default"


def test_environment_defaults_are_named_in_help(monkeypatch):
    r = run_cli("check", "--help")
    assert "$TRAINADMIT_POLICY_DIR" in r.stdout and r.returncode == 0


def test_no_command_exit_code_is_outside_the_contract():
    from trainadmit.cli.common import EXIT_CODES as DECLARED

    assert set(DECLARED) == EXIT_CODES
    assert os.environ.get("TRAINADMIT_TRACEBACK") is None  # the battery relies on one-line errors
