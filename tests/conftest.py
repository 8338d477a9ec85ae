"""Shared test helpers: the real fixtures (copied into tests/fixtures/, see SOURCES.md there), the
real policies, the official 1.37 schemas. Nothing here reads outside the project."""

from __future__ import annotations

import copy
import json
from functools import cache
from pathlib import Path

import importlib_resources
import jsonpatch
import jsonschema
import pytest
import yaml
from referencing import Registry, Resource

from trainadmit.engine import load_policy

ROOT = Path(__file__).resolve().parent.parent
pytest_plugins = ["kube_fixtures", "rule_coverage"]  # the integration tier's control plane; every rule fires


FIXTURES = ROOT / "tests" / "fixtures"
POLICIES = ROOT / "policies"
EXAMPLES = ROOT / "examples"
K8S_VERSION = "1.37.0"


@pytest.fixture(scope="session", autouse=True)
def policy_cache_dir(tmp_path_factory):
    """`check` keeps validated policy sets in $TRAINADMIT_CACHE_DIR (else ~/.cache/trainadmit):
    the tests, and the programs they start, keep theirs in a temporary directory."""
    directory = tmp_path_factory.mktemp("policy-cache")
    patch = pytest.MonkeyPatch()
    patch.setenv("TRAINADMIT_CACHE_DIR", str(directory))
    yield directory
    patch.undo()


@pytest.fixture(scope="session")
def policy():
    return load_policy(POLICIES)


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    """One real server process for the whole session (bundled policies, real certificates, the
    no-op endpoint on): the HTTPS tests share it, as the apiserver shares its connections."""
    from server_util import Server, issue_certs

    srv = Server(POLICIES, issue_certs(tmp_path_factory.mktemp("server-certs")), extra=["--enable-noop"])
    srv.wait_ready()
    yield srv
    assert srv.stop() == 0, "graceful shutdown must exit cleanly"


def load_yaml(path: Path) -> list[dict]:
    return [d for d in yaml.load_all(path.read_text(), Loader=yaml.CSafeLoader) if d is not None]


def review(name: str) -> dict:
    """A captured AdmissionReview body, exactly as the kube-apiserver sent it."""
    return json.loads((FIXTURES / "admission-reviews" / name).read_text())["review"]


def apply_patch(obj: dict, ops: list[dict]) -> dict:
    """Apply an RFC 6902 patch strictly, on a JSON round-trip copy, as the apiserver does."""
    doc = json.loads(json.dumps(obj))
    return jsonpatch.JsonPatch(ops).apply(doc, in_place=False)


def deep(obj):
    return copy.deepcopy(obj)


@cache
def _validator(kind: str, api_version: str, version: str = K8S_VERSION) -> jsonschema.Draft202012Validator:
    base = importlib_resources.files("kubernetes_validate").joinpath(
        f"kubernetes-json-schema/v{version}-local-strict")
    group_version = api_version.split("/")
    if len(group_version) == 1:
        suffix = group_version[0]
    else:
        suffix = f"{group_version[0].split('.')[0]}-{group_version[1]}"
    schema = json.loads(base.joinpath(f"{kind.lower()}-{suffix}.json").read_text())
    defs = json.loads(base.joinpath("_definitions.json").read_text())
    registry = Resource.from_contents(schema) @ Registry()
    registry = Resource.from_contents(defs) @ registry
    return jsonschema.Draft202012Validator(schema, registry=registry)


def schema_errors(obj: dict, version: str = K8S_VERSION) -> list[str]:
    """Every error of ``obj`` against the official strict OpenAPI schema of Kubernetes ``version`` (1.37)."""
    validator = _validator(obj["kind"], obj["apiVersion"], version)
    return sorted(f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(obj))


def write_policy(directory: Path, platform: dict | None = None, extra: list[dict] | None = None,
                 replace: list[dict] | None = None) -> Path:
    """Copy the bundled policies into ``directory`` with Platform.spec fields overridden, ``extra`` documents
    added and ``replace`` documents instead of the bundled ones of the same kind and name."""
    directory.mkdir(parents=True, exist_ok=True)
    instead = {(d["kind"], d["metadata"]["name"]): d for d in replace or []}
    for src in POLICIES.glob("*.yaml"):
        docs = [instead.get((d["kind"], d["metadata"]["name"]), d) for d in load_yaml(src)]
        for doc in docs:
            if doc["kind"] == "Platform" and platform:
                for key, value in platform.items():
                    if isinstance(value, dict) and isinstance(doc["spec"].get(key), dict):
                        doc["spec"][key] = {**doc["spec"][key], **value}
                    else:
                        doc["spec"][key] = value
        (directory / src.name).write_text(yaml.safe_dump_all(docs, sort_keys=False))
    if extra:
        (directory / "extra.yaml").write_text(yaml.safe_dump_all(extra, sort_keys=False))
    return directory


BACKENDS = {
    # a 1.37 cluster with the gates Job.spec.scheduling and its topology constraint need (the bundled policy
    # leaves the version and backend to auto and declares no gates)
    "native-job": {"kubernetesVersion": "1.37",
                   "featureGates": ["GenericWorkload", "WorkloadWithJob", "TopologyAwareWorkloadScheduling"],
                   "gang": {"backend": "native", "nativeMode": "job-scheduling"}},
    "native-podgroup": {"gang": {"backend": "native", "nativeMode": "pod-group"}},
    "coscheduling": {"gang": {"backend": "coscheduling"}},
    "volcano": {"gang": {"backend": "volcano", "queue": "training"}},
    "kueue": {"gang": {"backend": "kueue", "queue": "team-queue"}},
}


@pytest.fixture(scope="session", params=sorted(BACKENDS))
def backend_policy(request, tmp_path_factory):
    directory = write_policy(tmp_path_factory.mktemp(request.param), BACKENDS[request.param])
    return request.param, load_policy(directory)


def flatten(obj, prefix="") -> dict[str, object]:
    """JSON-pointer -> scalar for every leaf (empty maps/lists count as leaves)."""
    out: dict[str, object] = {}
    if isinstance(obj, dict) and obj:
        for k, v in obj.items():
            out.update(flatten(v, f"{prefix}/{str(k).replace('~', '~0').replace('/', '~1')}"))
    elif isinstance(obj, list) and obj:
        for i, v in enumerate(obj):
            out.update(flatten(v, f"{prefix}/{i}"))
    else:
        out[prefix] = obj
    return out


def injected_leaves(before: dict, after: dict) -> dict[str, object]:
    """Leaves that the mutation added or changed (what trainadmit injected)."""
    b, a = flatten(before), flatten(after)
    return {k: v for k, v in a.items() if b.get(k, object()) != v and not (v == {} and k not in b)}


# ---- no process outlives the suite (suite_processes) ----------------------------------------------------

def _runs_tests(config) -> bool:
    """This process runs tests (an xdist worker, or pytest without xdist), not only the xdist controller,
    whose workers carry its marker too."""
    return hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    if _runs_tests(config):
        import suite_processes

        suite_processes.mark_this_process()


@pytest.fixture(autouse=True)
def _processes_stop_with_their_test():
    """A server a test started and did not stop (it failed first, or was interrupted) stops with the test;
    those of session and module fixtures were started before this point and are their fixtures' to stop."""
    import suite_processes

    before = suite_processes.started()
    yield
    suite_processes.stop_started_since(before)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    if _runs_tests(session.config):
        import suite_processes

        suite_processes.sweep()
