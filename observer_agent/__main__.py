"""``python -m observer_agent``: same as the ``observer-agent`` console script."""

import sys

from observer_agent.cli import main

sys.exit(main())
