"""The MySQL endpoint's login plugins (rootservice.api.mysql_auth) against a real RS
on SQLite and PostgreSQL, with the client's side computed by PyMySQL's own scramble
functions: every check accepts the right answer and refuses the wrong one."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mysql_mimic.auth import AuthInfo, Success
from pymysql import _auth as client

from rootservice.api.admission import Admission
from rootservice.api.mysql_auth import (
    CACHING_SHA2,
    NATIVE,
    PERFORM_FULL_AUTHENTICATION,
    FastSuccess,
    LoginFacts,
    Refused,
    RsIdentityProvider,
    Sha2Cache,
    native_scramble_matches,
    sha2_scramble_matches,
)
from rootservice.app import RootService
from rootservice.auth.passwords import native_verifier
from tests.support.harness import make_rs

ADDR = "10.0.0.9:5555"


@pytest.fixture
def rs(db_url: str, tmp_path: Path) -> Iterator[RootService]:
    r = make_rs(db_url, tmp_path, seed=False)
    r.users.create_user("alice", "pw1")
    try:
        yield r
    finally:
        r.shutdown()


def provider(
    rs: RootService,
    *,
    tls: bool = True,
    cert_user: str | None = None,
    cache: Sha2Cache | None = None,
) -> RsIdentityProvider:
    return RsIdentityProvider(
        rs, Admission(2, 8, 8), cache or Sha2Cache(), LoginFacts(tls, cert_user, ADDR)
    )


def login(
    p: RsIdentityProvider, name: str, plugin_name: str, answer: Any
) -> tuple[Any, list[bytes]]:
    """Run one login: ``answer(nonce, more)`` gives the client's reply to the nonce and
    to each AuthMoreData (``more`` is the server's bytes). Returns (decision, AuthMoreData
    sent)."""

    async def run() -> tuple[Any, list[bytes]]:
        user = await p.get_user(name)
        plugin = p.get_plugin(plugin_name)
        assert plugin is not None
        first, state = await plugin.start()
        assert isinstance(first, bytes) and len(first) == 21 and first.endswith(b"\x00")
        nonce = first[:20]
        info = AuthInfo(name, answer(nonce, None), user, {}, plugin_name, first, plugin_name)
        decision = await state.asend(info)
        sent = []
        while isinstance(decision, bytes):
            sent.append(decision)
            decision = await state.asend(info.copy(answer(nonce, decision)))
        return decision, sent

    return asyncio.run(run())


def test_scramble_checks_both_ways() -> None:
    nonce = b"0123456789abcdefghij"
    v = native_verifier("pw1")
    assert v is not None and native_verifier("") is None
    assert native_scramble_matches(client.scramble_native_password(b"pw1", nonce), nonce, v)
    assert not native_scramble_matches(client.scramble_native_password(b"pw2", nonce), nonce, v)
    assert not native_scramble_matches(b"short", nonce, v)
    assert not native_scramble_matches(b"x" * 20, nonce, "not hex")
    cache = Sha2Cache()
    cache.put("alice", "$hash1", "pw1")
    d2 = cache.get("alice", "$hash1")
    assert d2 is not None and cache.get("alice", "$hash2") is None  # ALTER USER: stale
    assert sha2_scramble_matches(client.scramble_caching_sha2(b"pw1", nonce), nonce, d2)
    assert not sha2_scramble_matches(client.scramble_caching_sha2(b"pw2", nonce), nonce, d2)
    cache.forget("alice")
    assert cache.get("alice", "$hash1") is None


def test_native_password(rs: RootService) -> None:
    p = provider(rs)
    ok, _ = login(p, "alice", NATIVE, lambda n, _m: client.scramble_native_password(b"pw1", n))
    assert isinstance(ok, Success) and ok.authenticated_as == "alice"
    bad, _ = login(p, "alice", NATIVE, lambda n, _m: client.scramble_native_password(b"no", n))
    assert isinstance(bad, Refused) and bad.error.name == "ER_ACCESS_DENIED_ERROR"
    assert "'alice'@'10.0.0.9' (using password: YES)" in bad.error.message
    unknown, _ = login(p, "nobody", NATIVE, lambda n, _m: client.scramble_native_password(b"x", n))
    assert isinstance(unknown, Refused) and "'nobody'" in unknown.error.message


def test_user_plugin_follows_the_stored_verifier(rs: RootService) -> None:
    p = provider(rs)
    assert asyncio.run(p.get_user("alice")).auth_plugin == NATIVE
    # root has no password (certificate only) and users of before migration 0005 no verifier.
    assert asyncio.run(p.get_user("root")).auth_plugin == CACHING_SHA2
    assert asyncio.run(p.get_user("nobody")).auth_plugin == CACHING_SHA2


def test_empty_password_is_a_certificate_login(rs: RootService) -> None:
    empty = lambda _n, _m: b""  # noqa: E731
    for plugin in (NATIVE, CACHING_SHA2):
        ok, _ = login(provider(rs, cert_user="alice"), "alice", plugin, empty)
        assert isinstance(ok, Success) and ok.authenticated_as == "alice"
        # Another user's certificate, or none: refused (using password: NO).
        for cert in ("root", None):
            bad, _ = login(provider(rs, cert_user=cert), "alice", plugin, empty)
            assert isinstance(bad, Refused) and "(using password: NO)" in bad.error.message


def test_caching_sha2_full_then_fast(rs: RootService) -> None:
    cache = Sha2Cache()
    p = provider(rs, cache=cache)

    def client_side(password: bytes) -> Any:
        def answer(nonce: bytes, more: bytes | None) -> bytes:
            if more is None:
                return client.scramble_caching_sha2(password, nonce)
            assert more == PERFORM_FULL_AUTHENTICATION
            return password + b"\x00"  # over TLS: the password in clear

        return answer

    # Wrong password: fast path misses, full authentication refuses, nothing cached.
    bad, sent = login(p, "alice", CACHING_SHA2, client_side(b"nope"))
    assert isinstance(bad, Refused) and sent == [PERFORM_FULL_AUTHENTICATION]
    assert len(cache._entries) == 0
    ok, sent = login(p, "alice", CACHING_SHA2, client_side(b"pw1"))
    assert isinstance(ok, Success) and not isinstance(ok, FastSuccess)
    assert sent == [PERFORM_FULL_AUTHENTICATION]
    fast, sent = login(p, "alice", CACHING_SHA2, client_side(b"pw1"))
    assert isinstance(fast, FastSuccess) and sent == []
    # ALTER USER changes the argon2 hash: the cached digest no longer counts.
    rs.users.alter_password("alice", "pw2")
    stale, sent = login(p, "alice", CACHING_SHA2, client_side(b"pw1"))
    assert isinstance(stale, Refused) and sent == [PERFORM_FULL_AUTHENTICATION]


def test_caching_sha2_refuses_full_authentication_without_tls(rs: RootService) -> None:
    p = provider(rs, tls=False)

    def answer(nonce: bytes, more: bytes | None) -> bytes:
        assert more is None, "the clear password must not be asked for without TLS"
        return client.scramble_caching_sha2(b"pw1", nonce)

    bad, sent = login(p, "alice", CACHING_SHA2, answer)
    assert isinstance(bad, Refused) and sent == []
    # The fast path needs no clear password: it works without TLS once cached.
    p.cache.put("alice", rs.users.get("alice").passwd, "pw1")  # type: ignore[union-attr]
    ok, _ = login(p, "alice", CACHING_SHA2, answer)
    assert isinstance(ok, FastSuccess)


def test_insecure_mode_everyone_is_root(db_url: str, tmp_path: Path) -> None:
    rs = make_rs(db_url, tmp_path, seed=False, insecure=True)
    try:
        ok, _ = login(provider(rs, tls=False), "anyone", NATIVE, lambda _n, _m: b"whatever")
        assert isinstance(ok, Success) and ok.authenticated_as == "root"
    finally:
        rs.shutdown()
