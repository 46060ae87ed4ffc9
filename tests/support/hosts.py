"""A cluster of hosts on one machine: every process in its own network namespace with its own
address, and the faults a data centre's network has (a host cut off, a one-way cut, a lossy
link), applied and healed with nftables.

:class:`Network` makes a Linux bridge in the test's own namespace with the first address of a
private /24 that no interface here uses (10.213.x.0/24: the test process is the "controller"
at ``.1`` and reaches every host through the bridge, as Jepsen's control node does), and one
namespace per :class:`Host` joined to the bridge by a veth pair, at ``.10``, ``.11``, ...
Each host's namespace has an nftables table ``obfault`` whose ``input`` chain is where the
faults go: *A's packets to B dropped* is a rule in B's input chain (``ip saddr A drop``), so
A sees silence, as on a real network, and never a local error (a drop in A's own output hook
would fail its ``send`` with EPERM at once, which no network does).

Only the test's own addresses are ever named in a rule, and the controller's address never:
the test keeps watching every host through any fault. Everything is removed when the network
is closed, also on failure; :func:`sweep_stale` removes what a killed test run left (its
record in :data:`STATE_DIR` names the pid that made it).

Needs root (namespaces, the bridge) and ``nft`` (Debian ``nftables``, installed by
``make setup``): :func:`unavailable` says why not, for a skip or a failure.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import random
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

NFT = shutil.which("nft") or "/usr/sbin/nft"
IP = shutil.which("ip") or "/usr/sbin/ip"
#: Where each network records what it made (bridge, namespaces, pid), for :func:`sweep_stale`.
STATE_DIR = Path("/run/ob-test-hosts")
#: The /24 networks are taken from 10.213.0.0/16.
_PREFIX = "10.213"
_lock = threading.Lock()


def unavailable() -> str | None:
    """Why this machine cannot run hosts in namespaces (not root, no ``ip``, no ``nft``), or
    None when it can."""
    if os.geteuid() != 0:
        return "network namespaces need root (run the suite as root, as CI does)"
    if not Path(IP).exists():
        return "no `ip` command (Debian iproute2)"
    if not Path(NFT).exists():
        return "no `nft` command: install Debian's nftables (make setup does, as root)"
    return None


def _run(args: Sequence[str], stdin: str | None = None) -> str:
    """Run a command; raises ``RuntimeError`` with its output when it fails."""
    proc = subprocess.run(
        list(args), input=stdin, capture_output=True, text=True, timeout=30, check=False
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: exit {proc.returncode}: {proc.stderr.strip()}")
    return proc.stdout


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_stale() -> list[str]:
    """Remove the bridges and namespaces of networks whose test process is gone; returns
    their names."""
    removed: list[str] = []
    if not STATE_DIR.is_dir():
        return removed
    for rec in STATE_DIR.glob("*.json"):
        try:
            state = json.loads(rec.read_text())
        except (OSError, ValueError):
            continue
        if _pid_alive(int(state.get("pid", 0))):
            continue
        for ns in state.get("namespaces", []):
            with contextlib.suppress(RuntimeError):
                _run([IP, "netns", "del", ns])
                removed.append(ns)
        with contextlib.suppress(RuntimeError):
            _run([IP, "link", "del", state["bridge"]])
            removed.append(state["bridge"])
        rec.unlink(missing_ok=True)
    return removed


def _used_subnets() -> set[str]:
    """The 10.213.x.0/24 networks some interface here already has an address in."""
    out = _run([IP, "-o", "-4", "addr", "show"])
    used = set()
    for line in out.splitlines():
        parts = line.split()
        if "inet" in parts:
            net = ipaddress.ip_interface(parts[parts.index("inet") + 1]).network
            used.add(str(net))
    return used


@dataclass
class FaultRecord:
    """One fault applied or healed: ``at_us`` (wall-clock microseconds since the epoch),
    ``what`` (e.g. ``"cut rs -> a1"``, ``"heal"``) and the rules it set."""

    at_us: int
    what: str
    rules: list[str] = field(default_factory=list)


@dataclass
class Host:
    """One host: its namespace ``ns``, its address ``ip`` on the network and its ``name``."""

    name: str
    ns: str
    ip: str
    veth: str

    def cmd(self, args: Sequence[str]) -> list[str]:
        """``args`` run inside this host's namespace (``ip netns exec``: the command itself
        becomes the process, so its pid and signals are the program's)."""
        return [IP, "netns", "exec", self.ns, *[str(a) for a in args]]

    def addr(self, port: int) -> str:
        """``ip:port`` of this host."""
        return f"{self.ip}:{port}"

    def nft(self, script: str) -> None:
        """Run an nftables script in this host's namespace."""
        _run([IP, "netns", "exec", self.ns, NFT, "-f", "-"], stdin=script)


class Network:
    """A bridge, its hosts and the faults between them (see the module doc).

    ``seed`` drives every random choice a scenario makes through :attr:`rng`; it is printed
    with each fault in :attr:`log` so a failure can be replayed. Use as a context manager, or
    call :meth:`close`.
    """

    def __init__(self, seed: int | None = None) -> None:
        reason = unavailable()
        if reason:
            raise RuntimeError(reason)
        sweep_stale()
        self.seed = seed if seed is not None else random.SystemRandom().randrange(1 << 32)
        self.rng = random.Random(self.seed)
        self.log: list[FaultRecord] = []
        self.hosts: dict[str, Host] = {}
        self._tag = f"{os.getpid() % 100000:05d}{random.SystemRandom().randrange(36**2):03d}"
        self.bridge = f"obb{self._tag}"[:15]
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        with _lock:
            used = _used_subnets()
            for _ in range(256):
                third = random.SystemRandom().randrange(1, 255)
                net = f"{_PREFIX}.{third}.0/24"
                if net not in used:
                    break
            else:
                raise RuntimeError(f"no free /24 in {_PREFIX}.0.0/16")
            self._net = ipaddress.ip_network(net)
            self.controller_ip = str(self._net.network_address + 1)
            self._record()
            _run([IP, "link", "add", self.bridge, "type", "bridge"])
        try:
            _run([IP, "addr", "add", f"{self.controller_ip}/24", "dev", self.bridge])
            _run([IP, "link", "set", self.bridge, "up"])
        except Exception:
            self.close()
            raise

    def _record(self) -> None:
        state = {
            "pid": os.getpid(),
            "bridge": self.bridge,
            "namespaces": [h.ns for h in self.hosts.values()],
        }
        (STATE_DIR / f"{self.bridge}.json").write_text(json.dumps(state))

    @property
    def cidr(self) -> str:
        """The network's ``10.213.x.0/24`` (what a server on one of its hosts lets in)."""
        return str(self._net)

    def add_host(self, name: str) -> Host:
        """A new host ``name`` (letters, digits, ``-``): a namespace with ``lo`` up, an
        address on the bridge and an empty ``obfault`` table. Raises ``RuntimeError`` when a
        command fails (the network is left to :meth:`close`)."""
        if name in self.hosts:
            raise ValueError(f"host {name!r} exists")
        n = len(self.hosts)
        ip = str(self._net.network_address + 10 + n)
        host = Host(name, f"obt-{self._tag}-{name}", ip, f"obv{self._tag}{n:02d}"[:15])
        self.hosts[name] = host
        self._record()
        peer = f"obp{self._tag}{n:02d}"[:15]
        _run([IP, "netns", "add", host.ns])
        _run([IP, "link", "add", host.veth, "type", "veth", "peer", "name", peer])
        _run([IP, "link", "set", peer, "netns", host.ns])
        _run([IP, "link", "set", host.veth, "master", self.bridge, "up"])
        inside = [IP, "netns", "exec", host.ns, IP]
        _run([*inside, "link", "set", "lo", "up"])
        _run([*inside, "link", "set", peer, "name", "eth0"])
        _run([*inside, "addr", "add", f"{ip}/24", "dev", "eth0"])
        _run([*inside, "link", "set", "eth0", "up"])
        host.nft(
            "table inet obfault {\n"
            "  chain input { type filter hook input priority 0; policy accept; }\n"
            "}\n"
        )
        return host

    # ---- faults -------------------------------------------------------------------------

    def _drop(self, src: Host, dst: Host, percent: int = 100) -> str:
        """Drop (``percent`` % at random, nftables' ``numgen random``) of ``src``'s packets
        arriving at ``dst``; returns the rule."""
        if not 0 < percent <= 100:
            raise ValueError(f"percent {percent} not in 1..100")
        if percent == 100:
            rule = f"ip saddr {src.ip} drop"
        else:
            rule = f"ip saddr {src.ip} numgen random mod 100 < {percent} drop"
        dst.nft(f"add rule inet obfault input {rule}\n")
        return f"{dst.name}: {rule}"

    def _note(self, what: str, rules: list[str]) -> None:
        rec = FaultRecord(time.time_ns() // 1000, what, rules)
        self.log.append(rec)
        print(f"[hosts seed={self.seed}] {rec.at_us} {what}", flush=True)

    def cut(self, a: str, b: str, *, one_way: bool = False) -> None:
        """Drop ``a``'s packets to ``b`` and, unless ``one_way``, ``b``'s to ``a``."""
        ha, hb = self.hosts[a], self.hosts[b]
        rules = [self._drop(ha, hb)]
        if not one_way:
            rules.append(self._drop(hb, ha))
        self._note(f"cut {a} {'->' if one_way else '<->'} {b}", rules)

    def isolate(self, name: str) -> None:
        """Cut ``name`` from every other host, both ways (the controller still reaches it)."""
        h = self.hosts[name]
        rules: list[str] = []
        for other in self.hosts.values():
            if other is not h:
                rules += [self._drop(h, other), self._drop(other, h)]
        self._note(f"isolate {name}", rules)

    def partition(self, side: Sequence[str]) -> None:
        """Cut the hosts of ``side`` from all the others, both ways (each side sees its own)."""
        inside = [self.hosts[n] for n in side]
        outside = [h for h in self.hosts.values() if h.name not in side]
        rules: list[str] = []
        for x in inside:
            for y in outside:
                rules += [self._drop(x, y), self._drop(y, x)]
        self._note(f"partition {sorted(side)} | {sorted(h.name for h in outside)}", rules)

    def bridge_partition(self, left: Sequence[str], right: Sequence[str]) -> None:
        """Jepsen's bridge: cut every host of ``left`` from every host of ``right``, both
        ways; the hosts in neither (the bridge) still reach both halves."""
        rules: list[str] = []
        for x in (self.hosts[n] for n in left):
            for y in (self.hosts[n] for n in right):
                rules += [self._drop(x, y), self._drop(y, x)]
        self._note(f"bridge {sorted(left)} | {sorted(right)}", rules)

    def lossy(self, a: str, b: str, percent: int) -> None:
        """Drop ``percent`` % of the packets between ``a`` and ``b``, each way at random."""
        ha, hb = self.hosts[a], self.hosts[b]
        rules = [self._drop(ha, hb, percent), self._drop(hb, ha, percent)]
        self._note(f"lossy {a} <-> {b} {percent}%", rules)

    def reaches(self, a: str, b: str, port: int, timeout_s: float = 2.0) -> bool:
        """Whether a TCP connection from host ``a`` to ``b``'s ``port`` (something listening
        there) is accepted now: checks a fault's shape, not a process."""
        code = (
            "import socket,sys\n"
            "try:\n"
            f" socket.create_connection(({self.hosts[b].ip!r}, {port}), {timeout_s}).close()\n"
            "except OSError:\n"
            " sys.exit(1)\n"
        )
        r = subprocess.run(
            self.hosts[a].cmd([sys.executable, "-c", code]),
            capture_output=True,
            timeout=timeout_s + 30,
            check=False,
        )
        return r.returncode == 0

    def heal(self) -> None:
        """Remove every fault."""
        for h in self.hosts.values():
            h.nft("flush chain inet obfault input\n")
        self._note("heal", [])

    def close(self) -> None:
        """Delete the namespaces (their veths go with them) and the bridge; idempotent."""
        for h in list(self.hosts.values()):
            with contextlib.suppress(RuntimeError):
                _run([IP, "netns", "del", h.ns])
        with contextlib.suppress(RuntimeError):
            _run([IP, "link", "del", self.bridge])
        (STATE_DIR / f"{self.bridge}.json").unlink(missing_ok=True)

    def __enter__(self) -> Network:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
