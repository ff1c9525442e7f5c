"""Evidence: a long schemathesis run against a server process, counted, not asserted.

    python -m benchmarks.api_fuzz [--requests 20000] [--tag T]

Draws requests for every operation of the server's own ``/openapi.json`` (positive and
negative bodies; half of the path parameters fixed to a live session, so joins, fetches,
reports, heartbeats, pauses and restarts reach a real one), round-robin in seeded batches
until ``--requests`` generated requests were sent. Fetch, report, heartbeat and leave of the
live session go as a joined client with its secret for three client ids in four (the fourth
without: a 4xx is due). Every answer is checked against the document (status code, media
type, body schema, a 4xx for a negative body, a 401/403 when the client secret is dropped or
wrong); failures are counted with their first examples. Every 200 requests, and at the end,
the live session must be consistent and the server must have logged no internal error.
Writes ``benchmarks/results/api_fuzz[.T].json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import collections
import json
import socket
import sys
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any

import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.specs.openapi.checks import positive_data_acceptance

from benchmarks.server_proc import ServerChild, machine
from harmony_base.tokens import CLIENT_SECRET_HEADER

RESULTS = Path(__file__).resolve().parent / "results"
LIVE = "fuzz"
#: rules past the JSON schema (a feasible definition, a point in the space): a documented 400
SEMANTIC_400 = {"POST /sessions", "POST /sessions/{name}/restart"}
CLIENT_COMMANDS = {"fetch", "report", "heartbeat", "leave"}
BATCH = 25


class Run:
    """The counters of one run and the plain requests it makes beside the generated ones."""

    def __init__(self, server: ServerChild) -> None:
        self.server = server
        self.http = requests.Session()
        self.sent = 0
        self.by_operation: collections.Counter[str] = collections.Counter()
        self.statuses: collections.Counter[int] = collections.Counter()
        self.server_errors: list[str] = []
        self.violations: collections.Counter[str] = collections.Counter()
        self.examples: list[str] = []
        self.insane: list[str] = []
        self.secrets: dict[str, str] = {}

    def call(self, method: str, path: str, body: Any = None,
             headers: dict[str, str] | None = None) -> tuple[int, Any]:
        r = self.http.request(method, self.server.url + path, json=body, headers=headers,
                              timeout=30)
        return r.status_code, (r.json() if r.content else None)

    def ensure_live(self) -> None:
        if self.call("GET", f"/sessions/{LIVE}")[0] == 404:
            self.secrets.clear()
            self.call("POST", "/sessions", {"definition": {
                "name": LIVE, "lease_seconds": 300.0, "strategy": "random", "seed": 0,
                "parameters": [{"name": f"x{i}", "type": "int", "min": -20, "max": 20}
                               for i in range(2)]}})

    def prove_client(self, case: Any) -> None:
        """A live-session command as a joined client with its secret (3 ids in 4)."""
        body = case.body
        client = body.get("client") if isinstance(body, dict) else None
        if case.operation.path.rpartition("/")[2] not in CLIENT_COMMANDS \
                or (case.path_parameters or {}).get("name") != LIVE \
                or not isinstance(client, str) \
                or zlib.crc32(client.encode("utf-8", "surrogatepass")) % 4 == 0:
            return
        if client not in self.secrets:
            status, answer = self.call("POST", f"/sessions/{LIVE}/join", {"client": client})
            if status == 200 and isinstance(answer, dict) and "secret" in answer:
                self.secrets[client] = answer["secret"]
        if client in self.secrets:
            case.headers = {**(case.headers or {}), CLIENT_SECRET_HEADER: self.secrets[client]}
            case._has_explicit_auth = True  # schemathesis probes it without and with a wrong one

    def check_sane(self) -> None:
        """The live session's table and counters agree; no internal error was logged."""
        if self.server.internal_errors():
            self.insane.append(f"after {self.sent} requests: internal errors logged")
        status, described = self.call("GET", f"/sessions/{LIVE}")
        if status != 200:
            return
        trials = self.call("GET", f"/sessions/{LIVE}/trials")[1]["trials"]
        counts = described["counts"]
        problems = [f"{kind}: {counts[kind]} counted, {n} in the table" for kind in
                    ("leased", "done", "failed", "released")
                    if counts[kind] != (n := sum(t["status"] == kind for t in trials))]
        if described["leases"] != counts["leased"] or described["trials"] != len(trials):
            problems.append(f"leases {described['leases']} / trials {described['trials']}")
        broken = [s for s in self.call("GET", "/sessions")[1]["sessions"]
                  if s.get("status") == "broken"]
        self.insane += [f"after {self.sent} requests: {p}" for p in problems + broken]

    def one_case(self, case: Any, excluded: list[Any]) -> None:
        if case.operation.method.upper() == "DELETE" or self.sent == 0:
            self.ensure_live()  # the previous case may have deleted it
        self.prove_client(case)
        response = case.call(session=self.http, timeout=30)
        if case.operation.method.upper() == "DELETE":
            self.ensure_live()
        self.sent += 1
        self.by_operation[case.operation.label] += 1
        self.statuses[response.status_code] += 1
        if response.status_code >= 500:
            self.server_errors.append(f"{response.status_code} {case.as_curl_command()[:300]}")
        try:
            case.validate_response(response, excluded_checks=excluded)
        except Exception as exc:  # a schemathesis failure (group): counted, first ones kept
            self.violations[case.operation.label] += 1
            if len(self.examples) < 10:
                self.examples.append(f"{case.operation.label}: {str(exc)[:600]}")
        if self.sent % 200 == 0:
            self.check_sane()


def _strategy(operation: Any) -> st.SearchStrategy[Any]:
    modes = [GenerationMode.POSITIVE, GenerationMode.NEGATIVE]
    strategies = [operation.as_strategy(mode) for mode in modes]
    if "{name}" in operation.path:
        strategies += [operation.as_strategy(mode, path_parameters={"name": LIVE})
                       for mode in modes]
    return st.one_of(strategies)


def _runner(run: Run, label: str) -> Any:
    excluded = [positive_data_acceptance] if label in SEMANTIC_400 else []

    def one(case: Any) -> None:
        run.one_case(case, excluded)

    return one


def fuzz(run: Run, target: int, until: float, save: Any) -> None:
    """Round-robin over the operations, one seeded batch each, until ``target`` requests or
    the ``until`` deadline; ``save`` writes the result so far after every round."""
    schema = schemathesis.openapi.from_url(f"{run.server.url}/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]  # type: ignore[union-attr]
    strategies = {op.label: _strategy(op) for op in operations}
    batch = 0
    while run.sent < target and time.monotonic() < until:
        for op in operations:
            test = seed(batch)(settings(max_examples=BATCH, deadline=None, database=None,
                                        phases=[Phase.explicit, Phase.generate],
                                        suppress_health_check=list(HealthCheck))(
                given(case=strategies[op.label])(_runner(run, op.label))))
            test()
        batch += 1
        print(f"  {run.sent} requests, {sum(run.violations.values())} violations, "
              f"{len(run.server_errors)} 5xx", flush=True)
        save()


def _markdown(result: dict[str, Any]) -> str:
    rows = "\n".join(f"| `{label}` | {n} |" for label, n in sorted(
        result["requests_by_operation"].items()))
    return (f"# Schemathesis against the server\n\n`{result['command']}`\n\n"
            f"Machine: {result['machine']['cpu']}, {result['machine']['cores']} cores; at the "
            f"start `{result['machine']['uptime']}`, at the end `{result['uptime_end']}`.\n\n"
            f"**{result['requests']} generated requests in {result['seconds']:.0f} s: "
            f"{result['server_errors_5xx']} answers 5xx, {result['schema_violations']} "
            f"answers not as the OpenAPI document says, {len(result['insane'])} consistency "
            f"problems**, {result['internal_errors_logged']:g} internal errors logged by the "
            f"server. Statuses: {result['statuses']}.\n\n| operation | requests |\n|---|---|\n"
            f"{rows}\n" + ("\nFirst violations:\n\n" + "\n".join(
                f"- {e}" for e in result["violation_examples"]) if result["violation_examples"]
                else ""))


def _result(run: Run, argv: list[str], facts: dict[str, Any], started: float,
            internal: float) -> dict[str, Any]:
    return {
        "command": " ".join(["python -m benchmarks.api_fuzz", *argv]),
        "machine": facts, "uptime_end": machine()["uptime"],
        "seconds": time.monotonic() - started, "requests": run.sent,
        "requests_by_operation": dict(run.by_operation),
        "statuses": dict(sorted(run.statuses.items())),
        "server_errors_5xx": len(run.server_errors),
        "server_error_examples": run.server_errors[:10],
        "schema_violations": sum(run.violations.values()),
        "violations_by_operation": dict(run.violations),
        "violation_examples": run.examples, "insane": run.insane,
        "internal_errors_logged": internal}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--max-seconds", type=float, default=4 * 3600.0)
    parser.add_argument("--tag", default="")
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    facts = machine()
    started = time.monotonic()
    suffix = f".{args.tag}" if args.tag else ""
    RESULTS.mkdir(exist_ok=True)

    def save(final: bool = False) -> None:
        result = _result(run, argv, facts, started, server.internal_errors())
        result["finished"] = final
        (RESULTS / f"api_fuzz{suffix}.json").write_text(json.dumps(result, indent=1) + "\n")
        (RESULTS / f"api_fuzz{suffix}.md").write_text(_markdown(result))
        if final:
            print(_markdown(result))

    with tempfile.TemporaryDirectory() as state:
        server = ServerChild(Path(state), port=_free_port())
        server.start()
        try:
            run = Run(server)
            fuzz(run, args.requests, started + args.max_seconds, save)
            run.check_sane()
            save(final=True)
        finally:
            server.stop()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


if __name__ == "__main__":
    main()
