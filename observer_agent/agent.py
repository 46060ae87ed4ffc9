"""The observer agent's state and lease loop (SPEC.md section 5, OceanBase's
``ObLeaseStateMgr`` / ``ObHeartBeatProcess`` on the observer side).

The decisions are plain synchronous methods driven by an injected :class:`Clock`, so unit
tests can call them with a ``FakeClock`` and hand-made ``LeaseResponse`` messages:

- :meth:`Agent.build_lease_request` - the next ``LeaseRequest``;
- :meth:`Agent.handle_response` - accept or refuse one ``LeaseResponse``;
- :meth:`Agent.next_rs_address` - which RS to try next (leader hint, then round robin);
- :meth:`Agent.probe_disk_now` / :meth:`Agent.refresh_resources` - the periodic jobs.

The LS replicas the agent hosts live in ``agent.replicas`` (a
:class:`observer_agent.replicas.ReplicaManager`): loaded from disk by the constructor, their
leader / follower loops started by :meth:`Agent.run` and stopped when it returns, reported in
every lease request.

:meth:`Agent.run` wires them to the network: one bidirectional ``RootService.LeaseStream``
at a time, a registration busy loop, renewals every ``heartbeat_interval``, and background
resource refresh and disk probes in threads. All times are integer microseconds since the
Unix epoch.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import threading
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any, TypeVar

import grpc

from obcommon.addresses import parse_host_port
from obcommon.clock import Clock
from obcommon.errors import ObError, error_from_proto
from obcommon.proto import obrpc_pb2, obrpc_pb2_grpc
from observer_agent.identity import (
    ClusterIdentity,
    IdentityError,
    identity_path,
    load_identity,
    write_identity,
)
from observer_agent.replicas import ReplicaManager
from observer_agent.resources import DATA_DISK_ERROR, collect_resource_info, probe_data_disk
from observer_agent.settings import AgentSettings

LEASE_REQUEST_VERSION = 1

#: How long a disk probe may take before the disk counts as hung (failed).
DEFAULT_DISK_PROBE_TIMEOUT_US = 5_000_000
#: How long a resource refresh may take before it is abandoned (the last values are kept).
DEFAULT_RESOURCE_TIMEOUT_US = 5_000_000
#: Bound on closing a gRPC channel, so a wedged connection cannot block the loop.
_CLOSE_TIMEOUT_S = 1.0

_T = TypeVar("_T")

_logger = logging.getLogger("observer_agent")


class _AgentLog(logging.LoggerAdapter):  # type: ignore[type-arg]
    """Adds ``ob_server`` (the agent's ``ip:port``) to every record, so the lines of several
    agents in one test process can be told apart; ``observer-agent`` prints it."""

    def __init__(self, agent: Agent) -> None:
        super().__init__(_logger, {})
        self._agent = agent

    def process(
        self, msg: Any, kwargs: MutableMapping[str, Any]
    ) -> tuple[Any, MutableMapping[str, Any]]:
        extra = dict(kwargs.get("extra") or {})
        extra.setdefault("ob_server", self._agent.server)
        kwargs["extra"] = extra
        return msg, kwargs


def _in_daemon_thread(fn: Callable[[], _T], name: str) -> asyncio.Future[_T]:
    """Run ``fn`` in a new daemon thread; the returned future completes on the running loop.

    Not ``asyncio.to_thread``: a probe stuck in the kernel on a dead disk would then block
    the executor's shutdown, and with it SIGTERM. A daemon thread is simply left behind.
    """
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[_T] = loop.create_future()

    def deliver(setter: Callable[[Any], None], value: Any) -> None:
        if not fut.done():
            setter(value)

    def target() -> None:
        try:
            result = fn()
        except BaseException as e:  # delivered to the awaiting side, not swallowed
            with contextlib.suppress(RuntimeError):  # loop already closed
                loop.call_soon_threadsafe(deliver, fut.set_exception, e)
        else:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(deliver, fut.set_result, result)

    threading.Thread(target=target, name=name, daemon=True).start()
    return fut


def describe_exception(e: BaseException) -> str:
    """A one-line description of a failed RPC or wait, for log lines."""
    if isinstance(e, grpc.aio.AioRpcError):
        details = (e.details() or "").replace("\n", " ")
        return f"{e.code().name}: {details}"
    if isinstance(e, TimeoutError):
        return "no answer in time"
    return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__


class StreamClosed(Exception):
    """The RS ended the lease stream (end of stream without an error status)."""


class _LeaseStream:
    """One open ``RootService.LeaseStream`` to one RS address.

    :meth:`exchange` writes one request and waits for the response with the same ``seq``;
    every step is bounded by the timeout. After any exception the stream is unusable and
    must be closed.
    """

    def __init__(self, addr: str) -> None:
        self.addr = addr
        self._channel = grpc.aio.insecure_channel(addr)
        self._call = obrpc_pb2_grpc.RootServiceStub(self._channel).LeaseStream()
        self.broken = False

    async def exchange(
        self, req: obrpc_pb2.LeaseRequest, timeout_s: float
    ) -> obrpc_pb2.LeaseResponse:
        """Send ``req``; return the response carrying ``req.seq``.

        Raises ``TimeoutError`` (no answer within ``timeout_s``), ``grpc.aio.AioRpcError``
        (connection or stream error), :class:`StreamClosed`, or ``ValueError`` when the RS
        answers with a ``seq`` we never sent.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        try:
            await asyncio.wait_for(self._call.write(req), timeout_s)
            while True:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    raise TimeoutError
                resp = await asyncio.wait_for(self._call.read(), remaining)
                if resp is grpc.aio.EOF:
                    raise StreamClosed("the RS closed the lease stream")
                if resp.seq == req.seq:
                    return resp  # type: ignore[no-any-return]
                if resp.seq > req.seq:
                    raise ValueError(f"response seq {resp.seq} is ahead of request seq {req.seq}")
                # A late answer to a request we gave up on: skip it.
        except asyncio.InvalidStateError:
            # grpc.aio's way of saying the call already ended: report how it ended instead.
            self.broken = True
            raise StreamClosed(f"the lease stream ended: {await self._final_status()}") from None
        except BaseException:
            self.broken = True
            raise

    async def _final_status(self) -> str:
        try:
            code = await asyncio.wait_for(self._call.code(), _CLOSE_TIMEOUT_S)
            details = await asyncio.wait_for(self._call.details(), _CLOSE_TIMEOUT_S)
        except Exception:
            return "status unknown"
        name = getattr(code, "name", str(code))
        return f"{name}: {details}" if details else str(name)

    async def close(self) -> None:
        """Cancel the call and close the channel, bounded in time; never raises."""
        self.broken = True
        with contextlib.suppress(Exception):
            self._call.cancel()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._channel.close(grace=None), _CLOSE_TIMEOUT_S)


class Agent:
    """One data node's agent: lease state, cluster identity, resources and disk health.

    ``settings`` gives the addresses and intervals; ``clock`` all the times (integer
    microseconds since the epoch). ``data_dir`` is created if needed and its identity file
    loaded: raises :class:`observer_agent.identity.IdentityError` when that file is
    unreadable. ``rng`` drives the reconnect jitter; ``disk_probe`` is the blocking probe
    function (defaults to :func:`observer_agent.resources.probe_data_disk`).

    Public state (read it, do not write it): ``identity``, ``highest_epoch``,
    ``lease_expire_time``, ``server_id``, ``rs_server_status``, ``start_service_time``,
    ``serving``, ``registered``, ``resource_info``, ``disk_error`` (reason or None),
    ``accepted_count``, ``refused_count``, ``last_accepted_rs``, ``last_refusal``,
    ``replicas`` (the hosted LS replicas).
    """

    def __init__(
        self,
        settings: AgentSettings,
        clock: Clock,
        *,
        rng: random.Random | None = None,
        disk_probe: Callable[[Path], str | None] = probe_data_disk,
        disk_probe_timeout_us: int = DEFAULT_DISK_PROBE_TIMEOUT_US,
        resource_timeout_us: int = DEFAULT_RESOURCE_TIMEOUT_US,
    ) -> None:
        """Create ``settings.data_dir`` and load its identity; start unregistered and not serving.

        A kept identity written for another zone or address is only logged as a warning. The
        replicas kept under ``data_dir`` are loaded (not in service until :meth:`run` has
        verified their data files). ``disk_probe_timeout_us`` / ``resource_timeout_us`` (microseconds) bound one data-disk
        probe and one resource sample. Raises :class:`observer_agent.identity.IdentityError`
        when the identity file exists but cannot be read or parsed.
        """
        self.settings = settings
        self.clock = clock
        self.data_dir = Path(settings.data_dir)
        self._rng = rng or random.Random()
        self._disk_probe = disk_probe
        self.disk_probe_timeout_us = disk_probe_timeout_us
        self.resource_timeout_us = resource_timeout_us
        self._port = settings.rpc_port
        self.log = _AgentLog(self)

        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.identity: ClusterIdentity | None = load_identity(self.data_dir)
        if self.identity is not None and (
            self.identity.zone != settings.zone or self.identity.server != self.server
        ):
            self.log.warning(
                "identity %s was written for zone %s server %s, but this agent runs as zone %s server %s",
                identity_path(self.data_dir),
                self.identity.zone,
                self.identity.server,
                settings.zone,
                self.server,
            )

        self.highest_epoch = 0
        self.lease_expire_time = 0
        self.server_id = self.identity.server_id if self.identity else 0
        self.rs_server_status: obrpc_pb2.RsServerStatus.ValueType = obrpc_pb2.RSS_INVALID
        self.start_service_time = 0
        self.serving = False
        self.registered = False
        self.resource_info = obrpc_pb2.ResourceInfo()
        self.disk_error: str | None = None
        self.accepted_count = 0
        self.refused_count = 0
        self.last_accepted_rs = ""
        self.last_refusal: ObError | None = None

        self._seq = 0
        self._adopted_rs_list: list[str] = []
        self._rs_index = 0
        self._preferred: list[str] = []
        self._heartbeat_now = False
        self._lease_lapse_logged = False
        self._stop: asyncio.Event | None = None
        self._conn: _LeaseStream | None = None
        self._probe_pending: asyncio.Future[str | None] | None = None
        self._resource_pending: asyncio.Future[obrpc_pb2.ResourceInfo] | None = None
        self.health: Any = None  # the gRPC health servicer, set by create_server
        self.replicas = ReplicaManager(
            self.data_dir, settings, clock, lambda: self.server, self.log
        )
        self.replicas.load()

    # ------------------------------------------------------------------ identity / address

    @property
    def server(self) -> str:
        """This server's ``ip:port`` (the RPC address; the bound port when configured as 0)."""
        return f"{self.settings.rpc_host}:{self._port}"

    def bind_port(self, port: int) -> None:
        """Record the port the gRPC server actually bound (matters when configured as 0)."""
        if self.settings.rpc_port == 0:
            self._port = port
        elif port != self.settings.rpc_port:
            self.log.warning(
                "gRPC server bound port %d, but rpc_addr says %s", port, self.settings.rpc_addr
            )

    def mark_serving(self) -> None:
        """Called once the agent's gRPC server is up: the next accepted lease starts service."""
        self.serving = True

    @property
    def server_status(self) -> int:
        """``server_status`` bits of the lease request: ``DATA_DISK_ERROR`` (0x1) while the
        disk probe fails."""
        return DATA_DISK_ERROR if self.disk_error is not None else 0

    @property
    def rs_list(self) -> list[str]:
        """RS addresses tried round robin: the list the RS last sent, then our own ones."""
        out = list(self._adopted_rs_list)
        out.extend(a for a in self.settings.rs_list if a not in out)
        return out

    def next_rs_address(self) -> str:
        """The RS to try next: a leader hint or reconnect target first, else round robin."""
        if self._preferred:
            return self._preferred.pop(0)
        candidates = self.rs_list
        addr = candidates[self._rs_index % len(candidates)]
        self._rs_index += 1
        return addr

    def _prefer(self, addr: str) -> None:
        if addr in self._preferred:
            self._preferred.remove(addr)
        self._preferred.insert(0, addr)

    # ------------------------------------------------------------------ lease decisions

    def build_lease_request(self) -> obrpc_pb2.LeaseRequest:
        """The next ``LeaseRequest`` (SPEC.md section 5); every call takes a new ``seq``.

        ``current_server_time`` is ``clock.now_us()``; ``rs_epoch`` the highest epoch
        accepted; ``cluster_id`` the kept identity's or ""; ``server_status`` 0x1 while the
        data disk is failing; ``replicas`` every hosted replica (from memory, no I/O).
        """
        self._seq += 1
        req = obrpc_pb2.LeaseRequest(
            version=LEASE_REQUEST_VERSION,
            zone=self.settings.zone,
            server=self.server,
            sql_port=self.settings.sql_port,
            build_version=self.settings.build_version,
            start_service_time=self.start_service_time,
            current_server_time=self.clock.now_us(),
            server_status=self.server_status,
            rs_epoch=self.highest_epoch,
            cluster_id=self.identity.cluster_id if self.identity else "",
            seq=self._seq,
        )
        req.resource_info.CopyFrom(self.resource_info)
        req.replicas.extend(self.replicas.report())
        return req

    def handle_response(self, resp: obrpc_pb2.LeaseResponse, rs_addr: str) -> bool:
        """Accept or refuse one ``LeaseResponse`` from the RS at ``rs_addr``; True = accepted.

        Refused, in this order: an in-band error (``error.code != 0``; a ``leader_hint``
        becomes the next address to try); ``heartbeat_expire_time <= now``; a ``cluster_id``
        other than the kept identity's (logged at ERROR: a server never joins another
        cluster); ``rs_epoch`` lower than the highest accepted (a deposed RS). Epochs are
        only learnt from accepted responses: a refusal, or an RS of another cluster, must not
        be able to fence our own RS out.

        On acceptance: record the epoch, ``lease_expire_time``, ``server_id``,
        ``rs_server_status`` and the RS list; write the identity file on the first response
        carrying ``server_id > 0`` and a ``cluster_id`` (a failed write refuses); once the
        identity exists and the gRPC server is up, set ``start_service_time = now`` (once per
        process) and ask for the next heartbeat at once. Never raises.
        """
        now = self.clock.now_us()
        err = error_from_proto(resp.error)
        if err is not None:
            return self._refuse_error(err, resp, rs_addr)
        if resp.heartbeat_expire_time <= now:
            return self._refuse(
                rs_addr,
                f"heartbeat_expire_time {resp.heartbeat_expire_time} is not after now {now}",
            )
        if self.identity is not None and resp.cluster_id != self.identity.cluster_id:
            self.log.error(
                "lease from %s refused: that RS serves cluster %r but this server belongs to "
                "cluster %r (server_id %d); it must never join another cluster",
                rs_addr,
                resp.cluster_id,
                self.identity.cluster_id,
                self.identity.server_id,
            )
            self.refused_count += 1
            self.registered = False
            return False
        if resp.rs_epoch < self.highest_epoch:
            return self._refuse(
                rs_addr,
                f"rs_epoch {resp.rs_epoch} is lower than epoch {self.highest_epoch} already seen "
                "(a deposed RS)",
            )
        if self.identity is None and resp.server_id > 0 and resp.cluster_id:
            ident = ClusterIdentity(
                resp.cluster_id, resp.server_id, self.settings.zone, self.server
            )
            try:
                path = write_identity(self.data_dir, ident)
            except (OSError, ValueError) as e:
                self.log.error(
                    "lease from %s refused: cannot write the cluster identity: %s", rs_addr, e
                )
                self.refused_count += 1
                self.registered = False
                return False
            self.identity = ident
            self.log.info(
                "joined cluster %s as server_id %d (identity written to %s)",
                ident.cluster_id,
                ident.server_id,
                path,
            )
        elif (
            self.identity is not None
            and resp.server_id
            and resp.server_id != self.identity.server_id
        ):
            self.log.warning(
                "RS %s calls this server server_id %d, the identity file says %d",
                rs_addr,
                resp.server_id,
                self.identity.server_id,
            )

        self.highest_epoch = max(self.highest_epoch, resp.rs_epoch)
        self.lease_expire_time = resp.lease_expire_time or resp.heartbeat_expire_time
        if resp.server_id > 0:
            self.server_id = resp.server_id
        if resp.rs_server_status != self.rs_server_status:
            self.log.info(
                "RS %s reports this server %s (was %s)",
                rs_addr,
                obrpc_pb2.RsServerStatus.Name(resp.rs_server_status),
                obrpc_pb2.RsServerStatus.Name(self.rs_server_status),
            )
            self.rs_server_status = resp.rs_server_status
        self._adopt_rs_list(resp.rs_list)
        if not self.registered:
            self.log.info(
                "lease granted by %s: server_id %d, rs_epoch %d, lease expires at %d",
                rs_addr,
                self.server_id,
                resp.rs_epoch,
                self.lease_expire_time,
            )
        self.registered = True
        self.accepted_count += 1
        self.last_accepted_rs = rs_addr
        self._lease_lapse_logged = False
        if self.start_service_time == 0 and self.identity is not None and self.serving:
            self.start_service_time = self.clock.now_us()
            self._heartbeat_now = True
            self.log.info("start service at %d", self.start_service_time)
        return True

    def _refuse_error(self, err: ObError, resp: obrpc_pb2.LeaseResponse, rs_addr: str) -> bool:
        self.refused_count += 1
        self.registered = False
        self.last_refusal = err
        self.log.warning("lease refused by %s: %s", rs_addr, err.to_sql_text())
        hint = resp.leader_hint.strip()
        if hint and hint != rs_addr:
            try:
                host, port = parse_host_port(hint)
            except ValueError:
                self.log.warning("ignoring malformed leader_hint %r from %s", hint, rs_addr)
            else:
                self._prefer(f"{host}:{port}")
                self.log.info("trying leader hint %s:%d next", host, port)
        return False

    def _refuse(self, rs_addr: str, why: str) -> bool:
        self.refused_count += 1
        self.registered = False
        self.log.warning("lease response from %s refused: %s", rs_addr, why)
        return False

    def _adopt_rs_list(self, rs_list: Any) -> None:
        adopted: list[str] = []
        for addr in rs_list:
            try:
                host, port = parse_host_port(addr)
            except ValueError:
                continue  # one bad entry must not cost us the others
            norm = f"{host}:{port}"
            if norm not in adopted:
                adopted.append(norm)
        if adopted and adopted != self._adopted_rs_list:
            self.log.info("RS list is now %s", ",".join(adopted))
            self._adopted_rs_list = adopted

    def consume_heartbeat_now(self) -> bool:
        """True once after an event that should be reported without waiting a full interval
        (start of service)."""
        now, self._heartbeat_now = self._heartbeat_now, False
        return now

    def check_server_empty(self) -> obrpc_pb2.CheckServerEmptyResponse:
        """The answer to ``ObserverService.CheckServerEmpty``: empty = no identity file.

        An unreadable identity file counts as not empty (with empty ids)."""
        try:
            ident = load_identity(self.data_dir)
            empty = ident is None
        except IdentityError as e:
            self.log.error("%s", e)
            ident, empty = None, False
        return obrpc_pb2.CheckServerEmptyResponse(
            is_empty=empty,
            zone=self.settings.zone,
            server=self.server,
            cluster_id=ident.cluster_id if ident else "",
            server_id=ident.server_id if ident else 0,
        )

    # ------------------------------------------------------------------ resources / disk

    def set_disk_status(self, reason: str | None) -> None:
        """Record a probe result (None = healthy) and log transitions."""
        if reason is not None and self.disk_error is None:
            self.log.warning("data disk error: %s; reporting DATA_DISK_ERROR", reason)
        elif reason is None and self.disk_error is not None:
            self.log.info("data disk recovered (was: %s)", self.disk_error)
        self.disk_error = reason

    def probe_disk_now(self) -> bool:
        """Run one disk probe in the calling thread; True when healthy (tests, start-up)."""
        try:
            reason = self._disk_probe(self.data_dir)
        except Exception as e:
            reason = f"disk probe raised {describe_exception(e)}"
        self.set_disk_status(reason)
        return reason is None

    async def probe_disk_async(self) -> bool:
        """One disk probe in a daemon thread; a probe slower than ``disk_probe_timeout_us``,
        or one still stuck from last time, counts as a failure. True when healthy."""
        timeout_s = self.disk_probe_timeout_us / 1e6
        pending = self._probe_pending
        if pending is not None and not pending.done():
            self.set_disk_status(
                f"previous disk probe still running after {timeout_s:g}s (hung disk?)"
            )
            return False
        fut = _in_daemon_thread(lambda: self._disk_probe(self.data_dir), "disk-probe")
        self._probe_pending = fut
        done, _ = await asyncio.wait({fut}, timeout=timeout_s)
        if not done:
            self.set_disk_status(f"disk probe did not finish within {timeout_s:g}s (hung disk?)")
            return False
        try:
            reason = fut.result()
        except Exception as e:
            reason = f"disk probe raised {describe_exception(e)}"
        self.set_disk_status(reason)
        return reason is None

    def _collect_resources(self) -> obrpc_pb2.ResourceInfo:
        s = self.settings
        return collect_resource_info(
            self.data_dir, s.log_disk_size, cpu_count=s.cpu_count, memory_limit=s.memory_limit
        )

    def refresh_resources(self) -> None:
        """Refresh ``resource_info`` from psutil in the calling thread (raises ``OSError``);
        ``cpu_count`` / ``memory_limit`` / ``log_disk_size`` settings override capacities."""
        self.resource_info = self._collect_resources()

    async def refresh_resources_async(self) -> bool:
        """Refresh ``resource_info`` in a daemon thread, bounded by ``resource_timeout_us``;
        on failure keep the last values. True when refreshed."""
        pending = self._resource_pending
        if pending is not None and not pending.done():
            self.log.warning("previous resource refresh is still running; skipped")
            return False
        fut = _in_daemon_thread(self._collect_resources, "resource-refresh")
        self._resource_pending = fut
        done, _ = await asyncio.wait({fut}, timeout=self.resource_timeout_us / 1e6)
        if not done:
            self.log.warning("resource refresh did not finish in time; keeping the last values")
            return False
        try:
            self.resource_info = fut.result()
        except Exception as e:
            self.log.warning("resource refresh failed: %s", describe_exception(e))
            return False
        return True

    # ------------------------------------------------------------------ the loops

    def request_stop(self) -> None:
        """Ask :meth:`run` to return (safe to call from the loop's thread at any time)."""
        if self._stop is not None:
            self._stop.set()

    def _stopping(self) -> bool:
        return self._stop is not None and self._stop.is_set()

    async def _sleep(self, seconds: float) -> None:
        """Sleep up to ``seconds``, waking early on stop."""
        if self._stop is None:
            await asyncio.sleep(max(0.0, seconds))
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), max(0.0, seconds))

    async def run(self, stop: asyncio.Event | None = None) -> None:
        """Run until ``stop`` is set (or :meth:`request_stop`): the lease loop plus the
        periodic resource refresh and disk probe, and the replicas' loops. Call
        :meth:`mark_serving` once the gRPC server is up (``observer_agent.service.start_server``
        does). Returns after closing the lease stream and stopping the replicas' loops; never
        raises except ``CancelledError``."""
        self._stop = stop if stop is not None else asyncio.Event()
        self.replicas.start()
        await self.refresh_resources_async()
        await self.probe_disk_async()
        jobs: dict[str, Callable[[], Awaitable[None]]] = {
            "lease loop": self._lease_loop,
            "resource refresh": lambda: self._periodic(
                self.refresh_resources_async, self.settings.resource_refresh_interval
            ),
            "disk probe": lambda: self._periodic(
                self.probe_disk_async, self.settings.disk_probe_interval
            ),
        }
        tasks: dict[asyncio.Future[Any], str] = {
            asyncio.ensure_future(factory()): name for name, factory in jobs.items()
        }
        stop_task: asyncio.Future[Any] = asyncio.ensure_future(self._stop.wait())
        try:
            while not self._stopping():
                done, _ = await asyncio.wait(
                    {stop_task, *tasks}, return_when=asyncio.FIRST_COMPLETED
                )
                for task in done:
                    if task is stop_task:
                        continue
                    # The loops catch everything; if one still ends, restart it rather than
                    # live on without heartbeats.
                    name = tasks.pop(task)
                    exc = task.exception() if not task.cancelled() else None
                    self.log.error("%s ended unexpectedly (%r); restarting it", name, exc)
                    await self._sleep(self.settings.heartbeat_interval / 1e6)
                    tasks[asyncio.ensure_future(jobs[name]())] = name
        finally:
            for task in (stop_task, *tasks):
                task.cancel()
            await asyncio.wait({stop_task, *tasks}, timeout=_CLOSE_TIMEOUT_S)
            await self._close_conn()
            await self.replicas.stop()
            self.registered = False

    async def _periodic(self, job: Callable[[], Awaitable[bool]], interval_us: int) -> None:
        while not self._stopping():
            await self._sleep(interval_us / 1e6)
            if self._stopping():
                return
            try:
                await job()
            except Exception:
                self.log.exception("periodic job failed")

    async def _close_conn(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close()

    async def _lease_loop(self) -> None:
        while not self._stopping():
            try:
                delay_s = await self._lease_round()
            except Exception:
                self.log.exception("unexpected error in the lease loop")
                await self._close_conn()
                self.registered = False
                delay_s = self.settings.heartbeat_interval / 1e6
            await self._sleep(delay_s)

    def _check_lease_lapse(self) -> None:
        if (
            self.lease_expire_time
            and not self._lease_lapse_logged
            and self.clock.now_us() >= self.lease_expire_time
        ):
            self._lease_lapse_logged = True
            self.log.warning("lease expired at %d without renewal", self.lease_expire_time)

    async def _lease_round(self) -> float:
        """Try one RS: register, then renew on the same stream until it fails or refuses.

        Returns the seconds to wait before the next round: ``heartbeat_interval`` after a
        refusal or a failed attempt (the busy loop), a random jitter below it after losing
        a stream that was renewing (then the same RS is tried first).
        """
        self._check_lease_lapse()
        hb_s = self.settings.heartbeat_interval / 1e6
        timeout_s = self.settings.rpc_timeout / 1e6
        addr = self.next_rs_address()
        conn = self._conn
        if conn is not None and (conn.addr != addr or conn.broken):
            await self._close_conn()
            conn = None
        if conn is None:
            conn = self._conn = _LeaseStream(addr)
        loop = asyncio.get_running_loop()
        renewed = False
        while not self._stopping():
            started = loop.time()
            req = self.build_lease_request()
            try:
                resp = await conn.exchange(req, timeout_s)
            except Exception as e:
                await self._close_conn()
                self.registered = False
                if renewed:
                    jitter = self._rng.uniform(0.0, hb_s)
                    self.log.warning(
                        "lease stream to %s lost (%s); reconnecting in %.3fs",
                        addr,
                        describe_exception(e),
                        jitter,
                    )
                    self._prefer(addr)
                    return jitter
                self.log.warning("cannot get a lease from %s: %s", addr, describe_exception(e))
                return hb_s
            if not self.handle_response(resp, addr):
                # The stream stays open: with a single RS the next attempt reuses it.
                return hb_s
            renewed = True
            if self.consume_heartbeat_now():
                continue
            await self._sleep(hb_s - (loop.time() - started))
        return 0.0
