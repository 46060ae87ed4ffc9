"""The release of the installed distribution, as ``--version`` prints it.

Read from the package metadata (``importlib.metadata``), so the one place a release is written
is ``version`` in pyproject.toml; a source tree that was never installed says so instead.
"""

from __future__ import annotations

from importlib import metadata

DISTRIBUTION = "ob-rootservice"
"""The distribution name of pyproject.toml's ``[project]``."""


def release() -> str:
    """The installed release (``"0.1.0"``), or ``"unknown (not installed)"`` when the
    distribution's metadata is absent (the code run from a bare checkout)."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "unknown (not installed)"


def version_line(prog: str) -> str:
    """What ``prog --version`` prints: ``"rootservice 0.1.0"``."""
    return f"{prog} {release()}"
