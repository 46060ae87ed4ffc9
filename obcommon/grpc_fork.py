"""Keep gRPC's fork handlers out of our processes.

gRPC core registers ``pthread_atfork`` handlers (``src/core/lib/iomgr/fork_posix.cc``) unless
``GRPC_ENABLE_FORK_SUPPORT`` is false. They exist for a child that goes on using gRPC; ours
never do: the only fork in the root service is PySpark's ``launch_gateway``, whose ``Popen``
passes a ``preexec_fn`` (so CPython forks with the GIL held) and execs ``spark-submit`` at
once. The prepare handler then waits for gRPC's own threads while holding the GIL, and a gRPC
thread that needs the GIL to finish a Python callback never lets it go: the whole process
froze for 63 s in ``test_planner_failure`` (1 run in 24 on a loaded machine; leases, the
election's renewal and statements all stopped until its agents were killed), and CI failed
on it. With the handlers off, a fork costs the RS nothing but the ``fork`` itself.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

FORK_SUPPORT_VAR = "GRPC_ENABLE_FORK_SUPPORT"
"""The variable gRPC core reads once, when it initialises (``ConfigVars``)."""


def disable_grpc_fork_handlers(environ: MutableMapping[str, str] | None = None) -> bool:
    """Set ``GRPC_ENABLE_FORK_SUPPORT=false`` unless the operator set it; must run before
    gRPC is imported (the package ``__init__`` of each program calls it). Returns True when
    this call set it. Never raises."""
    env = os.environ if environ is None else environ
    if FORK_SUPPORT_VAR in env:
        return False
    env[FORK_SUPPORT_VAR] = "false"
    return True
