"""The project's error hierarchy: one root, a few meaningful subclasses.

Messages say what must hold, what was given, and what to do.
"""


class HarmonyError(Exception):
    """Root of every error this project raises on purpose."""


class ConfigError(HarmonyError):
    """A session definition, parameter, constraint or CLI input is invalid."""


class SessionNotFoundError(HarmonyError):
    """A session name or id does not exist."""


class TrialError(HarmonyError):
    """A report names an unknown trial or is otherwise not acceptable."""


class KnobApplyError(HarmonyError):
    """A PostgreSQL knob could not be applied, verified, or was overridden."""


class ConstraintError(HarmonyError):
    """A constraint is malformed, not affine, or its feasible set is empty."""


class ProtocolError(HarmonyError):
    """A request or response does not follow the client/server protocol."""


class WorkloadError(HarmonyError):
    """A workload definition is invalid or the workload could not run."""


class GuardrailTrip(WorkloadError):
    """Live mode: a configuration made the observed traffic worse than a guardrail allows; the
    last good configuration has to be restored at once and the point scored as failed."""

    def __init__(self, reason: str, *, kind: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.kind = kind  # latency | errors | memory


class DatabaseError(HarmonyError):
    """The PostgreSQL server is unreachable or refused an operation."""


class ConflictError(HarmonyError):
    """The request is well formed but clashes with the session's state (HTTP 409)."""


class LeaseLostError(ConflictError):
    """The caller does not hold the trial's lease: it expired, the trial was reported, or the
    trial was handed to another client (never named on the wire; ``holder`` is kept for
    callers that set it themselves)."""

    def __init__(self, message: str, *, holder: str | None = None) -> None:
        super().__init__(message)
        self.holder = holder


class ClientNotFoundError(HarmonyError):
    """A client id that never joined the session (e.g. it asks to leave)."""


class ClientExistsError(ConflictError):
    """A join under a client id that has already joined, without that client's secret."""

    kind = "client_exists"


class ForbiddenError(HarmonyError):
    """A session command for a client that did not prove it is that client: its secret is
    missing or wrong (HTTP 403)."""

    kind = "forbidden"


class ReportRejectedError(ConflictError):
    """A report the server did not record and that is not a retry of the recorded one (the
    trial was already reported with another outcome)."""


class SessionExistsError(ConflictError):
    """A session of that name already exists with another definition."""

    kind = "session_exists"


class UnavailableError(HarmonyError):
    """The server cannot serve the request now (store down, shutting down, session broken)."""

    kind = "unavailable"


class UnsupportedMediaError(ProtocolError):
    """The request body is in a media type the API does not read (HTTP 415)."""

    kind = "unsupported_media_type"


class SessionBrokenError(HarmonyError):
    """The session's command log could not be replayed; it is kept but not served (HTTP 500)."""

    kind = "session_broken"


class ReplayMismatchError(HarmonyError):
    """Replaying the command log did not reproduce what was logged (non-deterministic code)."""


class StoreError(HarmonyError):
    """The durable store could not be opened, read or written."""


class ServerUnavailableError(HarmonyError):
    """The server could not be reached (or kept answering 503) within the retry budget."""
