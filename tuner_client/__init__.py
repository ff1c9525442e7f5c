"""tuner_client package."""
