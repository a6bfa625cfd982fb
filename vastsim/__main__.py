"""`python -m vastsim serve --port PORT --api-key KEY ...` (see `vastsim.cli`)."""

import sys

from vastsim.cli import main

sys.exit(main())
