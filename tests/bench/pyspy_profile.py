"""A py-spy profile of a server during one bench window (the heartbeat
path's profile before and after).

:class:`Profile` attaches ``py-spy record`` (the dev extra) to a running process for the
length of a window and writes py-spy's raw collapsed stacks (one line per distinct stack:
``frame;frame;...;leaf count``, each frame ``function (file)``); :func:`summarise` turns that
text into the top functions by own samples (the stack's leaf) and by inclusive samples (on
the stack at all), each as a share of every sample. Only the thread holding the GIL is
sampled, so the shares are of the Python CPU the process spent; gRPC's core (TLS, HTTP/2
framing, in C without the GIL) is not seen.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

#: Samples per second: 250 gives ~5,000 samples in a 20 s window, enough for shares of 1 %.
RATE = 250


def py_spy() -> str | None:
    """The py-spy executable beside this interpreter's scripts or on PATH, or None."""
    import sys

    here = Path(sys.executable).parent / "py-spy"
    if here.exists():
        return str(here)
    return shutil.which("py-spy")


class Profile:
    """``py-spy record`` of process ``pid`` into ``out`` (raw collapsed stacks) between
    ``start()`` and ``stop()``; ``stop()`` (idempotent) returns :func:`summarise` of it (only
    ``"error"``, the reason, when py-spy failed)."""

    def __init__(self, pid: int, out: Path, top: int = 15) -> None:
        self.pid = pid
        self.out = out
        self.top = top
        self.proc: subprocess.Popen[bytes] | None = None
        self.error = ""
        self.summary: dict[str, Any] | None = None

    def start(self) -> None:
        exe = py_spy()
        if exe is None:
            self.error = "py-spy not installed (pip install -e .[dev])"
            return
        self.out.parent.mkdir(parents=True, exist_ok=True)
        argv = [exe, "record", "--pid", str(self.pid), "--rate", str(RATE)]
        # --nonblocking: the RS is not paused for each sample (its latency figures stay
        # its own); --nolineno: one entry per function; --gil: only samples of a thread
        # holding the GIL, i.e. the Python CPU the heartbeat path competes for.
        argv += [
            "--format",
            "raw",
            "--nolineno",
            "--nonblocking",
            "--gil",
            "--output",
            str(self.out),
        ]
        self.proc = subprocess.Popen(
            argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
        )

    def stop(self) -> dict[str, Any]:
        if self.summary is not None:
            return self.summary
        self.summary = self._stop()
        return self.summary

    def _stop(self) -> dict[str, Any]:
        if self.proc is not None:
            # py-spy writes its output when interrupted, as on Ctrl-C.
            self.proc.send_signal(signal.SIGINT)
            try:
                _, err = self.proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                _, err = self.proc.communicate()
            if not self.out.exists():
                self.error = err.decode(errors="replace").strip()[-500:] or "no output"
        if self.error:
            return {"error": self.error}
        return summarise(self.out.read_text(errors="replace"), self.top)


def summarise(raw: str, top: int = 15) -> dict[str, Any]:
    """Top ``top`` functions of py-spy raw output ``raw``: ``{"samples": n, "self": [[frame,
    share], ...], "inclusive": [[frame, share], ...]}``, shares in [0, 1] of all samples,
    highest first. A frame counts once per stack for ``inclusive`` (recursion is not
    double-counted). Lines that are not ``stack count`` are ignored."""
    own: Counter[str] = Counter()
    incl: Counter[str] = Counter()
    total = 0
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = stack.split(";")
        total += n
        own[frames[-1]] += n
        for f in set(frames):
            incl[f] += n

    def share(c: Counter[str]) -> list[list[Any]]:
        return [[f, round(k / total, 4)] for f, k in c.most_common(top)]

    if total == 0:
        return {"samples": 0, "self": [], "inclusive": []}
    return {"samples": total, "self": share(own), "inclusive": share(incl)}


def render(config: str, n: int, summary: dict[str, Any]) -> str:
    """The summary of one profiled window as text: a header line, then the top functions by
    own and by inclusive samples, one per line with its share in percent."""
    if "error" in summary:
        return f"profile {config} N={n:,}: {summary['error']}"
    lines = [
        f"profile {config} N={n:,}: {summary['samples']:,} samples, "
        f"{summary.get('server_cpu_us_per_hb') or 0:.0f} us CPU/heartbeat in the window"
    ]
    for kind in ("self", "inclusive"):
        lines.append(f"  top by {kind} samples:")
        lines += [f"    {share * 100:5.1f}%  {frame}" for frame, share in summary[kind]]
    return "\n".join(lines)
