"""The real-apiserver tier: trainadmit installed on a real kube-apiserver + etcd (and, for the outcome
tests, the real scheduler and Job controller) from ``$KUBEBUILDER_ASSETS``; skipped with one reason when it
is unset. Its fixtures (``control_plane``, ``cluster``, ``webhook``, ``outcome_cluster``) are the plugin
``support.kube_fixtures``, registered in tests/conftest.py, since tests of other areas run on the same
control plane."""
