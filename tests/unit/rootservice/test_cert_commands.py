"""``rootservice cert ...`` through ``rootservice.cli.main`` (the manner of
``cockroach cert``): what it writes and prints, exit 1 for a file or CA problem, 2 for bad
arguments, and ``list`` marking expired certificates."""

from __future__ import annotations

import argparse
import stat
import time
from pathlib import Path

import pytest
from cryptography import x509

from obcommon.clock import FakeClock
from obcommon.security.certs import Role, Validity, create_cert
from rootservice import cert_commands
from rootservice.cli import main


def _ca(tmp: Path) -> tuple[str, str]:
    d, k = str(tmp / "certs"), str(tmp / "ca.key")
    assert main(["cert", "create-ca", "--certs-dir", d, "--ca-key", k]) == 0
    return d, k


def test_create_everything_and_list(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d, k = _ca(tmp_path)
    assert f"wrote {d}/ca.crt and {k}" in capsys.readouterr().out
    flags = ["--certs-dir", d, "--ca-key", k]
    assert main(["cert", "create-rs", "127.0.0.1:2882", "localhost", *flags]) == 0
    assert "wrote rs certificate for '127.0.0.1:2882'" in capsys.readouterr().out
    assert main(["cert", "create-node", "127.0.0.1:2900", *flags, "--lifetime", "12h"]) == 0
    assert "wrote node certificate for '127.0.0.1:2900'" in capsys.readouterr().out
    assert main(["cert", "create-client", "alice", *flags]) == 0
    assert "wrote client certificate for 'alice'" in capsys.readouterr().out

    certs = Path(d)
    assert sorted(p.name for p in certs.iterdir()) == [
        "ca.crt",
        "client.alice.crt",
        "client.alice.key",
        "node.crt",
        "node.key",
        "rs.crt",
        "rs.key",
    ]
    assert stat.S_IMODE(Path(k).stat().st_mode) == 0o600
    node = x509.load_pem_x509_certificate((certs / "node.crt").read_bytes())
    lifetime = node.not_valid_after_utc - node.not_valid_before_utc
    assert lifetime.total_seconds() == 12 * 3600 + 3600  # --lifetime plus the backdating
    rs = x509.load_pem_x509_certificate((certs / "rs.crt").read_bytes())
    san = rs.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["localhost"]

    assert main(["cert", "list", "--certs-dir", d]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split("\t")[:3] for line in out] == [
        ["ca.crt", "ca", "CN=ob-rootservice CA,O=ob-rootservice"],
        ["client.alice.crt", "client", "alice"],
        ["node.crt", "node", "127.0.0.1:2900"],
        ["rs.crt", "rs", "127.0.0.1:2882"],
    ]
    assert all("\tvalid until " in line for line in out)


def test_list_shows_expired(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d, k = _ca(tmp_path)
    now = int(time.time())
    create_cert(Path(d), Path(k), Role.CLIENT, "old", Validity(now - 7200, now - 3600))
    capsys.readouterr()
    assert main(["cert", "list", "--certs-dir", d]) == 0
    lines = dict(line.split("\t", 1) for line in capsys.readouterr().out.splitlines())
    assert "\tEXPIRED until " in lines["client.old.crt"]
    assert "\tvalid until " in lines["ca.crt"]
    # The same listing seen from a clock ten years and a day ahead: the CA has expired too.
    args = argparse.Namespace(cert_command="list", certs_dir=Path(d))
    later = FakeClock(start_us=(now + 3661 * 86400) * 1_000_000)
    assert cert_commands.run(args, later) == 0
    assert (
        "\tEXPIRED until "
        in dict(line.split("\t", 1) for line in capsys.readouterr().out.splitlines())["ca.crt"]
    )


def test_exit_1_for_files_and_the_ca(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d, k = _ca(tmp_path)
    ca_before = (Path(d) / "ca.crt").read_bytes()
    capsys.readouterr()
    assert main(["cert", "create-ca", "--certs-dir", d, "--ca-key", k]) == 1
    assert "exists (pass --overwrite to replace the CA)" in capsys.readouterr().err
    assert (Path(d) / "ca.crt").read_bytes() == ca_before
    flags = ["--certs-dir", d, "--ca-key", k]
    assert main(["cert", "create-client", "bob", *flags]) == 0
    assert main(["cert", "create-client", "bob", *flags]) == 1
    assert "client.bob.key exists" in capsys.readouterr().err
    assert main(["cert", "create-client", "bob", *flags, "--overwrite"]) == 0
    # No CA where it is looked for.
    empty = str(tmp_path / "empty")
    assert main(["cert", "create-node", "127.0.0.1:1", "--certs-dir", empty, "--ca-key", k]) == 1
    assert "cannot read the CA" in capsys.readouterr().err
    # A malformed identity is the CA module's refusal, reported the same way.
    assert main(["cert", "create-node", "nohost", *flags]) == 1
    assert "node identity must be ip:port, got 'nohost'" in capsys.readouterr().err
    assert main(["cert", "list", "--certs-dir", empty]) == 1
    assert "no certificates in" in capsys.readouterr().err


def test_exit_2_for_bad_arguments(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d, k = _ca(tmp_path)
    capsys.readouterr()
    for lifetime in ("0s", "ten days", "5"):
        code = main(
            ["cert", "create-client", "x", "--certs-dir", d, "--ca-key", k, "--lifetime", lifetime]
        )
        assert code == 2, lifetime
        assert "rootservice cert: --lifetime:" in capsys.readouterr().err
    assert not (Path(d) / "client.x.crt").exists()
    for argv in (
        ["cert", "create-client", "x", "--certs-dir", d],  # no --ca-key
        ["cert", "create-rs", "--certs-dir", d, "--ca-key", k],  # no address
        ["cert", "frobnicate"],
    ):
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert e.value.code == 2, argv
    assert "the following arguments are required" in capsys.readouterr().err


def test_revoke_arguments_are_checked_before_the_cluster_is_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # No RS listens on port 1: any answer below came before dialling.
    d, k = _ca(tmp_path)
    assert main(["cert", "create-node", "127.0.0.1:2900", "--certs-dir", d, "--ca-key", k]) == 0
    rs = ["--certs-dir", d, "--rs", "127.0.0.1:1"]
    assert main(["cert", "revoke", *rs]) == 2
    assert "give --serial HEX or a certificate FILE" in capsys.readouterr().err
    assert main(["cert", "revoke", f"{d}/node.crt", "--serial", "0a", *rs]) == 2
    assert main(["cert", "revoke", f"{d}/missing.crt", *rs]) == 1
    assert "cannot read a certificate from" in capsys.readouterr().err
    assert main(["cert", "revoke", "--serial", "0x", *rs]) == 1
    assert "not a certificate serial" in capsys.readouterr().err
    # The serial each listed file carries, as revoke takes it.
    assert main(["cert", "list", "--certs-dir", d]) == 0
    node = x509.load_pem_x509_certificate(Path(d, "node.crt").read_bytes())
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("node.crt"))
    assert line.endswith(f"\tserial {node.serial_number:x}")
