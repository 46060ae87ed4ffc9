"""Asking an agent's ``ObserverService`` as the root service in office does, from a test.

The agent answers ``RequestHeartbeat`` / ``CheckServerEmpty`` / ``DumpStacks`` only with the
fencing token of the root service it obeys (or a newer one). A test reading an agent's
report (its replicas, its disk) asks once without a token, takes the token the refusal
names (the ``ob-rs-epoch`` / ``ob-rs-incarnation`` trailers of
:func:`observer_agent.service.refuse_deposed`) and asks again with it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import grpc

from obcommon.fencing import FenceToken
from obcommon.proto import obrpc_pb2, obrpc_pb2_grpc
from obcommon.security.certs import Role
from tests.support import pki

T = TypeVar("T")

#: The name on the RS certificate tests present to agents.
PROBE_RS = "127.0.0.1:1"


def obeyed_token(e: grpc.RpcError) -> FenceToken | None:
    """The token an agent's fencing refusal names as the one it obeys, or None when ``e``
    is not such a refusal."""
    meta = dict(e.trailing_metadata() or ()) if isinstance(e, grpc.Call) else {}
    epoch, incarnation = meta.get("ob-rs-epoch"), meta.get("ob-rs-incarnation")
    if not isinstance(epoch, str) or not isinstance(incarnation, str):
        return None
    return FenceToken(int(epoch), int(incarnation))


def ask_as_rs(
    agent: str,
    call: Callable[[obrpc_pb2_grpc.ObserverServiceStub, FenceToken], T],
    name: str = PROBE_RS,
) -> T:
    """``call(stub, token)`` on ``agent`` with an RS certificate for ``name``: first with no
    token, then, when the agent refuses it, with the token it obeys."""
    with pki.channel(agent, Role.RS, name) as ch:
        stub = obrpc_pb2_grpc.ObserverServiceStub(ch)
        try:
            return call(stub, FenceToken(0, 0))
        except grpc.RpcError as e:
            token = obeyed_token(e)
            if token is None:
                raise
        return call(stub, token)


def heartbeat_as_rs(agent: str, timeout_s: float = 5.0) -> obrpc_pb2.LeaseRequest:
    """The agent's lease request (its replicas, disk and resources), through
    ``RequestHeartbeat`` with the token it obeys."""

    def call(stub: obrpc_pb2_grpc.ObserverServiceStub, token: FenceToken) -> obrpc_pb2.LeaseRequest:
        return stub.RequestHeartbeat(  # type: ignore[no-any-return]
            obrpc_pb2.RequestHeartbeatRequest(
                rs_epoch=token.epoch, rs_incarnation=token.incarnation
            ),
            timeout=timeout_s,
        )

    return ask_as_rs(agent, call)
