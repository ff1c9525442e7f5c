"""The BME probes on a live server: a few cheap restarts across shared_buffers, each measured
once the server settles."""
