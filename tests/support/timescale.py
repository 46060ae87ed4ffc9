"""The one setting that scales every wait of the test suite: ``OB_TEST_TIME_SCALE``.

The tests wait for conditions (a status in a table, a process SERVING, a file closed) and
give up after a limit; the limit is never an asserted duration, only how long a failure
takes to be reported. The limits written in the tests are for the machine the README's
figures come from (2 cores, AES-256-GCM at 5.3 GB/s per core). On a slower machine each is
multiplied by :func:`scale`, so a test waits for its condition as long as that machine
needs, and a fast machine reports a failure as soon as before.

``OB_TEST_TIME_SCALE`` (a number, at least 1) sets the factor; unset, it is derived once
per run by :func:`derive`: how much slower than the reference one core encrypts with
AES-256-GCM, times how many fewer than 2 cores the run may use (``taskset -c 0``). pytest's
main process derives it and puts it in the environment (tests/conftest.py), so the xdist
workers and every process a test starts see the same value; the report header shows it.

Routed through here: :func:`tests.support.cluster.wait_until` and the process waits of
:class:`tests.support.cluster.Proc`, the observer-agent unit tests' ``wait_until`` and
``run``, PostgreSQL's and the Spark cluster's start-up, and pytest-timeout's limits
(tests/conftest.py).
"""

from __future__ import annotations

import functools
import math
import os
import time

ENV = "OB_TEST_TIME_SCALE"
#: AES-256-GCM bytes per second of one core on the README's machine (``openssl speed -evp
#: aes-256-gcm``, 16 KiB blocks): the machine the written limits are for.
REFERENCE_AES_GCM_BPS = 5.3e9
#: Cores of the README's machine.
REFERENCE_CORES = 2
#: Blocks of 16 KiB encrypted per timed round, and rounds (the fastest counts: the others
#: lost the core to something else). About 0.1 s in all on the slow machine.
_BLOCK = 16 * 1024
_BLOCKS_PER_ROUND = 256
_ROUNDS = 24


class BadTimeScale(ValueError):
    """``OB_TEST_TIME_SCALE`` is not a number of at least 1."""


def parse(text: str) -> float:
    """The factor ``text`` gives (a finite number, at least 1). Raises :class:`BadTimeScale`
    with the variable's name and what was wrong."""
    try:
        value = float(text)
    except ValueError:
        raise BadTimeScale(f"{ENV}={text!r} is not a number (e.g. {ENV}=2.5)") from None
    if not value >= 1.0 or value == float("inf"):
        raise BadTimeScale(
            f"{ENV}={text!r}: the factor must be a finite number of at least 1 (the limits "
            "in the tests are for the README's machine; a faster one needs no shorter ones)"
        )
    return value


def aes_gcm_bps() -> float:
    """AES-256-GCM bytes per second of one core here: the fastest of :data:`_ROUNDS`
    rounds of 16 KiB encryptions (OpenSSL through ``cryptography``, as ``openssl speed``)."""
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    aead, nonce, block = AESGCM(bytes(32)), bytes(12), bytes(_BLOCK)
    best = float("inf")
    for _ in range(_ROUNDS):
        start = time.perf_counter()
        for _ in range(_BLOCKS_PER_ROUND):
            aead.encrypt(nonce, block, None)
        best = min(best, time.perf_counter() - start)
    return _BLOCK * _BLOCKS_PER_ROUND / max(best, 1e-9)


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity: ``taskset -c 0`` gives 1)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def derive() -> float:
    """The factor for this machine: the reference's AES-GCM speed over this one's, times
    the reference's cores over the usable ones; each part at least 1, rounded up to 0.1."""
    speed = max(1.0, REFERENCE_AES_GCM_BPS / aes_gcm_bps())
    cores = max(1.0, REFERENCE_CORES / usable_cores())
    return max(1.0, math.ceil(speed * cores * 10) / 10)


#: How this process got its factor: "derived" here, or "set" in the environment (by the
#: user, or by pytest's main process for its workers and children).
_origin: list[str] = []


@functools.cache
def scale() -> float:
    """The factor of this run: ``OB_TEST_TIME_SCALE`` when set, else :func:`derive`'s (and
    then the variable is set, so that processes started later agree). Raises
    :class:`BadTimeScale` for a bad value."""
    text = os.environ.get(ENV)
    if text is None or not text.strip():
        value = derive()
        os.environ[ENV] = f"{value:g}"
        _origin.append("derived")
        return value
    _origin.append("set")
    return parse(text)


def origin() -> str:
    """``"derived"`` (measured by this process) or ``"set"`` (from the environment)."""
    scale()
    return _origin[0]


def scaled(seconds: float) -> float:
    """``seconds`` (a limit written for the README's machine) for this run."""
    return seconds * scale()
