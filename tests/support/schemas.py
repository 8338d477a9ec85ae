"""The official strict OpenAPI schemas of Kubernetes (``kubernetes-validate``), as the apiserver validates."""

from __future__ import annotations

import json
from functools import cache

import importlib_resources
import jsonschema
from referencing import Registry, Resource

K8S_VERSION = "1.37.0"


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
