"""Certificates for the webhook: issue a CA and serving certificate, rotate them, check them, and
put the CA bundle into the webhook configurations (``trainadmit certs …``)."""

from .pki import CertDir, KeyPair, check, issue, issue_ca, issue_serving, rotate, service_names

__all__ = ["CertDir", "KeyPair", "check", "issue", "issue_ca", "issue_serving", "rotate", "service_names"]
