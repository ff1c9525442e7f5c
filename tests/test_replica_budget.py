"""A replica on another host counts every client's trials against the session's budget (an
in-process server on a free port): it claims only what is left, claims again when a trial is
given back, and the coordinator puts the budget where the replica reads it."""

from __future__ import annotations

from pathlib import Path

from server_support import definition, running_server, sphere

from tuner_client.api.client import connect
from tuner_client.phases.session_loop import Shared, claimed_by_others


def test_a_remote_replica_claims_only_what_the_budget_leaves(tmp_path: Path) -> None:
    with running_server(tmp_path) as server, connect(server.url, client_id="coord") as coord, \
            connect(server.url, client_id="far") as far_client:
        session = coord.create_session(definition("budget", strategy="random", seed=3))
        # the coordinator: 3 trials reported, 1 failed, 1 still measuring
        for _ in range(3):
            got = session.fetch(timeout=1)
            assert got is not None
            session.report(got.trial_id, sphere(got.point))
        failed = session.fetch(timeout=1)
        assert failed is not None
        session.report_failure(failed.trial_id, "infeasible")
        assert session.fetch(timeout=1) is not None

        far = far_client.join("budget")
        shared = Shared(evaluations=6, others=lambda: claimed_by_others(far, {far.client_id}))
        assert claimed_by_others(far, {far.client_id}) == 5
        assert shared.claim() is None  # the sixth
        got = far.fetch(timeout=1)
        assert got is not None
        far.report(got.trial_id, sphere(got.point))
        # five of the coordinator's and one of its own: nothing left to claim
        assert shared.claim() == "budget"
        assert shared.claimed == 1
        # the coordinator's trial in flight goes back (its database stopped answering): it
        # is claimable again
        session.leave()
        assert claimed_by_others(far, {far.client_id}) == 4
        assert shared.claim() is None and shared.claimed == 2
        assert shared.claim() == "budget"
