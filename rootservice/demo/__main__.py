"""``python -m rootservice.demo``: run :func:`rootservice.demo.main`."""

import sys

from rootservice.demo import main

sys.exit(main())
