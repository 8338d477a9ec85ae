"""``trainadmit policy webhooks --url``: webhook configurations for a server outside the cluster (a laptop, a dev
cluster), with what such a server needs in the cluster. Expected from the admissionregistration.k8s.io/v1 API
(``clientConfig.url``: https only, no user, query or fragment) and from deploy/base, which it must equal except
``clientConfig``."""

from __future__ import annotations

import base64

import pytest
import yaml
from support.cli import run_cli
from support.paths import POLICIES, ROOT
from support.schemas import schema_errors

from trainadmit.certs import pki
from trainadmit.engine import load_policy

URL = "https://127.0.0.1:8443"


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    out = tmp_path_factory.mktemp("certs")
    pki.issue(out, "trainadmit", "trainadmit-system", ips=["127.0.0.1"])
    return out


def _docs(text: str) -> list[dict]:
    return [d for d in yaml.safe_load_all(text) if d]


def test_url_calls_the_local_server_and_brings_the_namespace_and_priority_classes(certs):
    r = run_cli("policy", "webhooks", str(POLICIES), "--url", URL + "/", "--ca", str(certs / "ca.crt"))
    assert r.returncode == 0, r.stderr
    docs = _docs(r.stdout)
    assert [d["kind"] for d in docs] == ["Namespace", "PriorityClass", "PriorityClass", "PriorityClass",
                                         "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"]
    assert docs[0]["metadata"]["name"] == "trainadmit-system"
    tiers = {t.className: t.value for t in load_policy(POLICIES).tiers.values()}
    assert {d["metadata"]["name"]: d["value"] for d in docs if d["kind"] == "PriorityClass"} == tiers
    bundle = base64.b64encode((certs / "ca.crt").read_bytes()).decode()
    installed = _docs((ROOT / "deploy" / "base" / "webhooks.yaml").read_text())
    for got, want, path in zip(docs[4:], installed, ("/mutate", "/validate"), strict=True):
        [hook], [base] = got["webhooks"], want["webhooks"]
        assert hook["clientConfig"] == {"url": URL + path, "caBundle": bundle}  # the trailing slash dropped
        assert {k: v for k, v in hook.items() if k != "clientConfig"} == \
            {k: v for k, v in base.items() if k != "clientConfig"}
    for doc in docs:
        assert schema_errors(doc) == [], doc["kind"]


def test_without_ca_the_url_configurations_carry_no_bundle():
    docs = _docs(run_cli("policy", "webhooks", str(POLICIES), "--url", URL).stdout)
    assert all("caBundle" not in d["webhooks"][0]["clientConfig"] for d in docs if "webhooks" in d)


@pytest.mark.parametrize("url, says", [
    ("http://127.0.0.1:8443", "over https only"),
    ("https://:8443", "no host"),
    ("https://me@127.0.0.1:8443", "a user, a query or a fragment"),
    ("https://127.0.0.1:8443/?x=1", "a user, a query or a fragment"),
])
def test_a_url_the_apiserver_refuses_is_one_line_and_exit_2(url, says):
    r = run_cli("policy", "webhooks", str(POLICIES), "--url", url)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and says in r.stderr and url in r.stderr


@pytest.mark.parametrize("name, says", [("tls.crt", "--ca"), ("missing.crt", "no such file"), (".", "a directory")])
def test_a_ca_that_is_not_a_ca_bundle_is_one_line_and_exit_2(certs, name, says):
    r = run_cli("policy", "webhooks", str(POLICIES), "--url", URL, "--ca", str(certs / name))
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and says in r.stderr, r.stderr
