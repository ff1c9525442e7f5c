"""Prior data: export to XML, CSV and a text log and back, exactly; the store and server as
sources; the import command; and warm starts from the best prior points."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from server_support import Raw, running_server

from harmony.cli import priordata as priordata_cli
from harmony_base.errors import ConfigError
from harmony_core.definition import SessionDefinition
from harmony_core.priordata import (
    HostInfo,
    PriorSession,
    TrialRecord,
    detect_format,
    dumps,
    from_csv,
    from_text,
    from_xml,
    load,
    loads,
    prior_from_core,
)
from harmony_core.session import SessionCore
from harmony_core.warmstart import (
    apply_warm_start,
    check_compatible,
    select_compatible,
    warm_start_options,
    warm_start_simplex,
)
from harmony_server.priordata_store import (
    import_into_store,
    list_store_sessions,
    prior_from_store,
    priors_from_store,
)
from harmony_server.store import Store, default_store_url
from tuner_client.api.priordata_remote import prior_from_server

HOST = {"cpu_count": 2, "ram_bytes": 24 * 1024**3}


def space_dicts() -> list[dict[str, Any]]:
    return [
        {"name": "work_mem", "type": "int", "min": 1024, "max": 204800, "step": 1024,
         "unit": "kB"},
        {"name": "random_page_cost", "type": "real", "min": 0.1, "max": 30.0, "step": 0.1},
        {"name": "seq_scale", "type": "real", "min": 0.001, "max": 1.0, "log": True},
        {"name": "jit", "type": "enum", "values": ["off", "on", 3, True]},
    ]


def make_definition(name: str = "prior", *, strategy: str = "nelder-mead",
                    options: dict[str, Any] | None = None, goal: str = "maximize",
                    metadata: dict[str, Any] | None = None,
                    params: list[dict[str, Any]] | None = None) -> SessionDefinition:
    return SessionDefinition.from_dict({
        "name": name, "parameters": params or space_dicts(),
        "strategy": {"name": strategy, "options": options or {}},
        "objective": {"name": "qpm", "goal": goal}, "seed": 3,
        "metadata": metadata or {"workload": "4Q6,4Q9,4Q13", "note": "a \"quoted\"\nline"}})


def throughput(point: dict[str, Any]) -> float:
    """A synthetic objective with its optimum at work_mem 64MB, random_page_cost 2."""
    return (3000.0 - 1e-6 * (point["work_mem"] - 65536) ** 2
            - 20.0 * (point["random_page_cost"] - 2.0) ** 2
            + 100.0 * math.log10(point["seq_scale"]) + (50.0 if point["jit"] == "off" else 0.0)
            + 0.1 + 0.2)  # not representable exactly: the round trip must keep every bit


def run_session(definition: SessionDefinition, evaluations: int,
                objective: Callable[[dict[str, Any]], float] = throughput,
                clients: tuple[str, ...] = ("tuner-1", "host,\"2\"\tü\nx")) -> SessionCore:
    core = SessionCore(definition)
    for c in clients:
        core.join(c)
    for i in range(evaluations):
        client = clients[i % len(clients)]
        got = core.fetch(client)
        if got is None:
            break
        if i % 7 == 3:
            core.report(got.trial_id, failure=f"apply failed: <bad> & \"quoted\",\nline {i}",
                        client=client)
        else:
            core.report(got.trial_id, objective(got.point), client=client)
    return core


@pytest.fixture(scope="module")
def prior() -> PriorSession:
    core = run_session(make_definition(), 40)
    hosts = [HostInfo("tuner-1", 1700000000.125, "db-host", 2, 24 * 1024**3, "Linux-6.1",
                      "3.11.2", None),
             HostInfo("host,\"2\"\tü\nx", 1700000001.5, None, None, None, None, None,
                      1700000100.0)]
    p = prior_from_core(core, created=1700000000.0 + 1 / 3, hosts=hosts)
    # times as a server would record them
    p.trials = [TrialRecord(t.id, t.candidate, t.point, t.client, t.status, t.value, t.failure,
                           1700000002.0 + t.id / 7, 1700000003.0 + t.id / 3) for t in p.trials]
    return p


# -- round trips -----------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", ["xml", "csv", "text"])
def test_export_import_round_trips_exactly(prior: PriorSession, fmt: str, tmp_path: Path
                                           ) -> None:
    assert len(prior.trials) == 40 and sum(t.failure is not None for t in prior.trials) == 6
    text = dumps(prior, fmt)
    assert detect_format(text) == fmt
    back = loads(text, fmt)
    assert back == prior
    # bit-exact floats and exact value types (int stays int, True stays True, 3 stays 3)
    for a, b in zip(back.trials, prior.trials, strict=True):
        assert a.value is None or a.value.hex() == b.value.hex()  # type: ignore[union-attr]
        assert [type(v) for v in a.point.values()] == [type(v) for v in b.point.values()]
    # through a file, format detected from the content
    path = tmp_path / f"s.{fmt}"
    path.write_text(text, encoding="utf-8")
    assert load(path) == prior


def test_xml_has_metadata_and_raw_data(prior: PriorSession) -> None:
    import xml.etree.ElementTree as ET

    root = ET.fromstring(dumps(prior, "xml"))
    meta = root.find("metadata")
    assert meta is not None
    assert [p.get("name") for p in meta.iterfind("parameters/parameter")] == \
        ["work_mem", "random_page_cost", "seq_scale", "jit"]
    work_mem = meta.find("parameters/parameter[@name='work_mem']")
    assert work_mem is not None and (work_mem.get("min"), work_mem.get("max")) == ("1024",
                                                                                 "204800")
    assert [h.get("hostname") for h in meta.iterfind("hosts/host")] == ["db-host", None]
    assert meta.find("started").get("time") == repr(prior.created)  # type: ignore[union-attr]
    trials = root.findall("data/trial")
    assert len(trials) == 40
    first = trials[0]
    assert first.get("client") == "tuner-1" and first.find("point/param") is not None
    assert float(first.find("performance").get("value")) == prior.trials[0].value  # type: ignore[union-attr]


def test_csv_is_one_row_per_trial_with_a_column_per_parameter(prior: PriorSession) -> None:
    import csv
    import io

    text = dumps(prior, "csv")
    body = "".join(line for line in text.splitlines(keepends=True) if not line.startswith("#"))
    rows = list(csv.DictReader(io.StringIO(body)))
    assert len(rows) == 40
    assert set(rows[0]) >= {"trial", "value", "client", "reported_at", "work_mem", "jit"}
    assert int(rows[0]["work_mem"]) == prior.trials[0].point["work_mem"]


@pytest.mark.parametrize(("reader", "text", "message"), [
    (from_xml, "<harmony-session format='1'><metadata>", "malformed XML"),
    (from_xml, "<other/>", "root element must be <harmony-session>"),
    (from_xml, "<harmony-session format='9'/>", "format '9' is not supported"),
    (from_text, "hello", "not a harmony prior-data log"),
    (from_text, "# harmony prior data, format 1\n# session: \"s\"\n", "['definition']"),
    (from_csv, "# harmony prior data, format 1\ntrial,value\n", "'# definition:' line"),
])
def test_bad_files_are_clear_errors(reader: Any, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("(", r"\(")):
        reader(text, source="f")


def test_bad_csv_row_names_the_line(prior: PriorSession) -> None:
    lines = dumps(prior, "csv").splitlines()
    header_at = next(i for i, line in enumerate(lines) if line.startswith("trial,"))
    cells = lines[header_at + 1].split(",")
    cells[0] = "not-a-number"
    lines[header_at + 1] = ",".join(cells)
    with pytest.raises(ConfigError, match=rf"f, line {header_at + 2}:"):
        from_csv("\n".join(lines) + "\n", source="f")


# -- the store, the server, and the CLI ----------------------------------------------------------
def test_server_store_export_and_import(tmp_path: Path) -> None:
    state = tmp_path / "server"
    definition = make_definition("live").to_dict()
    with running_server(state) as server:
        http = Raw(server.url)
        assert http("POST", "/sessions", {"definition": definition})[0] == 201
        assert http("POST", "/sessions/live/join", {"client": "c1", "host": {
            "hostname": "db1", "cpu_count": 2, "ram_bytes": 24 * 1024**3, "os": "Linux"}})[0] \
            == 200
        for _ in range(8):
            got = http("POST", "/sessions/live/fetch", {"client": "c1"})[1]
            assert http("POST", "/sessions/live/report", {
                "client": "c1", "trial_id": got["trial_id"],
                "value": throughput(got["point"])})[0] == 200
        via_http = prior_from_server(server.url, "live")
    store = Store(default_store_url(state))
    try:
        stored = prior_from_store(store, "live")
    finally:
        store.close()
    assert len(stored.trials) == 8 and all(t.reported_at for t in stored.trials)
    assert stored.hosts[0].hostname == "db1" and stored.hosts[0].ram_bytes == 24 * 1024**3
    assert stored.definition == definition and stored.created is not None
    assert via_http.trials == stored.trials
    assert via_http.definition == stored.definition

    # harmony export (all formats) from the store, then harmony import into another store
    parser = argparse.ArgumentParser()
    priordata_cli.add_parser(parser.add_subparsers())
    out = tmp_path / "exported"
    args = parser.parse_args(["export", "live", "--state-dir", str(state), "--format", "all",
                              "--out", str(out)])
    assert args.func(args) == 0
    assert sorted(p.name for p in out.iterdir()) == ["live.csv", "live.log", "live.xml"]
    for f in out.iterdir():
        assert load(f) == stored
    other = tmp_path / "other"
    args = parser.parse_args(["import", str(out / "live.xml"), "--state-dir", str(other)])
    assert args.func(args) == 0
    args = parser.parse_args(["import", str(out / "live.csv"), "--state-dir", str(other),
                              "--rename", "live-copy"])
    assert args.func(args) == 0
    store = Store(default_store_url(other))
    try:
        assert list_store_sessions(store) == ["live", "live-copy"]
        assert store.live_sessions() == []  # imported sessions are never replayed
        back = prior_from_store(store, "live")
        assert (back.trials, back.hosts, back.definition, back.created) == \
            (stored.trials, stored.hosts, stored.definition, stored.created)
        assert back.status == "imported"
        copy = prior_from_store(store, "live-copy")
        assert copy.trials == stored.trials and copy.definition["name"] == "live-copy"
        assert [p.name for p in priors_from_store(store, exclude=["live"])] == ["live-copy"]
        with pytest.raises(ConfigError, match="already has a session named 'live'"):
            import_into_store(store, back)
    finally:
        store.close()


# -- warm start ------------------------------------------------------------------------------
def unit_rank(points: list[dict[str, Any]], definition: SessionDefinition) -> int:
    units = np.array([definition.space.to_unit(p) for p in points])
    return int(np.linalg.matrix_rank(units[1:] - units[0], tol=1e-9))


def test_warm_start_simplex_starts_from_the_prior_best(prior: PriorSession) -> None:
    new = make_definition("next")
    best_point, best_value = prior.best()  # type: ignore[misc]
    assert best_value == max(t.value for t in prior.completed())  # type: ignore[type-var]
    simplex = warm_start_simplex([prior], new, host=HOST)
    assert len(simplex) == 5  # 4 movable parameters + 1
    assert simplex[0] == best_point
    assert unit_rank(simplex, new) == 4  # full-dimensional
    assert all(new.space.contains(p) for p in simplex)
    # PRO with a bigger simplex: k points, still starting from the best
    pro = make_definition("next-pro", strategy="pro", options={"simplex_size": 8})
    simplex = warm_start_simplex([prior], pro, host=HOST)
    assert len(simplex) == 8 and simplex[0] == best_point
    assert len({tuple(p.values()) for p in simplex}) == 8


def test_a_warm_started_session_first_measures_the_prior_best(prior: PriorSession) -> None:
    new = apply_warm_start(make_definition("warm"), [prior], host=HOST)
    assert new.metadata["warm_start"]["sessions"] == ["prior"]
    options = warm_start_options([prior], make_definition("warm"), host=HOST)
    assert set(options) <= {"init_simplex", "init_point"} and options
    core = SessionCore(new)
    core.join("c")
    first_simplex = []
    for _ in range(5):  # the initial simplex: 4 movable parameters + 1 vertices
        got = core.fetch("c")
        assert got is not None
        first_simplex.append(got.point)
        core.report(got.trial_id, throughput(got.point))
    assert first_simplex[0] == prior.best()[0]  # type: ignore[index]
    # and the warm-started run beats the cold start over the same small budget
    cold = run_session(make_definition("cold"), 12, clients=("c",))
    warm = SessionCore(new)
    warm.join("c")
    for _ in range(12):
        got = warm.fetch("c")
        assert got is not None
        warm.report(got.trial_id, throughput(got.point))
    assert warm.best()[1] >= prior.best()[1] > cold.best()[1]  # type: ignore[index]


def test_matching_rule(prior: PriorSession) -> None:
    same = make_definition("n")
    assert check_compatible(prior, same, HOST).host_match is True
    # RAM within 25 % counts as similar, beyond it does not; the CPU count must match
    assert check_compatible(prior, same, {"cpu_count": 2, "ram_bytes": 20 * 1024**3}).compatible
    far = check_compatible(prior, same, {"cpu_count": 2, "ram_bytes": 16 * 1024**3})
    assert (far.compatible, far.host_match) == (False, False)
    assert not check_compatible(prior, same, {"cpu_count": 8, "ram_bytes": HOST["ram_bytes"]}
                                ).compatible
    # no host facts on the new side: compatible with an unknown host match
    unknown = check_compatible(prior, same, {"hostname": "x"})
    assert (unknown.compatible, unknown.host_match) == (True, None)
    # parameters, objective and workload must agree
    fewer = make_definition("n", params=space_dicts()[:3])
    assert "different parameters" in check_compatible(prior, fewer, HOST).reason
    assert "different objective" in check_compatible(prior, make_definition(
        "n", goal="minimize"), HOST).reason
    assert "different workload" in check_compatible(prior, make_definition(
        "n", metadata={"workload": "3Q1"}), HOST).reason
    assert check_compatible(prior, make_definition("n", metadata={}), HOST).compatible
    # wider ranges are fine: same names
    wider = make_definition("n", params=[{**space_dicts()[0], "max": 409600}, *space_dicts()[1:]])
    assert check_compatible(prior, wider, HOST).compatible


def test_host_matched_sessions_win_over_unknown_hosts(prior: PriorSession) -> None:
    anonymous = PriorSession("anon", {**prior.definition, "name": "anon"}, None,
                             [TrialRecord(0, 0, {"work_mem": 65536, "random_page_cost": 2.0,
                                                "seq_scale": 1.0, "jit": "off"}, None, "done",
                                         1e9, None)])
    other_host = PriorSession("other", {**prior.definition, "name": "other"}, None,
                              anonymous.trials, [HostInfo("h", cpu_count=64, ram_bytes=1 << 40)])
    new = make_definition("n")
    assert [p.name for p in select_compatible([anonymous, other_host, prior], new, HOST)] == \
        ["prior"]
    # with no host-matched session, the unknown-host one is used (never the other host's)
    assert [p.name for p in select_compatible([anonymous, other_host], new, HOST)] == ["anon"]
    assert warm_start_simplex([anonymous, other_host], new, host=HOST)[0] == \
        anonymous.trials[0].point
    # points outside the new ranges are not used
    narrow = make_definition("n", params=[{**space_dicts()[0], "max": 32768},
                                          *space_dicts()[1:]])
    assert warm_start_simplex([anonymous], narrow, host=HOST) == []
    assert apply_warm_start(narrow, [anonymous], host=HOST) is narrow
