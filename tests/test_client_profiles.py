"""Client profiles against the real registry: connections per trace client, idle timeouts, user agents.

What a connection is, is read where it counts: the registry's own access log names each request's
remote ``host:port``, and a new connection gets a new port (tests/registry_log.py).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from drtp.config import load_config
from drtp.errors import ConfigError
from drtp.registry.client_pools import ClientPools
from drtp.registry.transport import Connection
from drtp.replay.client_profiles import PROFILES, client_model, header_safe
from drtp.replay.messages import ClientModel, ReplayRequest, RunSpec
from drtp.trace.reader import TraceReader
from drtp.trace.records import AgentRecord, TraceRecord
from tests.conftest import ibm_record, registry_log_line, write_json
from tests.registry_log import connections, log_entries, user_agents

AGENT = "containerd/1.6.20"


def _pools(registry, keep: int, idle_timeout: float = 0.0, **kw) -> ClientPools[Connection]:
    return ClientPools(keep, idle_timeout, lambda server: Connection(server[0], server[1], 10.0), **kw)


def _get(conn: Connection, path: str = "/v2/") -> None:
    assert conn.request("GET", path).status in (200, 404)


def test_a_client_keeps_at_most_its_profiles_idle_connections(registry):
    """Three requests of one client at once: three connections; two are kept idle (containerd's 2 per host),
    the third is closed, and the client's next requests reuse the kept ones; another client opens its own."""
    server = ("http", registry.host)
    offset = registry.log_path.stat().st_size
    pools = _pools(registry, keep=2)
    busy = [pools.take("c1", server) for _ in range(3)]
    for conn in busy:
        _get(conn)
    for conn in busy:
        pools.give("c1", server, conn)
    assert pools.idle_count() == 2 and [c.open for c in busy] == [True, True, False]
    for _ in range(4):  # one at a time: the most recently used idle connection, no new one
        conn = pools.take("c1", server)
        assert conn in busy[:2]
        _get(conn)
        pools.give("c1", server, conn)
    other = pools.take("c2", server)
    assert other not in busy
    _get(other)
    pools.give("c2", server, other)
    assert pools.opened == 4
    served = connections(registry.log_path, offset)
    assert len(served) == 4 and sum(served.values()) == 3 + 4 + 1
    pools.close()
    assert not any(c.open for c in [*busy, other])


def test_an_idle_connection_is_closed_after_the_idle_timeout(registry):
    """A connection idle for the timeout is not reused (a new TCP connection, a new port at the registry), and
    an idle client's connections are closed by the next request of any client once the timeout passed."""
    server = ("http", registry.host)
    now = [100.0]
    pools = _pools(registry, keep=2, idle_timeout=30.0, clock=lambda: now[0])
    offset = registry.log_path.stat().st_size
    first = pools.take("c1", server)
    _get(first)
    pools.give("c1", server, first)
    now[0] += 29.0
    again = pools.take("c1", server)
    assert again is first  # 29 s idle: still kept
    _get(again)
    pools.give("c1", server, again)
    now[0] += 30.0
    later = pools.take("c1", server)
    assert later is not first and not first.open
    _get(later)
    pools.give("c1", server, later)
    assert len(connections(registry.log_path, offset)) == 2
    quiet = pools.take("c2", server)  # c2's connection idles while c1 goes on
    _get(quiet)
    pools.give("c2", server, quiet)
    now[0] += 31.0
    pools.give("c1", server, pools.take("c1", server))  # c1's next request: c2's expired connection is closed
    assert not quiet.open
    pools.close()


def test_the_least_recently_active_clients_lose_their_connections(registry):
    """The pools are bounded: beyond ``max_clients`` clients, the one idle longest has its connections closed."""
    server = ("http", registry.host)
    pools = _pools(registry, keep=2, max_clients=2)
    conns = {}
    for client in ("a", "b", "a", "c"):
        conn = conns[client] = pools.take(client, server)
        _get(conn)
        pools.give(client, server, conn)
    assert not conns["b"].open and conns["a"].open and conns["c"].open
    assert pools.idle_count() == 2
    pools.close()


def _replay(engine: str, registry, model: ClientModel, requests: list[ReplayRequest], threads: int) -> list:
    from drtp.client.loop_engine import LoopRun
    from drtp.client.scheduler import NodeRun

    spec = RunSpec(
        run="r",
        start_epoch=time.time(),
        threads=threads,
        timeout=10.0,
        engine=engine,
        registries=[registry.url],
        client=model,
    )
    run = LoopRun(spec) if engine == "loop" else NodeRun(spec)
    run.submit(requests)
    run.end()
    out = []
    while (item := run.results.get(timeout=30)) is not None:
        out.extend(f.result for f in (item if isinstance(item, list) else [item]))
    return out


def _manifest_reads(registry, clients: int, each: int, agents: dict[str, str] | None = None) -> list[ReplayRequest]:
    """``each`` reads of a missing manifest per trace client, client ``cN`` reading repository ``team/cN``
    (so the registry's log tells whose request each was); 404 is what the trace got too."""
    agents = agents or {}
    return [
        ReplayRequest(
            seq=i,
            trace_id=f"t{i}",
            client=f"c{i % clients}",
            method="GET",
            kind="manifest",
            op="get",
            registry=registry.host,
            repository=f"team/c{i % clients}",
            reference="v1",
            size=0,
            expected_status=404,
            user_agent=agents.get(f"c{i % clients}"),
        )
        for i in range(clients * each)
    ]


def _clients_per_connection(log_path: Path, offset: int) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for entry in log_entries(log_path, offset):
        if str(entry.get("msg", "")).startswith("response completed"):
            client = entry["http.request.uri"].split("/")[3]
            out.setdefault(entry["http.request.remoteaddr"], set()).add(client)
    return out


@pytest.mark.parametrize("engine", ["loop", "threads"])
def test_a_profile_gives_each_trace_client_its_own_connections_and_agent(registry, engine):
    """profile containerd: each trace client's requests go on connections of its own (six clients on two
    slots: six connections), with the profile's User-Agent, or the trace's own where the request carries
    one (``user_agent: trace``); profile drtp: the node's connections per slot, shared by whichever
    clients a slot serves, with drtp's agent."""
    model = ClientModel(connections=2, idle_timeout_s=30.0, user_agent=AGENT)
    traced = "docker/17.06.0-ce go/go1.8.3"
    offset = registry.log_path.stat().st_size
    reads = _manifest_reads(registry, clients=6, each=4, agents={"c2": traced})
    results = _replay(engine, registry, model, reads, threads=2)
    assert len(results) == 24 and all(r.ok for r in results), [r.error for r in results if not r.ok][:3]
    per_conn = _clients_per_connection(registry.log_path, offset)
    assert sorted(min(clients) for clients in per_conn.values()) == [f"c{i}" for i in range(6)], per_conn
    assert all(len(clients) == 1 for clients in per_conn.values()), per_conn
    agents = [(e["http.request.uri"].split("/")[3], e["http.request.useragent"]) for e in _completed(registry, offset)]
    assert {a for c, a in agents if c != "c2"} == {AGENT} and {a for c, a in agents if c == "c2"} == {traced}

    offset = registry.log_path.stat().st_size
    _replay(engine, registry, ClientModel(), _manifest_reads(registry, clients=6, each=4), threads=2)
    per_slot = _clients_per_connection(registry.log_path, offset)
    assert len(per_slot) <= 2 and all(len(clients) > 1 for clients in per_slot.values()), per_slot
    assert set(user_agents(registry.log_path, offset, settle_s=0)) == {"drtp"}


def _completed(registry, offset: int) -> list[dict]:
    return [e for e in log_entries(registry.log_path, offset) if str(e.get("msg", "")).startswith("response completed")]


def test_the_profiles_values():
    """The documented values (docs/client-profiles.md); drtp's own keeps today's connections per slot."""
    assert PROFILES["drtp"].connections == 0
    assert (PROFILES["containerd"].connections, PROFILES["containerd"].idle_timeout_s) == (2, 30.0)
    assert (PROFILES["docker"].downloads, PROFILES["docker"].uploads) == (3, 5)
    assert (PROFILES["crane"].connections, PROFILES["crane"].idle_timeout_s) == (50, 90.0)
    assert PROFILES["skopeo"].downloads == 6


def _config(tmp_path: Path, **client_info) -> Path:
    lines = "".join(f"  {k}: {json.dumps(v)}\n" for k, v in client_info.items())
    path = tmp_path / "c.yaml"
    path.write_text(f"client_info:\n{lines}")
    return path


def test_config_maps_to_the_client_model_and_refuses_a_bad_agent(tmp_path: Path):
    ci = load_config(_config(tmp_path, profile="containerd", idle_timeout=2, user_agent="trace")).client_info
    model = client_model(ci)
    assert (model.connections, model.idle_timeout_s, model.user_agent) == (2, 2.0, AGENT)
    ci = load_config(_config(tmp_path, profile="crane", user_agent="my-ci/1.0")).client_info
    assert client_model(ci).user_agent == "my-ci/1.0" and client_model(ci).connections == 50
    with pytest.raises(ConfigError, match="client_info.user_agent.*visible ASCII"):
        load_config(_config(tmp_path, user_agent="x\r\nX-Injected: 1"))
    with pytest.raises(ConfigError, match="client_info.idle_timeout.*profile drtp"):
        load_config(_config(tmp_path, idle_timeout=5))


def test_a_traces_user_agent_is_made_safe_for_a_header():
    assert header_safe("docker/1.12.1 go/go1.6.3") == "docker/1.12.1 go/go1.6.3"
    assert header_safe("evil\r\nX-Injected: 1") == "evil??X-Injected: 1"
    assert header_safe("") is None and len(header_safe("a" * 5000)) == 512


def test_the_reader_decodes_user_agents_only_when_asked(tmp_path: Path):
    """IBM JSON, JSON lines and registry logs give AgentRecords with the trace's user agent when asked;
    otherwise plain TraceRecords, which have none."""
    recs = [ibm_record(i) | {"http.request.useragent": f"docker/{i}"} for i in range(3)]
    ibm = write_json(tmp_path / "t.json", recs)
    lines = tmp_path / "t.jsonl"
    lines.write_text("".join(json.dumps(r) + "\n" for r in recs))
    log = tmp_path / "registry.log"
    log.write_text(registry_log_line(**{"http.request.useragent": "containerd/1.6.20"}) + "\n")
    for path, fmt, want in ((ibm, "ibm", "docker/0"), (lines, "jsonl", "docker/0"), (log, "registry-log", AGENT)):
        (first, *_) = list(TraceReader([path], fmt=fmt, user_agent=True))
        assert type(first) is AgentRecord and first.useragent == want
        assert first.to_ibm()["http.request.useragent"] == want
        (plain, *_) = list(TraceReader([path], fmt=fmt))
        assert type(plain) is TraceRecord and plain.useragent is None
        assert "http.request.useragent" not in plain.to_ibm()
