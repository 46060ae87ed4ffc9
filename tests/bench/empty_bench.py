"""Emptying-speed benchmark (``make bench-empty``): a DELETE SERVER of a
server holding ``--size`` bytes of replicas (default 2 GiB in 4 log streams of 512 MiB),
beside ``cp -r`` of the same files on the same disk in the same run.

1. Starts a real RS (SQLite, or ``--db postgresql`` on tests/support/pgserver.py) with
   ``balancer_planner = 'local'`` (pandas: Spark is measured by ``make bench-spark``) and 4 real
   agents in 3 zones (z1 has two), all data directories under ``--dir`` (one disk), copy
   throttling off (``migration_max_bytes_per_second`` unset = 0).
2. Creates a tenant with ``--ls`` log streams; every agent generates its replicas' data files
   (pseudo-random bytes, incompressible, ``--size / --ls`` each) and the bench waits until
   they are all in service.
3. ``cp``: ``sync``, then the page cache of every replica data file is dropped with
   ``posix_fadvise(DONTNEED)`` (clean pages only, hence the ``sync``; ``/proc/sys/vm/
   drop_caches`` needs root and drops everything, so it is not used), then ``cp -r`` of the
   z1 server's ``replicas/`` directory to a fresh directory, then ``sync`` (timed apart: a
   copy fsyncs its file, so ``cp + sync`` is the fair comparison).
4. The job: the same cache drop, then ``ALTER SYSTEM DELETE SERVER`` of the z1 server that
   holds the replicas; polled every 100 ms until its job is SUCCESS and the server has left
   ``__all_server``. Per copy, from the destination agent's log (microsecond UTC stamps):
   start (``building it by copy``), data in place (``bytes copied``) and in service
   (``built by copy``); bytes/s = data size / (data in place - the copy's slot taken,
   ``copying its data``: a queued copy waits before it).
5. Checks that the destination's replicas have the source's checksums.

Prints a markdown table and writes ``.bench/empty.json``. Wall-clock seconds; nothing is
asserted on time (exit status 1 only when the job fails or the data differ).

Usage::

    .venv/bin/python -m tests.bench.empty_bench                  # 2 GiB in 4 LS
    .venv/bin/python -m tests.bench.empty_bench --quick          # 200 MiB
    .venv/bin/python -m tests.bench.empty_bench --size 1G --ls 2 --rs-flag balancer_interval=1s
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from obcommon.sizes import format_size, parse_size
from sql.client import execute
from tests.integration.test_tenants import RS_FLAGS, TenantCluster, replica_report
from tests.support import pki
from tests.support.cluster import ProcSet, wait_until

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / ".bench" / "empty.json"
POLL_S = 0.1

# The product's defaults for the intervals that pace a DELETE SERVER (rootservice/config.py),
# stated so the harness's test values (1 s) do not flatter the job; --rs-flag overrides.
PACING = {"balancer_interval": "10s", "empty_server_check_interval": "10s"}

_STAMP = r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z)"
_LS = r"replica tenant (\d+) ls (\d+)"
START_RE = re.compile(_STAMP + r" .*" + _LS + r": (?:building it by copy from|copy restarted)")
DATA_RE = re.compile(
    _STAMP + r" .*" + _LS + r": (\d+) bytes copied from \S+(?: over (https?|the))?"
)
MOVING_RE = re.compile(_STAMP + r" .*" + _LS + r": copying its data from")
DONE_RE = re.compile(_STAMP + r" .*" + _LS + r" ?: built by copy")


def _stamp(s: str) -> float:
    return dt.datetime.strptime(s, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.UTC).timestamp()


def drop_cache(files: list[Path]) -> None:
    """``sync``, then drop the (now clean) cached pages of ``files``: a cold-ish read."""
    os.sync()
    for f in files:
        fd = os.open(f, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds ``pid`` has used so far (``/proc/PID/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def time_cp(src: Path, dest: Path, files: list[Path]) -> dict[str, float]:
    """``cp -r src dest`` from a dropped cache, then ``sync``; seconds of each."""
    drop_cache(files)
    t0 = time.perf_counter()
    subprocess.run(["cp", "-r", str(src), str(dest)], check=True)
    t1 = time.perf_counter()
    os.sync()
    t2 = time.perf_counter()
    return {"cp_s": t1 - t0, "sync_s": t2 - t1, "cp_sync_s": t2 - t0}


def copies_from_log(text: str, since: float) -> list[dict[str, Any]]:
    """The copies a destination agent's log shows after ``since`` (epoch seconds): per LS
    ``start``, ``moving`` (got a copy slot), ``data`` (file in place), ``done`` (in service)
    as epoch seconds, ``bytes``,
    ``over`` (``https`` / ``http``: the bulk path; ``stream``: gRPC ``FetchData``)."""
    out: dict[tuple[int, int], dict[str, Any]] = {}
    for line in text.splitlines():
        for kind, rx in (
            ("start", START_RE),
            ("moving", MOVING_RE),
            ("data", DATA_RE),
            ("done", DONE_RE),
        ):
            m = rx.search(line)
            if not m or _stamp(m.group(1)) < since:
                continue
            key = (int(m.group(2)), int(m.group(3)))
            c = out.setdefault(key, {"tenant_id": key[0], "ls_id": key[1]})
            if kind == "start":
                c.clear()  # a restarted copy starts over
                c.update(tenant_id=key[0], ls_id=key[1])
            c[kind] = _stamp(m.group(1))
            if kind == "data":
                c["bytes"] = int(m.group(4))
                # The data path: https / http (the bulk path) or the gRPC stream.
                c["over"] = {"the": "stream", None: "stream"}.get(m.group(5), m.group(5))
    return [out[k] for k in sorted(out)]


@contextlib.contextmanager
def database(kind: str, tmp: Path) -> Iterator[str]:
    """A database URL for the RS: a SQLite file in ``tmp`` or a private PostgreSQL."""
    if kind == "sqlite":
        yield f"sqlite:///{tmp}/rs.db"
        return
    from tests.support.pgserver import PgServer  # noqa: PLC0415 - only for --db postgresql

    pg = PgServer()
    try:
        pg.create_database("empty_bench")
        yield pg.url("empty_bench")
    finally:
        pg.stop()


def run(args: argparse.Namespace) -> dict[str, Any]:
    """One run (see the module doc); returns the figures."""
    total = parse_size(args.size)
    per_ls = total // args.ls
    base = Path(args.dir).resolve() if args.dir else None
    if base is not None:
        base.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="ob-empty-bench-", dir=base))
    procs = ProcSet(tmp / "logs")
    result: dict[str, Any] = {"size_bytes": per_ls * args.ls, "ls": args.ls, "per_ls": per_ls}
    try:
        with database(args.db, tmp) as db_url:
            c = TenantCluster(procs, tmp, db_url)
            c.extra_flags = {"replica_size": format_size(per_ls)}
            for kv in args.agent_flag:
                k, _, v = kv.partition("=")
                c.extra_flags[k] = v
            flags: dict[str, Any] = {
                **RS_FLAGS,
                **PACING,
                "balancer_planner": "local",
                "tenant_create_timeout": "300s",
                # Room for an agent writing its data files on a loaded machine: the harness's
                # 1 s ApplyReplicas deadline and 2 s leases are for small replicas.
                "rpc_timeout": "30s",
                "lease_time": "10s",
            }
            for kv in args.rs_flag:
                k, _, v = kv.partition("=")
                flags[k] = v
            result["rs_flags"] = {
                k: flags[k] for k in (*PACING, *(kv.split("=")[0] for kv in args.rs_flag))
            }
            result["agent_flags"] = dict(kv.partition("=")[::2] for kv in args.agent_flag)
            c.start_rs(**flags)
            a1, _a2, _a3 = c.bootstrap()
            spare = c.start_agent("z1")
            c.ok(f"ALTER SYSTEM ADD SERVER '{spare}' ZONE 'z1'")
            wait_until(lambda: c.statuses().get(spare) == "ACTIVE", 30, message="spare ACTIVE")
            t = time.perf_counter()
            # make_tenant's statements, the last one with room for the agents to write their
            # data files (the harness's client gives a statement 60 s).
            c.ok("CREATE RESOURCE UNIT u1 MAX_CPU 1, MEMORY_SIZE '2G', LOG_DISK_SIZE '4G'")
            c.ok("CREATE RESOURCE POOL p1 UNIT 'u1', UNIT_NUM 1, ZONE_LIST ('z1', 'z2', 'z3')")
            resp = execute(
                [c.rs_addr],
                f"CREATE TENANT t1 RESOURCE_POOL_LIST ('p1'), PRIMARY_ZONE 'z1', LS_COUNT {args.ls}",
                timeout_s=900,
                credentials=pki.credentials(),
            )
            if resp.error.code and resp.error.name != "OB_TIMEOUT":
                raise SystemExit(f"CREATE TENANT: {resp.error.name} {resp.error.message}")
            host = {
                z: f"{ip}:{port}"
                for z, ip, port in c.ok("SELECT zone, svr_ip, svr_port FROM DBA_OB_UNITS")
            }
            gone = host["z1"]
            target = spare if gone != spare else a1
            keys = [(1002, 1000 + i) for i in range(1, args.ls + 1)]

            def all_in_service() -> bool:
                for s in host.values():
                    rep = replica_report(s)
                    if any(k not in rep or not rep[k].in_service for k in keys):
                        return False
                return True

            wait_until(all_in_service, 300, 0.5, message="replicas in service")
            result["generate_s"] = time.perf_counter() - t
            checksums = {k: r.data_checksum for k, r in replica_report(gone).items()}
            data_files = sorted(
                p for s in host.values() for p in (c.data_dir(s) / "replicas").glob("*/data")
            )
            print(
                f"{len(data_files)} data files of {format_size(per_ls)} generated in "
                f"{result['generate_s']:.1f} s; deleting {gone}, destination {target}",
                flush=True,
            )

            cp_dest = tmp / "cp-copy"
            result["cp"] = time_cp(c.data_dir(gone) / "replicas", cp_dest, data_files)
            shutil.rmtree(cp_dest)
            os.sync()

            drop_cache(data_files)
            spies = [
                subprocess.Popen(
                    [
                        args.py_spy,
                        "record",
                        "--pid",
                        str(proc.pid),
                        "--rate",
                        "200",
                        "--format",
                        "raw",
                        "--nonblocking",
                        "-o",
                        str(Path(args.profile) / f"{name}.txt"),
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )  # fmt: skip
                for name, proc in (
                    [("target", c.agents[target])]
                    + [(f"member-{s.rsplit(':', 1)[1]}", c.agents[s]) for s in host.values()]
                    if args.profile
                    else []
                )
            ]
            # CPU seconds of the RS and the agents during the job: unlike wall time, not
            # inflated by other load on the machine.
            who = {"rs": c.rs, "source": c.agents[gone], "destination": c.agents[target]}
            cpu0 = {k: cpu_seconds(p.pid) for k, p in who.items()}
            since = time.time()
            t0 = time.perf_counter()
            c.ok(f"ALTER SYSTEM DELETE SERVER '{gone}'")
            port = gone.rsplit(":", 1)[1]
            marks: dict[str, float] = {"statement_s": time.perf_counter() - t0}
            deadline = t0 + args.timeout
            while time.perf_counter() < deadline:
                now = time.perf_counter() - t0
                if "success_s" not in marks:
                    rows = c.ok(
                        "SELECT job_status FROM DBA_OB_ROOTSERVICE_JOBS WHERE svr_port = "
                        f"{port} ORDER BY job_id DESC"
                    )
                    if rows and rows[0][0] == "SUCCESS":
                        marks["success_s"] = now
                    elif rows and rows[0][0] not in ("INPROGRESS",):
                        raise SystemExit(f"job ended {rows[0][0]}")
                if "gone_s" not in marks and gone not in c.statuses():
                    marks["gone_s"] = now
                if "success_s" in marks and "gone_s" in marks:
                    break
                time.sleep(POLL_S)
            else:
                raise SystemExit(f"the job did not end within {args.timeout} s")
            result["job"] = marks
            result["cpu_s"] = {k: cpu_seconds(p.pid) - cpu0[k] for k, p in who.items()}
            for spy in spies:
                spy.send_signal(2)  # SIGINT: py-spy writes its profile and exits
                spy.wait(30)
            copies = copies_from_log(c.agents[target].log_text(), since)
            for cp in copies:
                cp["start_s"] = cp["start"] - since
                # From the moment it got a copy slot (queued before that), when logged.
                cp["data_s"] = cp["data"] - cp.get("moving", cp["start"])
                cp["done_s"] = cp["done"] - since
                cp["bytes_per_s"] = cp["bytes"] / cp["data_s"]
            result["copies"] = copies
            after = replica_report(target)
            result["checksums_ok"] = all(after[k].data_checksum == checksums[k] for k in keys)
    finally:
        errors = procs.stop_all()
        if errors:
            print("stop errors:", errors, file=sys.stderr)
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    return result


def report(r: dict[str, Any]) -> str:
    """The markdown table of one run."""
    size = r["size_bytes"]
    mib = 1 << 20
    job_s = max(r["job"]["success_s"], r["job"]["gone_s"])
    cp = r["cp"]
    first = min(c["start"] for c in r["copies"])
    last = max(c["data"] for c in r["copies"])
    lines = [
        f"DELETE SERVER of {format_size(size)} in {r['ls']} LS ({format_size(r['per_ls'])} each); "
        f"RS flags {r['rs_flags']}, agent flags {r.get('agent_flags') or {}}",
        "",
        "| what | seconds | MiB/s |",
        "| --- | ---: | ---: |",
        f"| cp -r (cold-ish) | {cp['cp_s']:.2f} | {size / mib / cp['cp_s']:.0f} |",
        f"| sync after cp | {cp['sync_s']:.2f} | |",
        f"| cp -r + sync | {cp['cp_sync_s']:.2f} | {size / mib / cp['cp_sync_s']:.0f} |",
        f"| job: statement to SUCCESS | {r['job']['success_s']:.2f} | "
        f"{size / mib / r['job']['success_s']:.0f} |",
        f"| job: statement to server gone | {r['job']['gone_s']:.2f} | "
        f"{size / mib / r['job']['gone_s']:.0f} |",
        f"| copies: first start to last data in place | {last - first:.2f} | "
        f"{size / mib / (last - first):.0f} |",
    ]
    for c in r["copies"]:
        lines.append(
            f"| copy of LS {c['ls_id']} over {c.get('over', '?')} (data phase; started at +{c['start_s']:.2f} s, in "
            f"service at +{c['done_s']:.2f} s) | {c['data_s']:.2f} | "
            f"{c['bytes_per_s'] / mib:.0f} |"
        )
    lines += [
        "",
        "CPU seconds during the job: "
        + ", ".join(f"{k} {v:.1f}" for k, v in (r.get("cpu_s") or {}).items()),
        f"job / (cp + sync) = {job_s / cp['cp_sync_s']:.2f}x; checksums "
        f"{'equal' if r['checksums_ok'] else 'DIFFER'}",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """The command line (see the module doc)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", default="2G", help="replica bytes on the server (default 2G)")
    p.add_argument("--quick", action="store_true", help="--size 200M")
    p.add_argument("--ls", type=int, default=4, help="log streams (default 4)")
    p.add_argument("--db", choices=("sqlite", "postgresql"), default="sqlite")
    p.add_argument("--dir", default=str(ROOT / ".bench"), help="where the data dirs go")
    p.add_argument("--rs-flag", action="append", default=[], help="k=v, repeatable")
    p.add_argument(
        "--agent-flag", action="append", default=[], help="k=v for every agent, repeatable"
    )
    p.add_argument("--timeout", type=float, default=900.0, help="seconds for the job")
    p.add_argument("--keep", action="store_true", help="keep the run's directory")
    p.add_argument("--out", default=str(OUT))
    p.add_argument("--profile", help="py-spy the agents during the job into this directory")
    p.add_argument("--py-spy", default=str(Path(sys.executable).parent / "py-spy"))
    args = p.parse_args(argv)
    # SIGTERM as an exception, so that the processes started are stopped (finally).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.quick:
        args.size = "200M"
    r = run(args)
    print(report(r), flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(r, indent=2) + "\n")
    return 0 if r["checksums_ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
