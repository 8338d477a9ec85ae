"""Small grammars with no knowledge of policies or workloads: Kubernetes quantities, NCCL values, CEL."""
