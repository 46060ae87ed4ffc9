"""The bulk data path of replica copies: FetchData asked for ``bulk`` names the
source's ``/replica-data`` URL and the copy GETs the file over the agent's HTTP(S) endpoint;
checksums compared as on the stream, the copy throttle holding, and the FetchData
authorisation (members, announced learners, the RS; ARCHITECTURE section 2a) holding on the
HTTPS path too."""

from __future__ import annotations

import asyncio
import contextlib
import os
import ssl
import zlib
from pathlib import Path

import aiohttp

from obcommon.clock import SystemClock
from obcommon.proto import obrpc_pb2, obrpc_pb2_grpc
from obcommon.security.certs import CA_CERT, Role, cert_file, key_file
from observer_agent.http import AgentHttp
from observer_agent.replicas.bandwidth import BURST_S, CopyBandwidth
from observer_agent.replicas.copy_http import data_path
from observer_agent.replicas.copy_stream import FAULT_PIECE, MIN_PIECE
from observer_agent.replicas.faults import FAULT_COPY_SLOW_FILE
from observer_agent.service import create_server, stop_server
from tests.support import pki
from tests.support.ports import free_port
from tests.unit.observer_agent.helpers import run, wait_until
from tests.unit.observer_agent.replicas.helpers import (
    LS,
    SIZE,
    T,
    copy_drop,
    copy_nodes,
    copy_spec,
    copy_upsert,
    fault,
    lead,
    leftovers,
    start_copy_node,
)
from tests.unit.observer_agent.test_service import in_process_agent

KIB = 1024


def test_a_copy_goes_over_the_bulk_path_and_keeps_the_checksum(tmp_path: Path) -> None:
    """The source serves HTTP: the copy's bytes come from /replica-data (the source counts
    one file served whole there), the replica is in service with the source's crc32; the
    stream answers only the header then. A source without an HTTP endpoint streams as
    before (the fallback)."""

    async def scenario() -> None:
        a = await start_copy_node(tmp_path / "a", http=True)
        c = await start_copy_node(tmp_path / "c")
        try:
            members = await lead(a)
            [header] = await a.fetch_data(bulk=True)
            assert header.data_url == f"http://127.0.0.1:{a.http.port}" + data_path(T, LS)  # type: ignore[union-attr]
            assert header.total_size == SIZE and not header.data
            resp = await c.apply(copy_upsert(copy_spec(members, a.addr, 1, copy_from=a.addr)))
            assert resp.error.code == 0, resp.error
            await wait_until(c.in_service, "the copy over the bulk path", 20)
            assert a.agent.replicas.serving.bulk_served == 1
            data = (c.rdir() / "data").read_bytes()
            assert len(data) == SIZE
            src = a.agent.replicas.get(T, LS)
            assert src is not None and zlib.crc32(data) == src.meta.data_checksum
            info = c.info()
            assert info is not None and info.data_checksum == src.meta.data_checksum
        finally:
            await c.stop()
            await a.stop()

    run(scenario(), 60)


def test_a_source_serving_other_bytes_than_announced_fails_the_copy(tmp_path: Path) -> None:
    """The checksum is compared on the bulk path as on the stream: a data file changed under
    the source after it was verified makes the copy fail (``build_error``), nothing
    installed, no temp file left."""

    async def scenario() -> None:
        async with copy_nodes(tmp_path, 2, http=True) as (a, c):
            members = await lead(a)
            path = a.rdir() / "data"
            damaged = bytearray(path.read_bytes())
            damaged[SIZE // 2] ^= 0xFF
            path.write_bytes(bytes(damaged))
            resp = await c.apply(copy_upsert(copy_spec(members, a.addr, 1, copy_from=a.addr)))
            assert resp.error.code == 0, resp.error
            await wait_until(
                lambda: bool((c.info() or obrpc_pb2.ReplicaInfo()).build_error),
                "the copy to fail its check",
            )
            info = c.info()
            assert info is not None and "checksum mismatch" in info.build_error
            assert not (c.rdir() / "data").exists()
            assert a.agent.replicas.serving.bulk_served == 1

    run(scenario(), 60)


def _open_count(path: Path) -> int:
    """How many fds of this process are open on ``path`` (the agents here are in-process)."""
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            n += os.readlink(f"/proc/self/fd/{fd}") == str(path)
    return n


def test_a_copy_dropped_during_its_bulk_body_stops_its_receiving_thread(tmp_path: Path) -> None:
    """The body is received in a worker thread: a copy dropped while it runs (here
    paused for a minute after its first piece by the slow-copy fault; 32 MiB, more than the
    sockets buffer, so the source is still sending) stops that thread at
    once and leaves no temp file; the source, which reads a piece ahead of the one it sends,
    closes the data file it served once the connection is gone."""

    async def scenario() -> None:
        a = await start_copy_node(tmp_path / "a", http=True, replica_size="32M")
        c = await start_copy_node(tmp_path / "c", replica_size="32M")
        try:
            members = await lead(a)
            served = a.rdir() / "data"
            fault(c, FAULT_COPY_SLOW_FILE, "60000")
            await c.apply(copy_upsert(copy_spec(members, a.addr, 1, copy_from=a.addr)))
            await wait_until(
                lambda: (c.info() or obrpc_pb2.ReplicaInfo()).bytes_copied >= FAULT_PIECE,
                "the bulk body under way",
            )
            assert c.agent.replicas.bulk_receiving() == 1
            # The source's data file only: its log file is opened when first used, which may
            # be now or earlier (a whole-directory comparison raced with that).
            assert _open_count(served) == 1
            resp = await c.apply(copy_drop())
            assert resp.error.code == 0, resp.error
            await wait_until(
                lambda: c.agent.replicas.bulk_receiving() == 0, "the receiving thread to end", 10
            )
            assert c.info() is None and leftovers(c) == []
            await wait_until(lambda: _open_count(served) == 0, "the source's data file closed", 10)
        finally:
            await c.stop()
            await a.stop()

    run(scenario(), 60)


def test_the_throttle_holds_on_the_bulk_path(tmp_path: Path) -> None:
    """1 MiB at 256 KiB/s over the bulk path, on a fake time that only the throttle's waits
    advance: at every wait the bytes received are at most the burst plus the rate times the
    time since the start plus one piece (the bucket is taken after each piece; under a limit
    a piece is at most the burst, at least MIN_PIECE), and the copy ends no earlier than
    (1 MiB - burst) / rate."""
    n, rate = 1 << 20, 256 * KIB
    now = [0.0]
    seen: list[tuple[float, int]] = []
    dest: list[object] = []

    async def fake_sleep(s: float) -> None:
        now[0] += s
        info = dest[0].info()  # type: ignore[attr-defined]
        seen.append((now[0], info.bytes_copied if info is not None else 0))
        await asyncio.sleep(0)

    bw = CopyBandwidth(monotonic=lambda: now[0], sleep=fake_sleep)
    bw.set_rate(rate)

    async def scenario() -> None:
        a = await start_copy_node(tmp_path / "a", http=True, replica_size="1M")
        c = await start_copy_node(tmp_path / "c", bandwidth=bw, replica_size="1M")
        dest.append(c)
        try:
            members = await lead(a)
            resp = await c.apply(copy_upsert(copy_spec(members, a.addr, 1, copy_from=a.addr)))
            assert resp.error.code == 0, resp.error
            await wait_until(c.in_service, "the throttled copy", 30)
            assert a.agent.replicas.serving.bulk_served == 1
        finally:
            await c.stop()
            await a.stop()

    run(scenario(), 60)
    assert seen, "the copy never waited for the throttle"
    for t, copied in seen:
        assert copied <= rate * BURST_S + rate * t + max(MIN_PIECE, rate * BURST_S), (t, copied)
    assert now[0] >= (n - rate * BURST_S) / rate
    assert bw.throttled_s > 0


def _client_ctx(role: Role, name: str) -> ssl.SSLContext:
    d = pki.certs_dir(role, name)
    ctx = ssl.create_default_context(cafile=str(d / CA_CERT))
    user = name if role is Role.CLIENT else ""
    ctx.load_cert_chain(d / cert_file(role, user), d / key_file(role, user))
    return ctx


def test_the_https_data_path_serves_members_and_announced_learners_only(
    tmp_path: Path,
) -> None:
    """On the bulk path: GET /replica-data answers the RS and the node certificates
    the RS announced as learners (401 without a certificate, 403 for a client certificate
    and for a node that is neither member nor learner, also once it is taken off the list),
    each refusal counted by the agent's PeerGate. The data comes whole and unchanged. And a
    destination agent over mutual TLS copies through it end to end once announced."""
    me, other = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    agent = in_process_agent(
        tmp_path / "a",
        SystemClock(),
        rpc_addr=me,
        certs_dir=pki.certs_dir(Role.NODE, me),
        replica_size=64 * 1024,
    )
    dest = in_process_agent(
        tmp_path / "c",
        SystemClock(),
        rpc_addr=other,
        certs_dir=pki.certs_dir(Role.NODE, other),
        replica_size=64 * 1024,
    )

    def spec(learners: list[str], copy_from: str = "") -> obrpc_pb2.ApplyReplicasRequest:
        return obrpc_pb2.ApplyReplicasRequest(
            rs_epoch=1,
            upsert=[
                obrpc_pb2.ReplicaSpec(
                    tenant_id=T,
                    ls_id=LS,
                    unit_id=1,
                    replica_type="FULL",
                    member_list=[me],
                    paxos_replica_number=1,
                    leader=me,
                    term=1,
                    learner_list=learners,
                    copy_from=copy_from,
                )
            ],
        )

    async def get(url: str, ctx: ssl.SSLContext) -> tuple[int, bytes]:
        async with aiohttp.ClientSession() as s, s.get(url, ssl=ctx) as r:
            return r.status, await r.read()

    async def scenario() -> None:
        server, _ = await create_server(agent, me)
        await server.start()
        agent.mark_serving()
        http = AgentHttp(agent, "127.0.0.1:0")
        port = await http.start()
        dserver, _ = await create_server(dest, other)
        await dserver.start()
        dest.mark_serving()
        url = f"https://127.0.0.1:{port}" + data_path(T, LS)
        ca = ssl.create_default_context(cafile=str(pki.root() / "ca" / CA_CERT))
        try:
            async with pki.security(Role.RS, "127.0.0.1:1").aio_channel(me) as ch:
                rs = obrpc_pb2_grpc.ObserverServiceStub(ch)
                assert not (await rs.ApplyReplicas(spec([]), timeout=10)).error.code
                data = (agent.data_dir / "replicas" / f"{T}_{LS}" / "data").read_bytes()
                assert len(data) == 64 * 1024
                # not a member, not announced: refused, and so are the anonymous and clients
                assert (await get(url, _client_ctx(Role.NODE, other)))[0] == 403
                assert agent.peer_gate.refused_total.get("not_member") == 1
                assert (await get(url, ca))[0] == 401
                assert (await get(url, _client_ctx(Role.CLIENT, "root")))[0] == 403
                assert await get(url, _client_ctx(Role.RS, "127.0.0.1:1")) == (200, data)
                # announced as a learner: served, whole
                assert not (await rs.ApplyReplicas(spec([other]), timeout=10)).error.code
                assert await get(url, _client_ctx(Role.NODE, other)) == (200, data)
                # taken off the list: refused again
                assert not (await rs.ApplyReplicas(spec([]), timeout=10)).error.code
                status, body = await get(url, _client_ctx(Role.NODE, other))
                assert status == 403 and b"needs the rs or a member" in body
                assert agent.peer_gate.refused_total.get("not_member") == 2
                # end to end: announced, the destination copies over HTTPS
                assert not (await rs.ApplyReplicas(spec([other]), timeout=10)).error.code
            async with pki.security(Role.RS, "127.0.0.1:1").aio_channel(other) as ch:
                rs = obrpc_pb2_grpc.ObserverServiceStub(ch)
                resp = await rs.ApplyReplicas(spec([], copy_from=me), timeout=10)
                assert not resp.error.code, resp.error

                def built() -> bool:
                    rep = dest.replicas.get(T, LS)
                    return rep is not None and rep.in_service

                await wait_until(built, "the copy over HTTPS", 20)
            assert agent.replicas.serving.bulk_served == 3
            assert (dest.data_dir / "replicas" / f"{T}_{LS}" / "data").read_bytes() == data
        finally:
            await http.stop()
            await stop_server(dest, dserver)
            await stop_server(agent, server)

    run(scenario(), 60)


def test_the_bulk_path_is_offered_only_at_the_rpc_host(tmp_path: Path) -> None:
    """The data URL names the agent's RPC host (the one peers reach and its certificate
    names): offered when the HTTP endpoint listens there (or on every address: not bound
    here, tests bind 127.0.0.1 only), not when it listens on another host (the default 127.0.0.1 beside a routable RPC address: a peer
    elsewhere would reach its own loopback), and withdrawn when the endpoint stops."""

    async def offered(rpc_host: str, http_host: str) -> str:
        agent = in_process_agent(
            tmp_path / f"{rpc_host}-{http_host}",
            SystemClock(),
            rpc_addr=f"{rpc_host}:2882",
            insecure=True,
        )
        http = AgentHttp(agent, f"{http_host}:0")
        port = await http.start()
        url = agent.replicas.serving.data_base_url
        await http.stop()
        assert agent.replicas.serving.data_base_url == ""
        return url.replace(str(port), "PORT")

    async def scenario() -> None:
        assert await offered("127.0.0.1", "127.0.0.1") == "http://127.0.0.1:PORT"
        assert await offered("10.0.0.1", "127.0.0.1") == ""

    run(scenario(), 30)
