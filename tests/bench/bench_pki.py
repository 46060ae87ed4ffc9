"""The benchmark's certificates ("Benchmark"): one CA per ``make bench`` run, a
node certificate per simulated agent, and per server under test its ``rs.crt`` plus the
``client.root.crt`` the benchmark reads ``GetMetrics`` with. Everything is written by
:mod:`obcommon.security.certs` (ECDSA P-256, about 1 ms a certificate); nothing here does
crypto itself.

Layout under the run's ``root`` directory (the loadgen's ``--node-certs`` is ``root/nodes``)::

    root/ca.key                    the CA's private key (never in a certificates directory)
    root/nodes/ca.crt              the CA certificate
    root/nodes/<port>/node.crt     agent at 127.0.0.1:<port> (CN and SAN 127.0.0.1:<port>)
    root/nodes/<port>/node.key
    root/nodes/<port>/ca.crt       a hard link: certs.create_cert signs with DIR/ca.crt
    <server dir>/ca.crt, rs.crt, rs.key, client.root.crt, client.root.key
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from obcommon.security import certs

HOST = "127.0.0.1"
#: Long enough for any run; the validity window is backdated by certs.BACKDATE_S.
LIFETIME_S = 7 * 86400


@dataclass
class BenchPki:
    """The CA of one benchmark run and the node certificates written so far.

    ``root``: the run's PKI directory; ``nodes_dir``: what the load generators get as
    ``--node-certs``; ``ports``: the agent ports that have a node certificate.
    """

    root: Path
    ports: set[int]

    @property
    def ca_key(self) -> Path:
        """The CA's private key (PEM, mode 0600)."""
        return self.root / "ca.key"

    @property
    def nodes_dir(self) -> Path:
        """``ca.crt`` and one ``<port>/`` directory per agent."""
        return self.root / "nodes"

    @classmethod
    def create(cls, root: Path) -> BenchPki:
        """A fresh CA in ``root`` (created; must not hold a CA yet: ``certs.CertError``)."""
        now = int(time.time())
        root.mkdir(parents=True, exist_ok=True)
        certs.create_ca(
            root / "nodes", root / "ca.key", certs.Validity.starting(now, LIFETIME_S * 2)
        )
        return cls(root, set())

    def add_nodes(self, ports: range) -> float:
        """Write a node certificate for every port in ``ports`` that has none yet (CN
        ``127.0.0.1:<port>``); returns the seconds it took."""
        t0 = time.perf_counter()
        validity = certs.Validity.starting(int(time.time()), LIFETIME_S)
        ca = self.nodes_dir / certs.CA_CERT
        for port in ports:
            if port in self.ports:
                continue
            d = self.nodes_dir / str(port)
            d.mkdir(parents=True, exist_ok=True)
            link = d / certs.CA_CERT
            if not link.exists():
                os.link(ca, link)
            certs.create_cert(d, self.ca_key, certs.Role.NODE, f"{HOST}:{port}", validity)
            self.ports.add(port)
        return time.perf_counter() - t0

    def server_dir(self, dest: Path, addr: str) -> Path:
        """A certificates directory for a server under test at ``addr`` (``ip:port``):
        ``ca.crt``, ``rs.crt`` / ``rs.key`` for ``addr`` and ``client.root.crt`` / ``.key``
        (the benchmark's own admin identity). Returns ``dest``."""
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(self.nodes_dir / certs.CA_CERT, dest / certs.CA_CERT)
        validity = certs.Validity.starting(int(time.time()), LIFETIME_S)
        certs.create_cert(dest, self.ca_key, certs.Role.RS, addr, validity, overwrite=True)
        certs.create_cert(dest, self.ca_key, certs.Role.CLIENT, "root", validity, overwrite=True)
        return dest
