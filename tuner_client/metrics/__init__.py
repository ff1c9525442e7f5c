"""The tuner's own Prometheus metrics: the exporter, the series and their labels, the command
line's options."""
