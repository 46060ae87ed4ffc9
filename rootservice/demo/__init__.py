"""``make demo``: the main job on the embedded default (SQLite), with real processes.

Starts one RS and four observer agents in three zones on 127.0.0.1, bootstraps three of
them, adds the fourth (which reports only 1G of memory), and shows the tables after each
step: a unit config, a resource pool over the three zones and a tenant with three log
streams whose replicas the agents really host (``DBA_OB_UNITS``, ``DBA_OB_LS_LOCATIONS``);
STOP SERVER moving every leader off the stopped server (the statement returns at
``leader_cnt`` 0) and START SERVER letting them come back to the primary zone; an agent
killed (INACTIVE after ``lease_time``, lowered to 3 s) and restarted (ACTIVE); DELETE SERVER
refused for lack of room (its unit has nowhere to go) and DELETE SERVER of the empty fourth
server (it leaves ``__all_server``); then the whole DELETE SERVER life cycle: a
fifth server joins, EXPLAIN ALTER SYSTEM DELETE SERVER shows what would move (a dry run),
and DELETE SERVER empties agent1 onto it (the RS's Spark plans move the
unit, the agents copy the replicas, ``obadmin --wait-job`` shows the progress, the server
leaves ``__all_server``); a second DELETE cancelled mid-way (the unit stays, the partial
copies are dropped); an agent killed past ``server_permanent_offline_time`` (lowered to 8 s)
whose replicas are rebuilt on another server of its zone and whose lost rows are cleaned; a
few refused statements with their errors, and the event history. Every statement goes through ``obadmin``. Every process it starts is stopped
at the end; exit code 0 on success.

It runs secure, as production does: ``rootservice cert create-*`` writes a CA,
the RS's, one node certificate per agent and the root client's into ``ROOT/certs``; every
gRPC channel is mutual TLS. A user with only the SELECT privilege is refused ALTER SYSTEM
(1227), a wrong password is refused (1045), and an agent's certificate cannot renew
another server's lease.
"""

from __future__ import annotations

import shutil
import time

from rootservice.demo.harness import LEASE, ROOT, Demo, free_port, step
from rootservice.demo.scenario import run

__all__ = ["LEASE", "ROOT", "Demo", "free_port", "main", "run", "step"]


def main() -> int:
    """Entry point of ``make demo``; returns 0 (failures raise ``SystemExit``).

    Wipes and recreates ``ROOT``, runs the demo and always stops every process it started.
    """
    if ROOT.exists():
        shutil.rmtree(ROOT)
    ROOT.mkdir(parents=True)
    d = Demo()
    try:
        run(d)
    finally:
        d.stop_all()
    print(f"demo finished in {time.monotonic() - d.started:.1f} s; logs in {ROOT}")
    return 0
