"""A client's session (on a server or standalone) as prior data, for exports and reports.

The tuner writes each session of a run with :func:`session_prior` (``finished=True``) to
``OUTPUT/sessions/NAME.xml``; ``harmony report --from-xml`` draws it. Everything is read
through the client API (``GET /sessions/{name}`` and ``/trials``), never from a store.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harmony_base.hostinfo import HostInfo, host_metadata
from harmony_base.trial import FIELD_ORDER, SessionStatus, TrialRecord
from harmony_core.priordata import PriorSession
from tuner_client.api.client import Session

__all__ = ["session_prior"]


def session_prior(session: Session, *, finished: bool = False) -> PriorSession:
    """``session`` as prior data: definition, trials and the hosts of its clients.

    ``finished``: the run that drove the session has ended (the tuner's export after its
    passes), so a session that did not converge is recorded as ``finished`` rather than
    ``running``; a converged one stays ``converged``. A session that lists no host (a
    standalone backend that keeps none) gets this process's host for the client that ran it.
    """
    described = session.status()
    rows = session.trials()
    hosts = [_host(h) for h in described.get("hosts") or []
             if isinstance(h, Mapping) and h.get("client_id")]
    if not hosts:
        facts = host_metadata()
        hosts = [HostInfo.of(session.client_id, described.get("created"), facts)]
    # the /trials answer adds lease_remaining to each record's fields
    trials = [TrialRecord.from_dict({k: r[k] for k in FIELD_ORDER if k in r},
                                    where=f"session {session.name!r}, trial {i}")
              for i, r in enumerate(rows)]
    status = SessionStatus.parse(described.get("status", "running"))
    if finished and status not in (SessionStatus.CONVERGED, SessionStatus.CLOSED):
        status = SessionStatus.FINISHED
    return PriorSession(name=str(described.get("name", session.name)),
                        definition=dict(described["definition"]),
                        created=described.get("created"), trials=trials, hosts=hosts,
                        status=status)


def _host(h: Mapping[str, Any]) -> HostInfo:
    return HostInfo.of(str(h["client_id"]), h.get("joined"), h, h.get("left"))
