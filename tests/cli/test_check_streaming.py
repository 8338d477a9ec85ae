"""`trainadmit check` writes each object's result as soon as it is decided, and the bytes are those
of rendering all the decisions at the end: ``json.dumps(list, indent=2)``, ``yaml.dump_all`` with
libyaml's stock dumper (plus a comment line before each object no policy matches), the text lines
joined. The expected output is built here the straightforward way, from the documents as PyYAML
loads them and the engine's decisions."""

from __future__ import annotations

import functools
import io
import json
import re

import pytest
import yaml
from support.builders import job
from support.cli import run_cli
from support.corpus import generated_jobs
from support.paths import EXAMPLES, FIXTURES, POLICIES

from trainadmit.cli.inputs import Item, _expand, iter_items, manifest_files
from trainadmit.cli.render import patch_element, record, short_reason, text
from trainadmit.engine import Request, decide, load_policy

OPTIONS = {"sort_keys": False, "default_flow_style": False, "width": 120}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Generated Jobs (one per file, and several in one file), the examples (a CPU Job no policy
    matches among them), a List, a captured AdmissionReview and an object of an unhandled kind."""
    directory = tmp_path_factory.mktemp("corpus")
    jobs = generated_jobs(45)
    for i, obj in enumerate(jobs[:30]):
        (directory / f"a-{i:03d}.yaml").write_text(yaml.safe_dump(obj, sort_keys=False))
    (directory / "b-multi.yaml").write_text(yaml.safe_dump_all(jobs[30:40], sort_keys=False))
    (directory / "c-list.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": jobs[40:]}))
    for path in sorted(EXAMPLES.glob("*.yaml")):
        (directory / f"d-{path.name}").write_text(path.read_text())
    review = FIXTURES / "admission-reviews" / "job-03-mutate-Job-CREATE.json"
    (directory / "e-review.json").write_text(review.read_text())
    (directory / "f-configmap.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {a: b}\n")
    return directory


def expected(directory, output: str) -> tuple[str, int, int]:
    """(stdout, exit code, objects not matched or denied: the YAML stream's comment lines) rendered from
    every decision at once."""
    items = [item for path in sorted(p for p in directory.rglob("*") if p.is_file())
             for i, doc in enumerate(yaml.load_all(path.read_text(), Loader=yaml.CSafeLoader), start=1)
             if doc is not None for item in _expand(str(path), i, doc)]
    decisions = [decide_item(item) for item in items]
    denied = sum(1 for d in decisions if d.matched and not d.allowed)
    admitted = sum(1 for d in decisions if d.matched and d.allowed)
    unmatched = sum(1 for d in decisions if not d.matched)
    code = 1 if denied else 0
    marked = unmatched + denied
    if output == "json":
        return json.dumps([record(i, d) for i, d in zip(items, decisions, strict=True)], indent=2,
                          ensure_ascii=False) + "\n", code, marked
    if output == "patch":
        return json.dumps([patch_element(i, d) for i, d in zip(items, decisions, strict=True)], indent=2,
                          ensure_ascii=False) + "\n", code, marked
    if output == "yaml":
        objects = []
        for item, d in zip(items, decisions, strict=True):
            if not d.allowed:  # a denied object is never in the stream: the apiserver would store nothing
                continue
            objects.append(d.mutated if d.mutated is not None else item.obj)
            objects.extend(d.companions)
        return yaml.dump_all(objects, Dumper=yaml.CSafeDumper, **OPTIONS), code, marked
    lines = [text(i, d) for i, d in zip(items, decisions, strict=True)]
    lines.append(f"{len(items)} objects: {admitted} admitted, {denied} denied, {unmatched} not matched "
                 f"(policy generation {decisions[0].generation})")
    return "\n".join(lines) + "\n", code, marked


@functools.cache
def bundled_policy():
    return load_policy(POLICIES)


def decide_item(item: Item):
    return decide(bundled_policy(), Request(item.obj, operation=item.operation, old=item.old,
                                  namespace=item.namespace or "default", user=item.user or {}))


@pytest.mark.parametrize("output", ["text", "json", "patch", "yaml"])
def test_streamed_output_is_the_all_at_once_rendering(corpus, output):
    want, code, marked = expected(corpus, output)
    r = run_cli("check", str(corpus), "-o", output)
    assert r.returncode == code == 1
    got = r.stdout
    if output == "yaml":
        markers = [line for line in got.splitlines() if line.startswith("# ")]
        got = "".join(line for line in got.splitlines(keepends=True) if not line.startswith("# "))
        assert len(markers) == marked >= 6
        assert all(": not matched (" in m or ": not printed, it would not be stored" in m for m in markers)
    assert got == want
    assert len(want) > 10_000


def test_yaml_marks_each_object_no_policy_matches_right_before_it(corpus):
    cpu, llama, configmap = (corpus / name for name in ("d-cpu-preprocessing.yaml", "d-llama-pretrain.yaml",
                                                        "f-configmap.yaml"))
    out = run_cli("check", str(cpu), str(llama), str(configmap), "-o", "yaml").stdout
    reasons = [decide_item(Item("", 1, yaml.safe_load(p.read_text()))).reason for p in (cpu, configmap)]
    assert all(reasons)
    assert out.splitlines()[0] == f"# {cpu}#1: Job team-nlp/tokenize: not matched ({short_reason(reasons[0])})"
    docs = out.split("\n---\n")
    # the llama Job is followed by the PodGroup its native gang gets from the reconciler (pod-group mode: the
    # bundled policy declares no WorkloadWithJob)
    assert len(docs) == 4 and docs[3].startswith("apiVersion: v1\nkind: ConfigMap")
    assert docs[2].endswith(f"\n# {configmap}#1: ConfigMap default/c: not matched ({short_reason(reasons[1])})")
    assert [d["kind"] for d in yaml.safe_load_all(out)] == ["Job", "Job", "PodGroup", "ConfigMap"]


def test_a_line_break_in_a_name_cannot_end_the_marker_comment():
    doc = {"apiVersion": "v1", "kind": "Secret\nstolen: true\u2028x", "metadata": {"name": "a\r\nb: c"}}
    out = run_cli("check", "-", "-o", "yaml", stdin=json.dumps(doc)).stdout
    assert [d for d in yaml.safe_load_all(out)] == [doc]
    assert out.splitlines()[0].startswith("# <stdin>#1: Secret\\u000astolen: true\\u2028x default/a\\u000d\\u000ab: c")


class LoggingStdin(io.StringIO):
    """stdin that notes, each time it is read, how much output there is already."""

    def __init__(self, text: str, out: io.StringIO):
        super().__init__(text)
        self.out, self.seen = out, []

    def read(self, size: int = -1) -> str:
        self.seen.append(len(self.out.getvalue()))
        return super().read(size if size is not None and size >= 0 else 4096)  # a pipe gives what it has


@pytest.mark.parametrize("output", ["text", "json", "yaml", "patch"])
def test_objects_are_written_while_the_input_is_still_being_read(output, monkeypatch):
    import sys

    text_in = yaml.safe_dump_all(generated_jobs(30), sort_keys=False)
    out = io.StringIO()
    stdin = LoggingStdin(text_in, out)
    monkeypatch.setattr(sys, "stdin", stdin)
    monkeypatch.setattr(sys, "stdout", out)
    from trainadmit.cli.main import main

    assert main(["check", "-", "-o", output]) in (0, 1)
    assert len(stdin.seen) > 5
    half = stdin.seen[len(stdin.seen) // 2]
    assert 0 < half < len(out.getvalue()) / 1.5, "half-way through the input, output must be well under way"


def test_files_are_read_one_at_a_time(corpus, monkeypatch):
    from pathlib import Path

    from trainadmit.cli import inputs

    opened: list[str] = []
    real = inputs.read_text

    def read_text(file: str) -> str:
        opened.append(Path(file).name)
        return real(file)

    monkeypatch.setattr(inputs, "read_text", read_text)
    items = iter_items(manifest_files([str(corpus)]), lambda exc: None)
    first = next(items)
    assert first.source.endswith("a-000.yaml") and opened == ["a-000.yaml"]


def test_an_unparsable_file_is_reported_and_the_others_are_still_checked(tmp_path):
    (tmp_path / "a.yaml").write_text(yaml.safe_dump(job(name="first")))
    (tmp_path / "b.yaml").write_text("kind: Job\n  metadata: [\n")
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(job(name="third", gpus=3)))
    r = run_cli("check", str(tmp_path), "-o", "json")
    assert r.returncode == 2
    assert re.search(r"b\.yaml:\d+:\d+: not valid YAML: ", r.stderr)
    assert [x["object"] for x in json.loads(r.stdout)] == ["Job team-nlp/first", "Job team-nlp/third"]
    r = run_cli("check", str(tmp_path))
    assert r.returncode == 2 and r.stdout.splitlines()[-1].startswith("2 objects: 1 admitted, 1 denied, 0 not matched, "
                                                                       "1 input problem (policy generation ")


@pytest.mark.parametrize("stdin, names", [
    (json.dumps([job(name="a"), job(name="b")]), ["a", "b"]),
    ("\n" * 5000 + json.dumps(job(name="late")), ["late"]),  # JSON after a long run of blank lines
    ("# a comment\n" + yaml.safe_dump(job(name="y")), ["y"]),
    ("{name: flow, kind: Job, apiVersion: batch/v1, metadata: {name: flow, namespace: team-nlp}}", ["flow"]),
])
def test_stdin_json_and_yaml(stdin, names):
    r = run_cli("check", "-", "-o", "json", stdin=stdin)
    assert r.returncode in (0, 1), r.stderr
    assert [x["object"].rsplit("/", 1)[1] for x in json.loads(r.stdout)] == names


@pytest.mark.parametrize("stdin", ["", "   \n", "# only a comment\n---\n"])
def test_no_objects_is_an_input_problem_with_well_formed_output(stdin):
    """Nothing checked is not "admitted": an empty stdin (a `kustomize build` that failed upstream of
    the pipe) is exit 2, and the machine formats stay parseable."""
    json_run = run_cli("check", "-", "-o", "json", stdin=stdin)
    assert (json_run.returncode, json_run.stdout) == (2, "[]\n")
    assert "<stdin>: no Kubernetes objects (empty)" in json_run.stderr
    assert run_cli("check", "-", "-o", "yaml", stdin=stdin).stdout == ""
    text = run_cli("check", "-", stdin=stdin)
    assert text.returncode == 2 and text.stdout.startswith("0 objects: 0 admitted")
