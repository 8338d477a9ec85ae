"""Reading the fixtures: YAML manifests as the user wrote them, AdmissionReviews as the apiserver sent them."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import yaml

from support.paths import FIXTURES


def load_yaml(path: Path) -> list[dict]:
    return [d for d in yaml.load_all(path.read_text(), Loader=yaml.CSafeLoader) if d is not None]


def review(name: str) -> dict:
    """A captured AdmissionReview body, exactly as the kube-apiserver sent it."""
    return json.loads((FIXTURES / "admission-reviews" / name).read_text())["review"]


def deep(obj):
    return copy.deepcopy(obj)
