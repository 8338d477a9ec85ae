"""Validation rules: each module checks one family and reports every violation it finds.

Rules read the object in the state the apiserver would store (the mutated object for `check` and
`/mutate`, the received object for `/validate`) through a Workload view, plus the resolved intent.
"""
