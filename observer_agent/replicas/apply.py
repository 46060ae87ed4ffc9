"""Applying one ``ReplicaSpec`` or one drop of ``ObserverService.ApplyReplicas`` to the
hosted replicas (docs/design/migration.md): create (generated, or built by copy), adopt membership,
leadership and term (a new leader first catches up), drop.

The rules are those documented on
``observer_agent.service.ObserverServicer.ApplyReplicas``; the manager runs these steps one
request at a time under the hosted replicas' lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Callable, Iterable
from typing import Protocol

from obcommon.addresses import parse_host_port
from obcommon.errors import ObError
from obcommon.proto import obrpc_pb2
from observer_agent.address import LocalServer
from observer_agent.disk import check_free_space, os_error_to_ob
from observer_agent.replicas.hosted import HostedReplicas
from observer_agent.replicas.log import LOG_KEEP_ENTRIES, ReplicaLog
from observer_agent.replicas.replica import BUILD_FAILED, Replica
from observer_agent.replicas.storage import (
    DATA_FILE,
    Key,
    ReplicaMeta,
    ReplicaPaths,
    build_data_file,
    describe_ls,
    write_meta,
)
from observer_agent.replicas.tasks import CLOSE_TIMEOUT_S
from observer_agent.settings import AgentSettings


class ReplicaLoops(Protocol):
    """What applying a spec needs of log replication (implemented by
    :class:`observer_agent.replicas.replication.LogReplication`)."""

    def launch(self, rep: Replica) -> None:
        """Start the loop of a new replica if the loops run."""
        ...

    async def catch_up(
        self, rep: Replica, spec: obrpc_pb2.ReplicaSpec, client_deadline: float | None
    ) -> None:
        """Fetch the log from ``spec.catch_up_from`` up to ``spec.catch_up_index``; raises
        ``ObError(OB_TIMEOUT)``."""
        ...


class Copier(Protocol):
    """Builds of replicas by copy (implemented by
    :class:`observer_agent.replicas.copy.ReplicaCopier`)."""

    async def create(
        self, spec: obrpc_pb2.ReplicaSpec, members: tuple[str, ...], source: str
    ) -> Replica:
        """Register an absent replica built from ``source`` and start its copy; raises
        ``ObError(OB_ERR_SYS)``."""
        ...

    async def restart(self, rep: Replica, source: str) -> None:
        """Cancel the copy of ``rep`` and start a new one from ``source``."""
        ...


class SpecApplier:
    """Upserts and drops of replicas on one agent.

    ``settings`` gives ``replica_size``; ``me`` this agent's ``ip:port``; ``paths`` where
    replicas live; ``hosted`` the replicas; ``replication`` starts loops and runs a new
    leader's catch-up; ``copier`` builds replicas by copy; ``log`` the agent's logger;
    ``log_keep`` the entries a compaction of a new log keeps.
    """

    def __init__(
        self,
        settings: AgentSettings,
        me: LocalServer,
        paths: ReplicaPaths,
        hosted: HostedReplicas,
        replication: ReplicaLoops,
        copier: Copier,
        log: logging.Logger | logging.LoggerAdapter,  # type: ignore[type-arg]
        *,
        log_keep: int = LOG_KEEP_ENTRIES,
    ) -> None:
        """Stateless apart from its collaborators."""
        self.settings = settings
        self._me = me
        self._paths = paths
        self._hosted = hosted
        self._replication = replication
        self._copier = copier
        self.log = log
        self._log_keep = log_keep

    async def upsert(self, spec: obrpc_pb2.ReplicaSpec, client_deadline: float | None) -> None:
        """Apply one spec; ``client_deadline`` (the event loop's time, seconds, or None)
        bounds a new leader's catch-up. Raises ``ObError``: ``OB_INVALID_ARGUMENT`` (bad
        spec, ``copy_from`` this server), ``OB_STATE_NOT_MATCH`` (a replica being built made
        leader), ``OB_TIMEOUT`` (catch-up), ``OB_SERVER_OUTOF_DISK_SPACE`` (a new replica that does not
        fit on the data disk, or a write that found it full), ``OB_ERR_SYS`` (another failed
        write)."""
        key = (spec.tenant_id, spec.ls_id)
        members = check_spec(spec)
        me = self._me.server
        source = _normalize(spec.copy_from)
        rep = self._hosted.find(key)
        if source == me and (rep is None or rep.build is not None):
            raise ObError(
                "OB_INVALID_ARGUMENT",
                "ReplicaSpec",
                detail=f"{describe_ls(key)}: copy_from {source} is this server",
            )
        if spec.leader == me and (
            (rep is None and source) or (rep is not None and rep.build is not None)
        ):
            # Its log is not complete: leading would lose acknowledged entries.
            raise ObError(
                "OB_STATE_NOT_MATCH",
                detail=f"{describe_ls(key)} is being built by copy and cannot lead yet",
            )
        if rep is None:
            if source:
                rep = await self._copier.create(spec, members, source)
            else:
                rep = await self._create(spec, members)
        elif rep.build is not None and not rep.build.data_in_place and source:
            b = rep.build
            if b.state == BUILD_FAILED or b.source != source:
                await self._copier.restart(rep, source)
        if spec.term < rep.meta.term:
            self.log.info(
                "replica %s: spec with term %d ignored (term %d kept)",
                describe_ls(key),
                spec.term,
                rep.meta.term,
            )
            return
        new = dataclasses.replace(
            rep.meta,
            unit_id=spec.unit_id,
            member_list=members,
            leader=spec.leader,
            term=spec.term,
            paxos_replica_number=spec.paxos_replica_number,
            replica_type=spec.replica_type or rep.meta.replica_type,
        )
        old = rep.meta
        # Memory only: after a restart the RS announces a copy's learner again before it
        # retries the copy.
        rep.learners = frozenset(
            _addresses(spec.learner_list, lambda why: ObError("OB_INVALID_ARGUMENT", why))
        )
        rep.busy = True
        try:
            becomes_leader = spec.leader == me and (old.leader, old.term) != (me, spec.term)
            src = spec.catch_up_from.strip()
            # With a predecessor named, its log is compared even when ours is as long: a
            # longer log may end in a tail this node wrote as a deposed leader, which the
            # predecessor's entries must replace (and past its last index nothing is ours).
            if becomes_leader and (spec.catch_up_index > rep.log.end_index or (src and src != me)):
                await self._replication.catch_up(rep, spec, client_deadline)
            if rep.build is not None and not rep.build.data_in_place:
                # No meta.json before the data is in place (a restart must find no half
                # replica): the copy writes this meta when it installs the file.
                if new != old:
                    rep.set_meta(new)
            elif new != old:
                try:
                    await asyncio.to_thread(write_meta, rep.dir, new)
                except OSError as e:
                    raise os_error_to_ob(e, f"{describe_ls(key)}: cannot write its meta") from None
                rep.set_meta(new)
        finally:
            rep.busy = False
            rep.wake.set()
        if (new.leader, new.term) != (old.leader, old.term):
            if new.leader == me:
                rep.need_verify = False
                role = "leader"
            elif new.leader:
                role = f"follower of {new.leader}"
            else:
                role = "without leader"
            self.log.info(
                "replica %s: %s at term %d (was leader %r term %d), log_end_index %d",
                describe_ls(key),
                role,
                new.term,
                old.leader,
                old.term,
                rep.log.end_index,
            )

    async def _create(self, spec: obrpc_pb2.ReplicaSpec, members: tuple[str, ...]) -> Replica:
        key = (spec.tenant_id, spec.ls_id)
        directory = self._paths.replica_dir(key)
        size = self.settings.replica_size

        def build() -> tuple[ReplicaMeta, ReplicaLog]:
            directory.mkdir(parents=True, exist_ok=True)
            crc = build_data_file(directory / DATA_FILE, size, spec.tenant_id, spec.ls_id)
            # Leaderless at term 0: the spec itself is adopted by the update that follows.
            meta = ReplicaMeta(
                tenant_id=spec.tenant_id,
                ls_id=spec.ls_id,
                unit_id=spec.unit_id,
                member_list=members,
                leader="",
                term=0,
                paxos_replica_number=spec.paxos_replica_number,
                replica_type=spec.replica_type or "FULL",
                data_size=size,
                data_checksum=crc,
            )
            log_path = self._paths.log_path(key)
            # A log left by an earlier replica of this LS is history of another life.
            with contextlib.suppress(FileNotFoundError):
                log_path.unlink()
            log = ReplicaLog.open(log_path, self._log_keep)
            try:
                write_meta(directory, meta)
            except BaseException:
                log.close()
                raise
            return meta, log

        # Refused before anything is written when it cannot fit (OB_SERVER_OUTOF_DISK_SPACE),
        # and a build that still runs out of space leaves no files.
        await asyncio.to_thread(
            check_free_space, self._paths.data_dir, size, f"replica {describe_ls(key)}"
        )
        try:
            meta, log = await asyncio.to_thread(build)
        except OSError as e:
            with contextlib.suppress(OSError):
                await asyncio.to_thread(self._paths.remove_files, [key])
            raise os_error_to_ob(e, f"{describe_ls(key)}: cannot create the replica") from None
        rep = Replica(meta, directory, log)
        rep.in_service = True
        self._hosted.add(rep)
        self.log.info(
            "replica %s created: %d bytes of data, crc32 %d",
            describe_ls(key),
            size,
            meta.data_checksum,
        )
        self._replication.launch(rep)
        return rep

    # -- building a replica by copy (replica migration)

    async def drop(self, key: Key) -> None:
        """Stop the loop and any copy of ``key``'s replica and remove its files (a no-op for
        an absent key). Raises ``ObError(OB_ERR_SYS)`` when the files cannot be removed."""
        rep = self._hosted.pop(key)
        if rep is not None:
            tasks = [rep.task, rep.build.task if rep.build is not None else None]
            rep.task = None
            # A copy in progress stops here: its temp file goes with the directory below.
            running = {t for t in tasks if t is not None}
            for t in running:
                t.cancel()
            if running:
                await asyncio.wait(running, timeout=CLOSE_TIMEOUT_S)
            rep.log.close()
        try:
            await asyncio.to_thread(self._paths.remove_files, [key])
        except OSError as e:
            raise ObError(
                "OB_ERR_SYS", detail=f"{describe_ls(key)}: cannot remove its files: {e}"
            ) from None
        if rep is not None:
            self.log.info("replica %s dropped", describe_ls(key))


def check_spec(spec: obrpc_pb2.ReplicaSpec) -> tuple[str, ...]:
    """Validate one spec; returns its member list normalized and sorted. Raises
    ``ObError(OB_INVALID_ARGUMENT)`` naming the LS."""
    key = (spec.tenant_id, spec.ls_id)

    def bad(why: str) -> ObError:
        return ObError("OB_INVALID_ARGUMENT", "ReplicaSpec", detail=f"{describe_ls(key)}: {why}")

    if spec.tenant_id <= 0 or spec.ls_id <= 0:
        raise bad("tenant_id and ls_id must be > 0")
    if spec.term < 0 or spec.paxos_replica_number < 0 or spec.catch_up_index < 0:
        raise bad("term, paxos_replica_number and catch_up_index must be >= 0")
    members = _addresses(spec.member_list, bad)
    _addresses([a for a in (spec.leader, spec.catch_up_from, spec.copy_from) if a.strip()], bad)
    _addresses(spec.learner_list, bad)
    return members


def _normalize(addr: str) -> str:
    """``ip:port`` as :func:`_addresses` writes it; "" for an empty address. The address must
    have passed :func:`check_spec`."""
    if not addr.strip():
        return ""
    host, port = parse_host_port(addr)
    return f"{host}:{port}"


def _addresses(addrs: Iterable[str], bad: Callable[[str], ObError]) -> tuple[str, ...]:
    out: set[str] = set()
    for a in addrs:
        try:
            host, port = parse_host_port(a)
        except ValueError as e:
            raise bad(str(e)) from None
        out.add(f"{host}:{port}")
    return tuple(sorted(out))
