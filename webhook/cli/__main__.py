"""`python -m trainadmit.cli …` runs the command line (the tests start the server this way)."""

import sys

from .main import main

sys.exit(main())
