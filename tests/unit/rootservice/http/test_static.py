"""The dashboard's static files: they ship as package data, the page
loads only what the RS itself serves (no CDN: machines may have no internet), and data reach
the page only as text (the rendering itself is tested in a real browser,
tests/integration/test_dashboard.py)."""

from __future__ import annotations

import fnmatch
import re
import tomllib
from pathlib import Path

import rootservice

STATIC = Path(rootservice.__file__).parent / "http" / "static"
ROOT = Path(__file__).resolve().parents[4]


def test_every_static_file_is_package_data() -> None:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    globs = data["tool"]["setuptools"]["package-data"]["rootservice.http"]
    files = sorted(p.relative_to(STATIC.parent).as_posix() for p in STATIC.iterdir())
    assert {"static/index.html", "static/dashboard.js", "static/dashboard.css"} <= set(files)
    assert all(any(fnmatch.fnmatch(f, g) for g in globs) for f in files), (files, globs)


def test_the_page_loads_only_its_own_files() -> None:
    html = (STATIC / "index.html").read_text(encoding="utf-8")
    refs = re.findall(r'(?:src|href)="([^"]*)"', html)
    # Served by the RS's add_static("/static/", ...) (rootservice/http/server.py).
    assert sorted(refs) == ["/static/dashboard.css", "/static/dashboard.js", "data:,"]
    assert all((STATIC / r.removeprefix("/static/")).is_file() for r in refs if r != "data:,")
    css = (STATIC / "dashboard.css").read_text(encoding="utf-8")
    assert "@import" not in css and "url(" not in css


def test_data_reach_the_page_as_text_only() -> None:
    js = (STATIC / "dashboard.js").read_text(encoding="utf-8")
    code = "\n".join(line for line in js.splitlines() if not line.lstrip().startswith("//"))
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("):
        assert sink not in code, sink
    # Polls the contract's snapshot, same origin, with the browser's credentials.
    assert '"/api/v1/cluster"' in code and 'credentials: "same-origin"' in code
