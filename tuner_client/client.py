"""The client API's documented import path (a re-export of tuner_client.api.client):
``from tuner_client.client import connect``."""

from tuner_client.api.client import (
    Backend,
    Fetched,
    HarmonyClient,
    HttpBackend,
    LeaseKeeper,
    LeaseLostError,
    ReportRejectedError,
    ServerUnavailableError,
    Session,
    connect,
    host_metadata,
)

__all__ = ["Backend", "Fetched", "HarmonyClient", "HttpBackend", "LeaseKeeper", "LeaseLostError",
           "ReportRejectedError", "ServerUnavailableError", "Session", "connect",
           "host_metadata"]
