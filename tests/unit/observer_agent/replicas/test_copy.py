"""Replica migration (observer_agent.replicas.copy): replicas built by copy
(``ReplicaSpec.copy_from``) between real in-process agents over gRPC (127.0.0.1, port 0):
background copies with progress, checksum and source failures then retries, drops and
restarts during a copy, the log catch-up after it, and the copy throttle."""

from __future__ import annotations

import asyncio
import json
import shutil
import threading
import zlib
from pathlib import Path
from typing import Any, cast

import grpc
import pytest

from obcommon.clock import SystemClock
from obcommon.proto import obrpc_pb2
from observer_agent.agent import Agent
from observer_agent.replicas import copy_stream
from observer_agent.replicas.copy import log_peer
from observer_agent.replicas.copy_stream import CopyFailed, receive_data_file
from observer_agent.replicas.faults import (
    FAULT_COPY_SLOW_FILE,
    FAULT_REPLICATION_STOP_FILE,
    FAULT_SERVE_DATA_ERROR_FILE,
)
from observer_agent.replicas.log import ReplicaLog
from observer_agent.replicas.replica import Build, Replica
from observer_agent.replicas.storage import ReplicaMeta
from tests.support.ports import free_port
from tests.unit.observer_agent.helpers import run, wait_until
from tests.unit.observer_agent.replicas.helpers import (
    CHUNK,
    LS,
    SIZE,
    CopyNode,
    T,
    copy_drop,
    copy_nodes,
    copy_settings,
    copy_spec,
    copy_upsert,
    fault,
    lead,
    leftovers,
    start_copy_node,
)


def test_copy_from_a_follower_and_from_the_leader(tmp_path: Path) -> None:
    """Both copies end with the same data and a log that starts at the source's first kept
    entry, catch up and then follow the leader. The follower copied is far behind a leader
    that compacted past its end: the copy's catch-up jumps (the snapshot rule)."""

    async def scenario() -> None:
        async with copy_nodes(tmp_path, 2, log_keep=10) as (a, b):
            c = await start_copy_node(tmp_path / "c")
            d = await start_copy_node(tmp_path / "d")
            try:
                members = await lead(a, b)
                await wait_until(lambda: b.base_index() > 0, "b compacting")
                # b falls behind until the leader no longer has the entries after its end.
                fault(b, FAULT_REPLICATION_STOP_FILE)
                await asyncio.sleep(0.3)
                b_end = b.end_index()
                await wait_until(lambda: a.base_index() > b_end + 1, "a compacting past b")
                b_start = b.base_index() + 1
                # The snapshot rule: asked for what it compacted, the leader answers from its
                # first kept entry.
                r = await a.replica_stub.FetchLog(
                    obrpc_pb2.FetchLogRequest(tenant_id=T, ls_id=LS, from_index=b_end + 1, term=1),
                    timeout=5,
                )
                assert r.error.code == 0 and r.entries[0].index > b_end + 1

                copies = {c: b, d: a}
                for dst, src in copies.items():
                    resp = await dst.apply(
                        copy_upsert(copy_spec(members, a.addr, 1, copy_from=src.addr))
                    )
                    assert resp.error.code == 0, resp.error
                    [info] = resp.replicas
                    assert not info.in_service and info.copy_from == src.addr
                    assert (info.term, info.leader, list(info.member_list)) == (
                        1,
                        a.addr,
                        members,
                    )
                    assert info.build_error == ""
                await wait_until(
                    lambda: c.in_service() and d.in_service(), "both copies in service"
                )

                raw = (a.rdir() / "data").read_bytes()
                for dst in copies:
                    done = dst.info()
                    assert done is not None
                    assert (done.data_size, done.data_checksum) == (SIZE, zlib.crc32(raw))
                    assert (done.copy_from, done.bytes_copied, done.build_error) == ("", 0, "")
                    assert (dst.rdir() / "data").read_bytes() == raw
                    meta = json.loads((dst.rdir() / "meta.json").read_text())
                    assert (meta["copy_from"], meta["catch_up_to"]) == ("", 0)
                    assert (meta["data_size"], meta["data_checksum"]) == (SIZE, zlib.crc32(raw))
                    assert meta["leader"] == a.addr and meta["member_list"] == members
                    assert leftovers(dst) == []
                # c (no compaction of its own at this size) never held entries before b's
                # first kept one, and jumped past b's end to the leader's first kept entry.
                assert c.base_index() >= b_start - 1 and c.base_index() > b_end
                assert d.base_index() > 0

                # They now follow the leader like any follower, with the leader's entries.
                target = a.end_index() + 5
                await wait_until(
                    lambda: min(c.end_index(), d.end_index()) >= target, "copies following"
                )
                leader_log = {e[0]: e for e in a.entries()}
                for dst in (c, d):
                    got = [e for e in dst.entries() if e[0] in leader_log]
                    assert got and all(leader_log[e[0]] == e for e in got)
            finally:
                await c.stop()
                await d.stop()

    run(scenario())


def test_copy_runs_in_background_reports_progress_and_takes_member_changes(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with copy_nodes(tmp_path, 2) as (a, c):
            members = await lead(a)
            fault(c, FAULT_COPY_SLOW_FILE, "60\n")  # 16 chunks: about 1 s
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            resp = await c.apply(copy_upsert(copy_spec(members, a.addr, 1, copy_from=a.addr)))
            assert loop.time() - t0 < 0.5  # the call does not wait for the copy
            [info] = resp.replicas
            assert resp.error.code == 0 and not info.in_service
            assert (info.copy_from, info.build_error) == (a.addr, "")
            assert info.bytes_copied < SIZE
            assert not (c.rdir() / "meta.json").exists()

            # While building: no data served, no log served, cannot lead.
            [busy] = await c.fetch_data()
            assert busy.error.name == "OB_STATE_NOT_MATCH" and "being built" in (busy.error.message)
            r = await c.replica_stub.FetchLog(
                obrpc_pb2.FetchLogRequest(tenant_id=T, ls_id=LS, from_index=1), timeout=5
            )
            assert r.error.name == "OB_NOT_MASTER"
            refused = await c.apply(copy_upsert(copy_spec(members, c.addr, 2)))
            assert refused.error.name == "OB_STATE_NOT_MATCH"
            assert refused.replicas[0].term == 1

            # A member-list change is adopted during the copy and written with the data.
            grown = sorted([a.addr, c.addr])
            changed = await c.apply(copy_upsert(copy_spec(grown, a.addr, 1)))
            assert changed.error.code == 0 and list(changed.replicas[0].member_list) == grown
            assert changed.replicas[0].copy_from == a.addr  # the copy goes on
            assert not (c.rdir() / "meta.json").exists()

            # Progress shows in lease requests.
            seen: list[int] = []

            def sample() -> bool:
                info = c.info()
                assert info is not None
                if info.bytes_copied and (not seen or seen[-1] != info.bytes_copied):
                    seen.append(info.bytes_copied)
                if not info.in_service:
                    assert info.data_size in (0, SIZE)
                return info.in_service

            await wait_until(sample, "the copy to finish", 10)
            assert len(seen) >= 3 and seen == sorted(seen), seen
            final = c.info()
            assert final is not None and final.data_checksum == a.info().data_checksum  # type: ignore[union-attr]
            meta = json.loads((c.rdir() / "meta.json").read_text())
            assert meta["member_list"] == grown and meta["copy_from"] == ""

            # A drop during a copy stops it and removes every file of it.
            await lead(a, ls=2)
            resp = await c.apply(copy_upsert(copy_spec(members, a.addr, 1, copy_from=a.addr, ls=2)))
            assert resp.error.code == 0
            await wait_until(
                lambda: (c.info(2) or obrpc_pb2.ReplicaInfo()).bytes_copied >= 2 * CHUNK,
                "the second copy to be under way",
            )
            assert leftovers(c, 2)  # the partial temp file
            gone = await c.apply(copy_drop(ls=2))
            assert gone.error.code == 0 and [r.ls_id for r in gone.replicas] == [LS]
            assert not c.rdir(2).exists()
            assert not (c.data_dir / "clog" / f"{T}_2").exists()
            await asyncio.sleep(0.2)  # nothing comes back once the copy is cancelled
            assert not c.rdir(2).exists() and c.info(2) is None
            assert c.in_service(LS)

    run(scenario())


def test_a_drop_while_the_copy_opens_its_file_leaves_nothing_on_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The drop cancels the copy while its worker thread is still opening the temp file
    (held here until the drop answered): the thread's late open must not bring the
    replica's directory back. It did when the thread created the directory (a CI run on a
    loaded machine kept a cancelled copy's files on the destination)."""
    entered, release = threading.Event(), threading.Event()
    opened: list[BaseException | None] = []
    real_open = copy_stream._open_for_copy

    def held_open(tmp: Path) -> Any:
        entered.set()
        release.wait(30)
        try:
            fh = real_open(tmp)
        except BaseException as e:
            opened.append(e)
            raise
        opened.append(None)
        return fh

    monkeypatch.setattr(copy_stream, "_open_for_copy", held_open)

    async def scenario() -> None:
        async with copy_nodes(tmp_path, 2) as (a, c):
            members = await lead(a)
            resp = await c.apply(copy_upsert(copy_spec(members, a.addr, 1, copy_from=a.addr)))
            assert resp.error.code == 0
            await wait_until(entered.is_set, "the copy to open its temp file")
            gone = await c.apply(copy_drop())
            assert gone.error.code == 0 and c.info() is None
            assert not c.rdir().exists()
            release.set()
            await wait_until(lambda: bool(opened), "the held open to return")
            assert isinstance(opened[0], FileNotFoundError), opened
            assert not c.rdir().exists(), sorted(p.name for p in c.rdir().iterdir())

    run(scenario())


def test_failed_copies_report_build_error_then_a_retry_succeeds(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with copy_nodes(tmp_path, 3) as (a, b, c):
            members = await lead(a, b)
            await wait_until(lambda: b.in_service(), "b in service")

            async def copy_from(src: str) -> obrpc_pb2.ReplicaInfo:
                resp = await c.apply(copy_upsert(copy_spec(members, a.addr, 1, copy_from=src)))
                assert resp.error.code == 0, resp.error
                await wait_until(
                    lambda: (
                        (c.info() or obrpc_pb2.ReplicaInfo()).build_error != "" or c.in_service()
                    ),
                    f"the copy from {src} to end",
                )
                info = c.info()
                assert info is not None
                # Once in service the copy is over and no longer reported.
                assert info.copy_from == ("" if info.in_service else src)
                return info

            def failed_cleanly() -> None:
                assert not c.in_service() and leftovers(c) == []
                assert not (c.rdir() / "meta.json").exists()
                assert not (c.rdir() / "data").exists()

            # Source unreachable.
            dead = f"127.0.0.1:{free_port()}"
            info = await copy_from(dead)
            assert dead in info.build_error and "\n" not in info.build_error
            failed_cleanly()

            # The source's file was damaged after it was built: checksum mismatch.
            path = a.rdir() / "data"
            raw = bytearray(path.read_bytes())
            raw[SIZE // 2] ^= 0xFF
            path.write_bytes(bytes(raw))
            info = await copy_from(a.addr)
            assert "checksum mismatch" in info.build_error and a.addr in info.build_error
            failed_cleanly()

            # The source answers an error chunk.
            switch = fault(b, FAULT_SERVE_DATA_ERROR_FILE)
            info = await copy_from(b.addr)
            assert "OB_ERR_SYS" in info.build_error and b.addr in info.build_error
            failed_cleanly()
            # Reported as such, and a spec without copy_from does not restart it.
            again = await c.apply(copy_upsert(copy_spec(members, a.addr, 1)))
            assert again.replicas[0].build_error == info.build_error

            # The same source again, repaired: the copy restarts and succeeds.
            switch.unlink()
            info = await copy_from(b.addr)
            assert info.build_error == "" and info.in_service
            assert info.data_checksum == b.info().data_checksum  # type: ignore[union-attr]
            assert (c.rdir() / "data").read_bytes() == (b.rdir() / "data").read_bytes()
            # copy_from on a replica in service is ignored.
            resp = await c.apply(copy_upsert(copy_spec(members, a.addr, 1, copy_from=dead)))
            assert resp.error.code == 0 and resp.replicas[0].in_service
            assert resp.replicas[0].copy_from == ""
            # And copying from oneself is refused.
            await c.apply(copy_drop())
            me = await c.apply(copy_upsert(copy_spec(members, a.addr, 1, copy_from=c.addr)))
            assert me.error.name == "OB_INVALID_ARGUMENT" and list(me.replicas) == []

    run(scenario())


def test_new_source_during_a_copy_restarts_it(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with copy_nodes(tmp_path, 3) as (a, b, c):
            members = await lead(a, b)
            slow = fault(c, FAULT_COPY_SLOW_FILE, "50")
            await c.apply(copy_upsert(copy_spec(members, a.addr, 1, copy_from=a.addr)))
            await wait_until(
                lambda: (c.info() or obrpc_pb2.ReplicaInfo()).bytes_copied >= 3 * CHUNK,
                "the copy from a under way",
            )
            # The same source again: the copy goes on (the RS may repeat its spec).
            same = await c.apply(copy_upsert(copy_spec(members, a.addr, 1, copy_from=a.addr)))
            assert same.replicas[0].bytes_copied >= 3 * CHUNK
            moved = await c.apply(copy_upsert(copy_spec(members, a.addr, 1, copy_from=b.addr)))
            info = moved.replicas[0]
            assert info.copy_from == b.addr and info.bytes_copied < 3 * CHUNK
            assert len(leftovers(c)) <= 1  # the first copy's temp file is gone
            slow.unlink()
            await wait_until(lambda: c.in_service(), "the copy from b to finish")
            assert c.info().data_checksum == a.info().data_checksum  # type: ignore[union-attr]

    run(scenario())


def test_restart_during_copy_leaves_no_replica_and_resumes_the_log_phase(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with copy_nodes(tmp_path, 1) as (a,):
            members = await lead(a)
            await wait_until(lambda: a.end_index() >= 5, "the leader appending")
            cdir = tmp_path / "c"
            c = await start_copy_node(cdir)
            try:
                fault(c, FAULT_COPY_SLOW_FILE, "60")
                await c.apply(copy_upsert(copy_spec(members, a.addr, 1, copy_from=a.addr)))
                await wait_until(
                    lambda: (c.info() or obrpc_pb2.ReplicaInfo()).bytes_copied >= 2 * CHUNK,
                    "the copy under way",
                )
                # What a crash would leave: the directory as it is now.
                shutil.copytree(cdir, tmp_path / "crashed")
            finally:
                await c.stop()
            for d in (cdir, tmp_path / "crashed"):
                after = Agent(copy_settings(d), SystemClock())
                assert after.replicas.keys() == []
                assert list(after.build_lease_request().replicas) == []
                assert not (d / "replicas" / f"{T}_{LS}").exists()
                assert not (d / "clog" / f"{T}_{LS}").exists()

            # Data in place but the log not caught up (followers stopped): a restart keeps
            # the replica, still not in service, and finishes the catch-up.
            c = await start_copy_node(cdir)
            try:
                (cdir / FAULT_COPY_SLOW_FILE).unlink()
                stop = fault(c, FAULT_REPLICATION_STOP_FILE)
                await c.apply(copy_upsert(copy_spec(members, a.addr, 1, copy_from=a.addr)))
                await wait_until(
                    lambda: (c.info() or obrpc_pb2.ReplicaInfo()).bytes_copied == SIZE,
                    "the data to be in place",
                )
                await asyncio.sleep(0.2)
                info = c.info()
                assert info is not None and not info.in_service and info.copy_from == a.addr
                meta = json.loads((c.rdir() / "meta.json").read_text())
                assert meta["copy_from"] == a.addr and meta["catch_up_to"] >= 5
            finally:
                await c.stop()
            c = await start_copy_node(cdir)
            try:
                await asyncio.sleep(0.3)
                info = c.info()
                assert info is not None and not info.in_service
                assert (info.copy_from, info.bytes_copied, info.data_size) == (a.addr, SIZE, SIZE)
                stop.unlink()
                await wait_until(lambda: c.in_service(), "the catch-up to finish")
                assert c.end_index() >= meta["catch_up_to"]
                assert json.loads((c.rdir() / "meta.json").read_text())["copy_from"] == ""
                target = a.end_index() + 3
                await wait_until(lambda: c.end_index() >= target, "c following a")
            finally:
                await c.stop()

    run(scenario())


def test_max_concurrent_copies(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with copy_nodes(tmp_path, 1) as (a,):
            for ls in (1, 2, 3):
                await lead(a, ls=ls)
            members = [a.addr]
            c = await start_copy_node(tmp_path / "c", max_concurrent_copies=2)
            try:
                fault(c, FAULT_COPY_SLOW_FILE, "25")  # about 0.4 s per copy
                resp = await c.apply(
                    copy_upsert(
                        *(
                            copy_spec(members, a.addr, 1, copy_from=a.addr, ls=ls)
                            for ls in (1, 2, 3)
                        )
                    )
                )
                assert resp.error.code == 0
                assert [(r.in_service, r.copy_from) for r in resp.replicas] == [(False, a.addr)] * 3
                most = 0
                saw_waiting = False

                def sample() -> bool:
                    nonlocal most, saw_waiting
                    infos = list(c.agent.build_lease_request().replicas)
                    copying = [i for i in infos if 0 < i.bytes_copied < SIZE]
                    most = max(most, len(copying))
                    waiting = [i for i in infos if not i.in_service and i.bytes_copied == 0]
                    saw_waiting = saw_waiting or (len(copying) == 2 and len(waiting) == 1)
                    return all(i.in_service for i in infos)

                await wait_until(sample, "all three copies", 15)
                assert most == 2 and saw_waiting
            finally:
                await c.stop()

    run(scenario())


def test_a_source_announcing_more_than_the_replica_size_is_refused(tmp_path: Path) -> None:
    """The destination expects at most its ``replica_size``; a source announcing
    more (here one configured with twice the size) is refused before any byte is written:
    ``build_error`` names the sizes and no partial copy stays. At the bound it succeeds."""

    async def scenario() -> None:
        async with copy_nodes(tmp_path, 1) as (a,):
            small = await start_copy_node(tmp_path / "small", replica_size=f"{SIZE // 2 // 1024}K")
            same = await start_copy_node(tmp_path / "same")
            try:
                members = await lead(a)
                resp = await small.apply(
                    copy_upsert(copy_spec(members, a.addr, 1, copy_from=a.addr))
                )
                assert resp.error.code == 0, resp.error
                await wait_until(
                    lambda: (small.info() or obrpc_pb2.ReplicaInfo()).build_error != "",
                    "the oversized copy to fail",
                )
                info = small.info()
                assert info is not None and not info.in_service
                assert f"announced {SIZE} bytes, expected 0..{SIZE // 2}" in info.build_error
                assert leftovers(small) == [] and not (small.rdir() / "data").exists()

                # Exactly the replica size: accepted.
                resp = await same.apply(
                    copy_upsert(copy_spec(members, a.addr, 1, copy_from=a.addr))
                )
                assert resp.error.code == 0, resp.error
                await wait_until(lambda: same.in_service(), "the copy at the bound")
            finally:
                await small.stop()
                await same.stop()

    run(scenario())


class _ScriptedCall:
    """A stand-in for grpc's stream call object (a library class, not ours): the chunks a
    misbehaving source sends."""

    def __init__(self, chunks: list[obrpc_pb2.DataChunk]) -> None:
        self.chunks = chunks
        self.cancelled = False

    async def read(self) -> object:
        return self.chunks.pop(0) if self.chunks else grpc.aio.EOF

    def cancel(self) -> None:
        self.cancelled = True


def test_receive_refuses_an_oversized_announcement_and_bytes_past_it(tmp_path: Path) -> None:
    """Both sides of both bounds of receive_data_file: total_size == max_size accepted and
    max_size + 1 refused; bytes up to the announced size accepted, one more refused."""

    class NoSlowdown:
        def copy_delay_s(self) -> float:
            return 0.0

        def copy_stalled(self) -> bool:
            return False

    data = b"x" * 64

    def stream(total: int, payload: bytes) -> _ScriptedCall:
        crc = zlib.crc32(payload)
        return _ScriptedCall(
            [
                obrpc_pb2.DataChunk(offset=0, data=payload[:32], total_size=total, checksum=crc),
                obrpc_pb2.DataChunk(offset=32, data=payload[32:]),
            ]
        )

    async def receive(call: _ScriptedCall, max_size: int) -> str:
        b = Build(source="src")
        try:
            await receive_data_file(call, "src", tmp_path / "tmp", b, 1.0, NoSlowdown(), max_size)
        except CopyFailed as e:
            return str(e)
        finally:
            assert call.cancelled
        return ""

    async def scenario() -> None:
        assert await receive(stream(64, data), 64) == ""
        assert "announced 64 bytes, expected 0..63" in await receive(stream(64, data), 63)
        # Announces 63, sends 64: the chunk bringing the 64th byte is refused.
        assert "sent bytes [32, 64) of 63" in await receive(stream(63, data), 64)

    run(scenario())


async def copy_held_in_its_log_phase(
    a: CopyNode, b: CopyNode, c: CopyNode
) -> tuple[list[str], Path]:
    """a leads, b follows; c copies from b, following a at term 1, and is held (by the
    replication-stop fault file, returned) once its data file is in place. Returns the
    members and the fault file."""
    members = await lead(a, b)
    await wait_until(lambda: b.end_index() > 3, "b following a")
    stop = fault(c, FAULT_REPLICATION_STOP_FILE)
    resp = await c.apply(copy_upsert(copy_spec(members, a.addr, 1, copy_from=b.addr)))
    assert resp.error.code == 0, resp.error
    await wait_until(lambda: (c.rdir() / "data").exists(), "the data copied")
    return members, stop


def test_a_copy_whose_leader_moved_follows_the_leader_named_by_the_old_one(
    tmp_path: Path,
) -> None:
    """A copy in its log phase knows the leader of its hand-out (a, term
    1); the leadership moves to b at term 2 and nobody tells the copy. The old leader answers
    the catch-up with OB_NOT_MASTER naming b at term 2; the copy asks b and goes in service
    (before: it asked a forever and the DELETE SERVER job stalled, bench-empty at 1 GiB)."""

    async def scenario() -> None:
        async with copy_nodes(tmp_path, 2) as (a, b):
            c = await start_copy_node(tmp_path / "c")
            try:
                members, stop = await copy_held_in_its_log_phase(a, b, c)
                assert not c.in_service()
                for n in (a, b):
                    resp = await n.apply(copy_upsert(copy_spec(members, b.addr, 2)))
                    assert resp.error.code == 0, resp.error
                stop.unlink()
                await wait_until(c.in_service, "the copy in service")
            finally:
                await c.stop()

    run(scenario())


def test_a_copy_refused_by_a_former_leader_asks_the_current_one(tmp_path: Path) -> None:
    """A copy in its log phase knows the leader of its hand-out (a, term
    1); the leadership moves to b at term 2, and a no longer hosts the LS (it was dropped
    there), so a's refusal names no newer leader. The copy asks the other members (term 0:
    served by whoever leads), finds b and goes in service; its refusal was reported as
    ``catch_up_error`` meanwhile and is cleared once served (before: it asked a forever)."""

    async def scenario() -> None:
        async with copy_nodes(tmp_path, 2) as (a, b):
            c = await start_copy_node(tmp_path / "c")
            try:
                members, stop = await copy_held_in_its_log_phase(a, b, c)
                resp = await b.apply(copy_upsert(copy_spec(members, b.addr, 2)))
                assert resp.error.code == 0, resp.error
                resp = await a.apply(copy_drop())
                assert resp.error.code == 0, resp.error
                target = b.end_index() + 3
                await wait_until(lambda: b.end_index() >= target, "b appending at term 2")
                stop.unlink()

                def refused_then_served() -> bool:
                    info = c.info()
                    return info is not None and a.addr in info.catch_up_error

                await wait_until(
                    lambda: refused_then_served() or c.in_service(), "a's refusal reported"
                )
                await wait_until(c.in_service, "the copy in service")
                info = c.info()
                assert info is not None and info.catch_up_error == ""
                assert c.end_index() >= target
            finally:
                await c.stop()

    run(scenario())


def test_log_peer_asks_the_leader_then_the_others_once_each() -> None:
    """Whom a copy asks for its log (``copy.log_peer``): the hinted leader, then the peer
    that served last, then the spec's leader at its term, then the other members and the
    source at term 0, each skipped once it refused; all refused: the spec's leader again.
    A new spec (generation) forgets the refusals."""
    me, a, b, d, src = "127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3", "127.0.0.1:4", "127.0.0.1:5"
    meta = ReplicaMeta(T, LS, 7, (a, b, d), a, 4, 3, "FULL", 1 << 20, 0)
    rep = Replica(meta, Path("/nonexistent"), cast(ReplicaLog, None))
    b_ = Build(source=src)
    assert log_peer(rep, b_, me) == (a, 4)
    b_.refused.add(a)
    assert log_peer(rep, b_, me) == (b, 0)
    b_.refused.add(b)
    assert log_peer(rep, b_, me) == (d, 0)
    b_.refused.add(d)
    assert log_peer(rep, b_, me) == (src, 0)
    b_.served_by = d  # d served once, then refused: skipped
    b_.refused.add(src)
    assert log_peer(rep, b_, me) == (a, 4) and b_.refused == set()
    b_.served_by = d
    assert log_peer(rep, b_, me) == (d, 0)
    rep.leader_hint = b
    assert log_peer(rep, b_, me) == (b, 0)
    b_.refused.add(b)
    assert log_peer(rep, b_, me) == (d, 0)
    rep.set_meta(meta)  # a new spec (same leader and term): a new generation
    assert log_peer(rep, b_, me) == (b, 0) and b_.served_by == ""
