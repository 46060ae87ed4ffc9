"""CPU per GiB of the bulk copy path's transport over mutual TLS: one
process serves a file over HTTPS, another GETs it, both with node certificates of one CA
(:mod:`tests.bench.bench_pki`) and the agents' TLS contexts
(:class:`obcommon.security.tls.TransportSecurity`); each prints its CPU seconds.

Modes (the same on both ends):

- ``asyncio``: aiohttp on both ends as the product's bulk path was before (the server
  writes ``pread`` pieces of 1 MiB to a ``StreamResponse``, the client ``readexactly``
  1 MiB pieces).
- ``thread``: blocking ``ssl`` sockets in a thread (the server ``sendall`` of 1 MiB
  ``pread`` pieces after a minimal HTTP/1.1 head, the client ``recv_into`` a preallocated
  buffer through ``http.client``), the loop in C.

Run: ``python -m tests.bench.tls_bulk_micro --mode thread --size 512M`` (both ends are
started by this script; nothing is written but a temp file and certificates under
``--dir``). Nothing here is asserted by a test.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import os
import resource
import socket
import subprocess
import sys
import time
import zlib
from pathlib import Path

from obcommon.security.certs import Role
from obcommon.security.tls import TransportSecurity
from tests.bench.bench_pki import HOST, BenchPki

PIECE = 1 << 20


def _cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _security(d: Path) -> TransportSecurity:
    return TransportSecurity.for_dir(d, Role.NODE)


async def _serve_asyncio(sec: TransportSecurity, port: int, path: Path) -> None:
    from aiohttp import web

    size = path.stat().st_size

    async def handler(request: web.Request) -> web.StreamResponse:
        fd = os.open(path, os.O_RDONLY)
        try:
            resp = web.StreamResponse()
            resp.content_length = size
            await resp.prepare(request)
            pos = 0
            while pos < size:
                data = await asyncio.to_thread(os.pread, fd, PIECE, pos)
                await resp.write(data)
                pos += len(data)
            await resp.write_eof()
            return resp
        finally:
            os.close(fd)
            asyncio.get_running_loop().call_later(0.5, done.set)

    done = asyncio.Event()
    app = web.Application()
    app.router.add_get("/data", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, HOST, port, ssl_context=sec.server_ssl_context())
    await site.start()
    print("ready", flush=True)
    await done.wait()
    await runner.cleanup()


def _serve_thread(sec: TransportSecurity, port: int, path: Path) -> None:
    size = path.stat().st_size
    ctx = sec.server_ssl_context()
    assert ctx is not None
    lsock = socket.create_server((HOST, port))
    print("ready", flush=True)
    conn, _ = lsock.accept()
    with ctx.wrap_socket(conn, server_side=True) as s:
        f = s.makefile("rb")
        while f.readline() not in (b"\r\n", b"\n", b""):
            pass
        s.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
            + f"Content-Length: {size}\r\n\r\n".encode()
        )
        fd = os.open(path, os.O_RDONLY)
        try:
            pos = 0
            while pos < size:
                data = os.pread(fd, PIECE, pos)
                s.sendall(data)
                pos += len(data)
        finally:
            os.close(fd)
        f.close()
    lsock.close()


async def _get_asyncio(sec: TransportSecurity, port: int) -> tuple[int, int]:
    import aiohttp

    ctx = sec.client_ssl_context()
    crc = n = 0
    async with (
        aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=ctx), read_bufsize=4 << 20
        ) as session,
        session.get(f"https://{HOST}:{port}/data") as resp,
    ):
        left = resp.content_length or 0
        while left:
            data = await resp.content.readexactly(min(PIECE, left))
            crc = zlib.crc32(data, crc)
            n += len(data)
            left -= len(data)
    return n, crc


def _get_thread(sec: TransportSecurity, port: int) -> tuple[int, int]:
    ctx = sec.client_ssl_context()
    assert ctx is not None
    conn = http.client.HTTPSConnection(HOST, port, context=ctx)
    conn.request("GET", "/data")
    resp = conn.getresponse()
    left = int(resp.headers["Content-Length"])
    buf = bytearray(PIECE)
    view = memoryview(buf)
    crc = n = 0
    while left:
        got = resp.readinto(view[: min(PIECE, left)])
        if not got:
            break
        crc = zlib.crc32(view[:got], crc)
        n += got
        left -= got
    conn.close()
    return n, crc


def _child(args: argparse.Namespace) -> None:
    import aiohttp.web  # noqa: F401 - imported before the CPU baseline in both modes

    sec = _security(Path(args.certs))
    sec.server_ssl_context()
    base = _cpu_s()
    path = Path(args.file)
    if args.role == "serve":
        if args.mode == "asyncio":
            asyncio.run(_serve_asyncio(sec, args.port, path))
        else:
            _serve_thread(sec, args.port, path)
    else:
        t0 = time.perf_counter()
        if args.mode == "asyncio":
            n, crc = asyncio.run(_get_asyncio(sec, args.port))
        else:
            n, crc = _get_thread(sec, args.port)
        print(f"got {n} bytes crc {crc} in {time.perf_counter() - t0:.2f} s", flush=True)
    print(f"cpu {args.role} {_cpu_s() - base:.3f}", flush=True)


def _parse_size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


def main() -> None:
    """Run both ends of one mode and print CPU seconds per GiB of each."""
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=("asyncio", "thread"), default="thread")
    p.add_argument("--client-mode", choices=("asyncio", "thread"), help="default: --mode")
    p.add_argument("--size", default="512M")
    p.add_argument("--dir", default=".bench/tls-micro")
    p.add_argument("--port", type=int, default=29431)
    p.add_argument("--role", choices=("serve", "get"))
    p.add_argument("--certs")
    p.add_argument("--file")
    args = p.parse_args()
    if args.role:
        _child(args)
        return
    root = Path(args.dir)
    size = _parse_size(args.size)
    data = root / "data.bin"
    if not data.exists() or data.stat().st_size != size:
        root.mkdir(parents=True, exist_ok=True)
        with open(data, "wb") as f:
            for _ in range(size // PIECE):
                f.write(os.urandom(PIECE))
    pki_root = root / "pki"
    if not (pki_root / "ca.key").exists():
        pki = BenchPki.create(pki_root)
    else:
        pki = BenchPki(pki_root, {args.port, args.port + 1})
    pki.add_nodes(range(args.port, args.port + 2))
    common = [sys.executable, "-m", "tests.bench.tls_bulk_micro"]
    client_mode = args.client_mode or args.mode
    server = subprocess.Popen(
        [
            *common,
            f"--mode={args.mode}",
            "--role=serve",
            f"--port={args.port}",
            f"--certs={pki.nodes_dir / str(args.port)}",
            f"--file={data}",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert server.stdout is not None
    server.stdout.readline()
    client = subprocess.run(
        [
            *common,
            f"--mode={client_mode}",
            "--role=get",
            f"--port={args.port}",
            f"--certs={pki.nodes_dir / str(args.port + 1)}",
            f"--file={data}",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    out, _ = server.communicate(timeout=60)
    gib = size / (1 << 30)
    cpu = {}
    for line in (client.stdout + out).splitlines():
        print(line)
        if line.startswith("cpu "):
            _, role, secs = line.split()
            cpu[role] = float(secs)
    print(
        f"server {args.mode}, client {client_mode}: CPU s per GiB: server {cpu['serve'] / gib:.2f}, client "
        f"{cpu['get'] / gib:.2f}, both {(cpu['serve'] + cpu['get']) / gib:.2f} "
        f"(load {os.getloadavg()[0]:.1f})"
    )


if __name__ == "__main__":
    main()
