"""RS -> agent heartbeat requests (docs/design/leases.md): ask servers for a lease request now
and feed each answer to the heartbeat intake, as if the agent had sent it.

Used when taking office (the servers not alive yet), after ADD SERVER and CANCEL DELETE SERVER,
and by the tenant layer when it needs fresh replica reports.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

from obcommon.errors import ObError
from obcommon.proto import obrpc_pb2
from rootservice.ha.store import MetaStore
from rootservice.servers.agent_client import AgentClient

log = logging.getLogger(__name__)


class LeaseIntake(Protocol):
    """What handles a lease request (:class:`rootservice.servers.heartbeat.HeartbeatIntake`)."""

    def receive_hb(self, req: obrpc_pb2.LeaseRequest) -> obrpc_pb2.LeaseResponse:
        """Accept or refuse (``ObError``) one lease request."""
        ...


class HeartbeatRequester:
    """``request_heartbeats(servers) -> int``.

    ``intake`` returns the heartbeat intake. It is a provider rather than the intake itself
    because the requester is needed by the objects the intake is built from (the tenant
    layer's replica sink and the admin operations both request heartbeats, and the intake
    reports replicas to the one and runs the data-disk STOP through the other); it is called
    once per request, never at construction.
    """

    def __init__(
        self, agents: AgentClient, store: MetaStore, intake: Callable[[], LeaseIntake]
    ) -> None:
        """Ask through ``agents`` with the epoch of ``store``."""
        self.agents = agents
        self.store = store
        self.intake = intake

    def request_heartbeats(
        self,
        servers: Iterable[str],
        parallel: int = 32,
        *,
        unless: Callable[[str], bool] | None = None,
    ) -> int:
        """Ask each server for a heartbeat and feed the answer to receive_hb
        (docs/design/leases.md, RS -> agent), ``parallel`` at a time so that taking office with thousands
        of silent servers takes seconds, not ``rpc_timeout`` each. A server for which
        ``unless(key)`` is true when its turn comes is not asked (take office: it came back
        by itself meanwhile). Failures are only a warning: one summary line. Returns how
        many answered."""
        keys = list(servers)
        if not keys:
            return 0
        failed: list[str] = []
        skipped: list[str] = []
        intake = self.intake()

        def one(key: str) -> bool:
            if unless is not None and unless(key):
                skipped.append(key)
                return False
            try:
                req = self.agents.request_heartbeat(key, self.store.epoch)
                if req.server != key:
                    # Whoever answers at X's address speaks for X only.
                    raise ObError(
                        "OB_INVALID_ARGUMENT",
                        f"heartbeat requested from '{key}' answered for '{req.server[:64]}'",
                    )
                intake.receive_hb(req)
                return True
            except ObError as e:
                failed.append(f"{key} ({e.name})")
                return False

        with ThreadPoolExecutor(
            max_workers=min(parallel, len(keys)), thread_name_prefix="rs-reqhb"
        ) as pool:
            ok = sum(pool.map(one, keys))
        if skipped:
            log.info(
                "request heartbeat: %d of %d servers were back before their turn",
                len(skipped),
                len(keys),
            )
        if failed:
            more = f" and {len(failed) - 5} more" if len(failed) > 5 else ""
            log.warning(
                "request heartbeat failed for %d of %d servers: %s%s",
                len(failed),
                len(keys),
                ", ".join(failed[:5]),
                more,
            )
        return ok
