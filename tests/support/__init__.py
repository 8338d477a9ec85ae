"""What the tests share, as plain importable modules (``from support.paths import FIXTURES``): tests/ is on
``sys.path`` (pyproject's ``pythonpath``), so a test, a helper, a benchmark and a nested pytest import them
the same way. Builders two test modules use live here too: a test module never imports another (tests/ alone is on
``pythonpath``). Fixtures live in conftest.py files; no module imports a conftest (there are several, and
``import conftest`` finds whichever was loaded last)."""
