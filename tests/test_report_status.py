"""The report of a finished session says so and lists its hosts: a session run to
convergence on a real in-process server and in standalone mode, one that ran out of budget,
and one every client has left."""

from __future__ import annotations

import os
import re
import socket
from pathlib import Path

from server_support import definition, running_server, sphere

from harmony_core.priordata import PriorSession
from harmony_report import shown_status, write_report
from harmony_server.priordata_store import prior_from_store
from harmony_server.store import Store, default_store_url
from tuner_client.api.client import Session, connect
from tuner_client.api.prior_export import session_prior
from tuner_client.api.priordata_remote import prior_from_server

#: evaluations Nelder-Mead may take to converge on the 2-d sphere grid (it needs ~40)
MAX_EVALS = 400


#: Nelder-Mead restarts until its budget by default; two restarts in a row that find nothing
#: better end it here (a tolerance the user sets)
CONVERGE = {"restart_patience": 2}


def run_to_convergence(session: Session) -> int:
    """Measure until the session converges; returns the number of evaluations."""
    done = 0
    while (got := session.fetch(timeout=5)) is not None:
        session.report(got.trial_id, sphere(got.point))
        done += 1
        assert done < MAX_EVALS, "the session did not converge"
    assert session.converged
    # the status says why: a tolerance met after restarts, not the budget
    reason = session.status()["convergence_reason"]
    assert "restart" in reason and "budget" not in reason, reason
    return done


def run_evals(session: Session, n: int) -> None:
    for _ in range(n):
        got = session.fetch(timeout=5)
        assert got is not None
        session.report(got.trial_id, sphere(got.point))


def report_of(prior: PriorSession, out: Path) -> tuple[str, list[list[str]]]:
    """The page's status cell and its hosts table rows (cells as text)."""
    page = write_report(prior, out).read_text()
    status = re.search(r"<tr><th>status</th><td>([^<]*)</td></tr>", page)
    assert status is not None
    hosts = page.split("<h2>Hosts</h2>", 1)[1].split("<h2>", 1)[0]
    rows = [re.findall(r"<td>([^<]*)</td>", row) for row in hosts.split("</tr>")
            if "<td>" in row]
    return status.group(1), rows


def this_host_row(rows: list[list[str]], client: str) -> list[str]:
    assert len(rows) == 1
    row = rows[0]
    assert row[0] == client and row[1] == socket.gethostname()[:255]
    assert row[2] == str(os.cpu_count()) and row[3].endswith("GiB") and row[4] and row[5]
    return row


def test_a_converged_session_on_a_server_reports_finished_with_its_host(tmp_path: Path) -> None:
    with running_server(tmp_path / "state") as server:
        with connect(server.url) as client:
            session = client.create_session(definition("conv", strategy="nelder-mead",
                                                       dims=2, seed=1, options=CONVERGE))
            evals = run_to_convergence(session)
            best = session.best()
            exported = session_prior(session, finished=True)
        served = prior_from_server(server.url, "conv")
    assert best is not None and best[1] <= 2.0  # the sphere's optimum is 0 at (0, 0)
    for prior in (served, exported):
        assert prior.status == "converged" and len(prior.trials) == evals
        assert prior.best() == best and len(prior.hosts) == 1
        assert shown_status(prior) == "finished (converged)"
    status, rows = report_of(served, tmp_path / "report-served")
    assert status == "finished (converged)"
    this_host_row(rows, client.client_id)
    # after the server has stopped, the store gives the same answer (its log replayed)
    store = Store(default_store_url(tmp_path / "state"))
    try:
        stored = prior_from_store(store, "conv")
    finally:
        store.close()
    assert stored.status == "converged" and stored.trials == served.trials
    status, rows = report_of(stored, tmp_path / "report-store")
    assert status == "finished (converged)"
    this_host_row(rows, client.client_id)


def test_a_converged_standalone_session_reports_finished_with_this_host(tmp_path: Path) -> None:
    with connect(None) as client:
        session = client.create_session(definition("conv", strategy="nelder-mead", dims=2,
                                                   options=CONVERGE, seed=1))
        evals = run_to_convergence(session)
        prior = session_prior(session, finished=True)
        best = session.best()
    assert evals >= 10 and len(prior.trials) == evals and prior.best() == best
    assert best is not None and best[1] <= 2.0
    status, rows = report_of(prior, tmp_path / "report")
    assert status == "finished (converged)"
    this_host_row(rows, client.client_id)


def test_a_run_that_ended_on_its_budget_or_whose_clients_left_is_finished(
        tmp_path: Path) -> None:
    with connect(None) as client:
        session = client.create_session(definition("budget", dims=2, seed=2))
        run_evals(session, 6)
        during = session_prior(session)
        after = session_prior(session, finished=True)
    assert (during.status, after.status) == ("running", "finished")
    assert len(after.completed()) == 6
    assert report_of(during, tmp_path / "during")[0] == "running"
    status, rows = report_of(after, tmp_path / "after")
    assert status == "finished"
    this_host_row(rows, client.client_id)

    with running_server(tmp_path / "state") as server:
        with connect(server.url) as client:
            session = client.create_session(definition("left", dims=2, seed=2))
            run_evals(session, 4)
            assert report_of(prior_from_server(server.url, "left"),
                             tmp_path / "running")[0] == "running"
            session.leave()
        prior = prior_from_server(server.url, "left")
    assert prior.status == "running" and len(prior.completed()) == 4
    assert prior.hosts[0].left is not None
    status, rows = report_of(prior, tmp_path / "left")
    assert status == "finished (every client left)"
    assert this_host_row(rows, client.client_id)[0] == client.client_id
