"""Password hashes and the verification cache (rootservice.auth.passwords)."""

from __future__ import annotations

from rootservice.auth.passwords import (
    NO_PASSWORD,
    VerifiedCache,
    hash_password,
    verify_password,
)
from rootservice.auth.principal import Principal, client_host


def test_hashes_are_salted_argon2id_and_verify() -> None:
    first, second = hash_password("s3cret"), hash_password("s3cret")
    assert first.startswith("$argon2id$") and second.startswith("$argon2id$")
    assert first != second  # a random salt per hash
    assert "s3cret" not in first
    assert verify_password(first, "s3cret") and verify_password(second, "s3cret")
    assert not verify_password(first, "s3cret ")
    assert not verify_password(first, "")


def test_no_password_matches_nothing_and_a_bad_hash_matches_nothing() -> None:
    assert hash_password("") == NO_PASSWORD
    assert not verify_password(NO_PASSWORD, "")
    assert not verify_password(NO_PASSWORD, "anything")
    assert not verify_password("not-a-hash", "anything")


def test_cache_is_keyed_by_user_hash_and_password_and_bounded() -> None:
    cache = VerifiedCache(max_entries=2)
    cache.add("u", "$h1", "pw")
    assert cache.hit("u", "$h1", "pw")
    assert not cache.hit("u", "$h1", "other")
    assert not cache.hit("u", "$h2", "pw")  # the hash changed (ALTER USER)
    assert not cache.hit("v", "$h1", "pw")
    # The plain password is not kept anywhere in the cache. A long password, because the
    # random digest's repr holds any two given characters now and then (it once held "pw").
    secret = "correct horse battery staple"
    cache.add("x", "$h1", secret)
    assert all(secret not in repr(key) for key in cache._entries)
    assert all(secret.encode() not in key[2] for key in cache._entries)
    cache.forget("x")
    cache.add("v", "$h", "a")
    assert cache.hit("u", "$h1", "pw")  # now the most recently used
    cache.add("w", "$h", "b")
    assert len(cache) == 2
    assert cache.hit("u", "$h1", "pw") and not cache.hit("v", "$h", "a")
    cache.forget("u")
    assert not cache.hit("u", "$h1", "pw") and cache.hit("w", "$h", "b")


def test_two_caches_digest_differently() -> None:
    a, b = VerifiedCache(), VerifiedCache()
    assert a._digest("pw") != b._digest("pw")


def test_client_host() -> None:
    assert client_host("10.0.0.5:51234") == "10.0.0.5"
    assert client_host("[::1]:51234") == "::1"
    assert client_host("::1") == "::1"
    assert client_host("") == ""
    assert Principal("u", "10.0.0.5:1").client_host == "10.0.0.5"
