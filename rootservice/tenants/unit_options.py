"""The options of CREATE RESOURCE UNIT (docs/design/statements.md; OceanBase's ``ObUnitResource``):
which are required, their defaults, their grammar and OceanBase's lower bounds.

CPU is cores, sizes bytes, IOPS counts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from obcommon.errors import ObError
from obcommon.sizes import parse_size
from rootservice.tenants.vocabulary import (
    DEFAULT_LOG_DISK_FACTOR,
    DEFAULT_MAX_IOPS,
    MIN_UNIT_CPU,
    MIN_UNIT_LOG_DISK,
    MIN_UNIT_MEMORY,
)


@dataclass(frozen=True)
class UnitResources:
    """The validated resources of a unit config."""

    max_cpu: float
    min_cpu: float
    memory_size: int
    log_disk_size: int
    max_iops: int
    min_iops: int
    iops_weight: int


def unit_resources(options: tuple[tuple[str, Any], ...]) -> UnitResources:
    """Validate the (option, value) pairs of CREATE RESOURCE UNIT: MAX_CPU and MEMORY_SIZE
    required; MIN_CPU defaults to MAX_CPU, LOG_DISK_SIZE to three times MEMORY_SIZE,
    MIN_IOPS to MAX_IOPS (2**63-1), IOPS_WEIGHT to 0.

    Raises OB_INVALID_ARGUMENT (option twice, missing, bad value, MIN_CPU > MAX_CPU,
    MIN_IOPS > MAX_IOPS) and OB_INVALID_RESOURCE_UNIT (below OceanBase's minimum: 1 CPU, 1G
    memory, 2G log disk)."""
    opts: dict[str, Any] = {}
    for k, v in options:
        if k in opts:
            raise ObError("OB_INVALID_ARGUMENT", f"{k.upper()} given twice")
        opts[k] = v
    for required in ("max_cpu", "memory_size"):
        if required not in opts:
            raise ObError(
                "OB_INVALID_ARGUMENT", "resource unit", detail=f"{required.upper()} is required"
            )
    max_cpu = _number("MAX_CPU", opts["max_cpu"])
    min_cpu = _number("MIN_CPU", opts.get("min_cpu", max_cpu))
    memory = _size("MEMORY_SIZE", opts["memory_size"])
    log_disk = _size("LOG_DISK_SIZE", opts.get("log_disk_size", memory * DEFAULT_LOG_DISK_FACTOR))
    max_iops = _count("MAX_IOPS", opts.get("max_iops", DEFAULT_MAX_IOPS))
    min_iops = _count("MIN_IOPS", opts.get("min_iops", max_iops))
    iops_weight = _count("IOPS_WEIGHT", opts.get("iops_weight", 0))
    for label, value, minimum, shown in (
        ("min_cpu", min_cpu, MIN_UNIT_CPU, "1"),
        ("max_cpu", max_cpu, MIN_UNIT_CPU, "1"),
        ("memory_size", memory, MIN_UNIT_MEMORY, "1G"),
        ("log_disk_size", log_disk, MIN_UNIT_LOG_DISK, "2G"),
    ):
        if value < minimum:
            raise ObError("OB_INVALID_RESOURCE_UNIT", label, shown)
    if min_cpu > max_cpu:
        raise ObError("OB_INVALID_ARGUMENT", "MIN_CPU", detail="MIN_CPU exceeds MAX_CPU")
    if min_iops > max_iops:
        raise ObError("OB_INVALID_ARGUMENT", "MIN_IOPS", detail="MIN_IOPS exceeds MAX_IOPS")
    return UnitResources(max_cpu, min_cpu, memory, log_disk, max_iops, min_iops, iops_weight)


def _number(label: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ObError("OB_INVALID_ARGUMENT", label)
    try:
        out = float(value)
    except ValueError:
        raise ObError("OB_INVALID_ARGUMENT", f"{label} '{value}'") from None
    if out != out or out < 0 or out > float(DEFAULT_MAX_IOPS):
        raise ObError("OB_INVALID_ARGUMENT", f"{label} {value}")
    return out


def _count(label: str, value: Any) -> int:
    """A non-negative integer option up to 2**63-1 (floats are truncated, as OceanBase does)."""
    if isinstance(value, int) and not isinstance(value, bool):
        if not 0 <= value <= DEFAULT_MAX_IOPS:
            raise ObError("OB_INVALID_ARGUMENT", f"{label} {value}")
        return value
    return min(int(_number(label, value)), DEFAULT_MAX_IOPS)


def _size(label: str, value: Any) -> int:
    try:
        return parse_size(value)
    except ValueError as e:
        raise ObError("OB_INVALID_ARGUMENT", f"{label} '{value}'", detail=str(e)) from None
