"""`python -m trainadmit.cli …` runs the command line (the tests start the server this way)."""

from .main import console

console()
