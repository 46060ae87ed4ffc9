"""``make proto-compat`` (part of ``make lint``): obrpc.proto against the previous release's
copy with ``buf breaking``, category WIRE_JSON (buf.yaml). The check itself, and that it
catches what protobuf's rules forbid: a field removed without reserving its number and name,
a field renumbered; reserving them passes."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from obcommon import releases

ROOT = Path(__file__).resolve().parents[2]
BUF = Path(sys.executable).with_name("buf")
PREVIOUS = releases.table()[-2].release


def buf_breaking(workdir: Path) -> subprocess.CompletedProcess[str]:
    against = f'{{"version":"v2","modules":[{{"path":"releases/{PREVIOUS}"}}]}}'
    return subprocess.run(
        [str(BUF), "breaking", "--against", ".", "--against-config", against],
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    if not BUF.exists():
        pytest.fail(f"{BUF} is missing: run make setup (buf-bin is a dev dependency)")
    for rel in ("buf.yaml", "obcommon/proto/obrpc.proto", f"releases/{PREVIOUS}/obrpc.proto"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, tmp_path / rel)
    return tmp_path


def edit(tree: Path, old: str, new: str) -> None:
    p = tree / "obcommon/proto/obrpc.proto"
    text = p.read_text()
    assert len(re.findall(re.escape(old), text)) == 1, old
    p.write_text(text.replace(old, new))


def test_the_current_proto_keeps_the_previous_releases_wire(tree: Path) -> None:
    r = buf_breaking(tree)
    assert r.returncode == 0, r.stdout + r.stderr


def test_a_field_removed_without_reserving_it_is_caught(tree: Path) -> None:
    edit(tree, "  int64 seq = 12;", "")
    r = buf_breaking(tree)
    assert r.returncode != 0
    assert 'Previously present field "12" with name "seq" on message "LeaseRequest"' in r.stdout


def test_a_field_removed_and_reserved_passes(tree: Path) -> None:
    edit(tree, "  int64 seq = 12;", '  reserved 12;\n  reserved "seq";')
    r = buf_breaking(tree)
    assert r.returncode == 0, r.stdout + r.stderr


def test_a_field_renumbered_is_caught(tree: Path) -> None:
    edit(tree, "string build_version = 5;", "string build_version = 90;")
    r = buf_breaking(tree)
    assert r.returncode != 0 and "build_version" in r.stdout
