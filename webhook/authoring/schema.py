"""JSON Schema of policy documents, generated from the models (for editors and `policy schema`)."""

from __future__ import annotations

from typing import Annotated, Any, Union

from pydantic import Field, TypeAdapter

from ..policy.models import DOCUMENT_KINDS

PolicyDocument = Annotated[Union[tuple(DOCUMENT_KINDS.values())], Field(discriminator="kind")]  # type: ignore[valid-type]  # noqa: UP007


def policy_json_schema() -> dict[str, Any]:
    schema = TypeAdapter(PolicyDocument).json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "trainadmit policy document (trainadmit.io/v1alpha1)"
    return schema
