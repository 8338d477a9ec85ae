"""Put the CA bundle into trainadmit's Mutating/ValidatingWebhookConfigurations.

Two ways: print the manifests with ``caBundle`` set (GitOps: commit the output), or patch the
live objects through the Kubernetes API with the official client (in-cluster config or
kubeconfig). During a CA rotation the bundle holds both CAs, so either serving certificate is
trusted while the apiserver picks up the change.
"""

from __future__ import annotations

import base64
import sys
from pathlib import Path

import yaml

WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")


def set_ca_bundle(obj: dict, bundle_b64: str, name: str) -> bool:
    if obj.get("kind") not in WEBHOOK_KINDS or (obj.get("metadata") or {}).get("name") != name:
        return False
    for webhook in obj.get("webhooks") or []:
        webhook.setdefault("clientConfig", {})["caBundle"] = bundle_b64
    return True


def _read(sources: list[str]) -> list[dict]:
    docs: list[dict] = []
    for src in sources:
        if src == "-":
            docs.extend(d for d in yaml.safe_load_all(sys.stdin.read()) if d)
            continue
        path = Path(src)
        files = sorted(p for p in path.rglob("*.y*ml")) if path.is_dir() else [path]
        for f in files:
            docs.extend(d for d in yaml.safe_load_all(f.read_text()) if d)
    return docs


def inject_manifests(sources: list[str], bundle_pem: bytes, name: str = "trainadmit") -> str:
    bundle_b64 = base64.b64encode(bundle_pem).decode()
    docs = _read(sources)
    if not [d for d in docs if set_ca_bundle(d, bundle_b64, name)]:  # every document, no short-circuit
        raise SystemExit(f"no {' or '.join(WEBHOOK_KINDS)} named {name!r} in the input")
    return yaml.safe_dump_all(docs, sort_keys=False)


def apply_ca_bundle(bundle_pem: bytes, name: str = "trainadmit") -> list[str]:
    """Patch the live webhook configurations (read, set caBundle on every webhook, replace)."""
    from kubernetes import client, config

    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    api = client.AdmissionregistrationV1Api()
    bundle_b64 = base64.b64encode(bundle_pem).decode()
    out = []
    for read, replace, kind in (
        (api.read_mutating_webhook_configuration, api.replace_mutating_webhook_configuration, WEBHOOK_KINDS[0]),
        (api.read_validating_webhook_configuration, api.replace_validating_webhook_configuration, WEBHOOK_KINDS[1]),
    ):
        obj = read(name)
        for webhook in obj.webhooks or []:
            webhook.client_config.ca_bundle = bundle_b64
        replace(name, obj)  # carries resourceVersion: a concurrent change makes this fail, not clobber
        out.append(f"{kind}/{name}: caBundle set on {len(obj.webhooks or [])} webhook(s)")
    return out
