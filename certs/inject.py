"""Put the CA bundle into trainadmit's Mutating/ValidatingWebhookConfigurations.

Two ways: print the manifests with ``caBundle`` set (GitOps: commit the output), or patch the
live objects through the Kubernetes API with the official client (in-cluster config or
kubeconfig). During a CA rotation the bundle holds both CAs, so either serving certificate is
trusted while the apiserver picks up the change.
"""

from __future__ import annotations

import base64

import yaml

WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")


def set_ca_bundle(obj: dict, bundle_b64: str, name: str) -> bool:
    if obj.get("kind") not in WEBHOOK_KINDS or (obj.get("metadata") or {}).get("name") != name:
        return False
    for webhook in obj.get("webhooks") or []:
        webhook.setdefault("clientConfig", {})["caBundle"] = bundle_b64
    return True


class NoWebhookConfiguration(ValueError):
    """The manifests hold no webhook configuration of that name: nothing to inject into."""


def inject_manifests(docs: list, bundle_pem: bytes, name: str = "trainadmit") -> str:
    """The manifests as YAML, with ``caBundle`` set on every webhook of the configurations named ``name``."""
    bundle_b64 = base64.b64encode(bundle_pem).decode()
    if not [d for d in docs if isinstance(d, dict) and set_ca_bundle(d, bundle_b64, name)]:  # no short-circuit
        raise NoWebhookConfiguration(f"no {' or '.join(WEBHOOK_KINDS)} named {name!r} in the input")
    return yaml.safe_dump_all(docs, sort_keys=False)


def inject_live(admission, bundle_pem: bytes, name: str = "trainadmit") -> list[str]:
    """Set caBundle on every webhook of the live configurations that lack this bundle.

    ``admission`` is a kubernetes ``AdmissionregistrationV1Api``. Each replace carries the
    resourceVersion it read, so a concurrent change makes it fail (409, left for the next pass)
    rather than be overwritten; a configuration that does not exist (404) is skipped."""
    from kubernetes.client.exceptions import ApiException

    wanted = base64.b64encode(bundle_pem).decode()
    done = []
    for read, replace, kind in (
        (admission.read_mutating_webhook_configuration, admission.replace_mutating_webhook_configuration,
         WEBHOOK_KINDS[0]),
        (admission.read_validating_webhook_configuration, admission.replace_validating_webhook_configuration,
         WEBHOOK_KINDS[1]),
    ):
        try:
            obj = read(name)
        except ApiException as exc:
            if exc.status == 404:
                continue
            raise
        stale = [w for w in obj.webhooks or [] if w.client_config.ca_bundle != wanted]
        if not stale:
            continue
        for w in stale:
            w.client_config.ca_bundle = wanted
        try:
            replace(name, obj)
        except ApiException as exc:
            if exc.status != 409:
                raise
            continue
        done.append(f"{kind}/{name}: caBundle set on {len(stale)} webhook(s)")
    return done


def apply_ca_bundle(bundle_pem: bytes, name: str = "trainadmit") -> list[str]:
    """`certs inject-ca --apply`: the live injection, with the pod's or the local credentials."""
    from kubernetes import client

    from ..cluster.kube import load_config

    load_config()
    return inject_live(client.AdmissionregistrationV1Api(), bundle_pem, name) or ["caBundle already current"]
