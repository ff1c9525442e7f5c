"""``python -m tuner_client.bme bme ...``: the BME commands without the full ``harmony`` CLI."""

import sys

from tuner_client.bme.cli import main

sys.exit(main())
