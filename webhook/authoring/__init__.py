"""Policy authoring: lint, the policy test runner, JSON Schema, the generated reference, --explain, the ConfigMap.

Above the engine: these tools run the same engine the webhook runs, so a policy test means what the
cluster will do."""
