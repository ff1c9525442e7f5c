"""``python -m harmony``: the ``harmony`` console script."""

import sys

from harmony.cli import main

sys.exit(main())
