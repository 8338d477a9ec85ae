"""trainadmit: turn training intent into concrete pod configuration at admission time.

The package is split so that the decision is pure (``engine`` and everything it calls take
dicts and a policy set and return data) while transport (``server``), cluster access
(``cluster``) and the command line (``cli``) are thin layers around it.
"""

__version__ = "0.1.0"
