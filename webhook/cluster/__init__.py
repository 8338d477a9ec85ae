"""Cluster access: the snapshot and live cluster views, kube config, the Lease, the PodGroup reconciler.

Everything here does I/O (files, the Kubernetes API) and implements or feeds what the pure engine
asks through ``engine.clusterview.ClusterView``."""
