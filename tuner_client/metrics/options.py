"""``--metrics-host`` / ``--metrics-port``, the tuner's metrics options, apart from the metrics
themselves (prometheus_client, the BME maths) so that ``harmony tune --help`` loads neither."""

from __future__ import annotations

import argparse
import os

#: the tuner's metrics port unless told otherwise (the server's API is on 1979)
DEFAULT_METRICS_PORT = 9188


def add_metrics_arguments(parser: argparse.ArgumentParser) -> None:
    """``--metrics-host`` / ``--metrics-port`` for ``harmony tune`` (env ``HARMONY_METRICS_*``)."""
    port = os.environ.get("HARMONY_METRICS_PORT")
    parser.add_argument("--metrics-port", type=int, default=int(port) if port else None,
                        help="serve the tuner's Prometheus metrics on this port (0: any free "
                             f"port; default: not served; env HARMONY_METRICS_PORT; "
                             f"{DEFAULT_METRICS_PORT} in docker-compose)")
    parser.add_argument("--metrics-host", default=os.environ.get("HARMONY_METRICS_HOST",
                                                                 "127.0.0.1"),
                        help="address for --metrics-port (default 127.0.0.1; env "
                             "HARMONY_METRICS_HOST)")
