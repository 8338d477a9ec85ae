"""The placement gate's metrics, written by the ungater in the elected replica's controllers' process.

Label values come from closed sets: ``release`` is "placed" (a new gang released into the domain chosen for it) or
"joined" (Pods released into the domain their gang already has: a replacement, or a release a new leader finished);
``reason`` is "no-domain" (every Pod of the gang exists and no domain has room) or "incomplete" (Pods still to come).
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

RELEASED = Counter("trainadmit_placement_gangs_released", "Gangs whose placement gate was lifted, by how",
                   ("release",))
WAITING = Gauge("trainadmit_placement_gangs_waiting", "Gangs held by the placement gate now, by reason", ("reason",),
                multiprocess_mode="mostrecent")
LONGEST = Gauge("trainadmit_placement_longest_wait_seconds",
                "Age of the oldest gang the placement gate holds now (0: none)", multiprocess_mode="mostrecent")
WAIT = Histogram("trainadmit_placement_wait_seconds",
                 "Time from a gang's first Pod to its release into a domain",
                 buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 14400))
