"""The RS fencing token and the rule an agent obeys it by.

A token is the RS's epoch (the ``rootservice_epoch`` lease row's value) together with the
incarnation id the RS drew at random when it took office with that epoch. The epoch alone
is not enough: when the metadata store goes back in time (an asynchronous PostgreSQL
standby promoted without the last epoch bump), two root services can hold the same epoch;
their incarnations differ. Like the fencing tokens of Kleppmann's "How to do distributed
locking" and ZooKeeper's zxid (epoch, counter), the agent keeps the highest token it
obeyed and refuses anything that does not follow it.

Pure functions on plain values: the agent's check (:mod:`observer_agent.fence`) and the
model test (``tests/unit/rootservice/ha/test_fencing_model.py``) call the same ones.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FenceToken:
    """``epoch`` (>= 0; 0 = none seen) and ``incarnation`` (a random 63-bit id, 0 = unknown,
    as sent by tests and tools that set no incarnation)."""

    epoch: int
    incarnation: int

    def __str__(self) -> str:
        """``epoch 7 (incarnation 1a2b...)``: how logs and refusals name a token."""
        return f"epoch {self.epoch} (incarnation {self.incarnation:x})"


#: The token of an agent that never obeyed an RS.
NO_TOKEN = FenceToken(0, 0)


def refusal(highest: FenceToken, offered: FenceToken) -> str | None:
    """Why an agent that obeyed ``highest`` must refuse a command (or a lease answer)
    carrying ``offered``, or None when it may obey.

    Refused: a lower epoch (a deposed RS), or the same epoch with another incarnation (two
    root services with one epoch: the metadata store went back in time). Equal tokens and
    higher epochs are obeyed.
    """
    if offered.epoch < highest.epoch:
        return f"{offered} is lower than {highest} already obeyed (a deposed root service)"
    if offered.epoch == highest.epoch and offered.incarnation != highest.incarnation:
        return (
            f"{offered} reuses the epoch of {highest} already obeyed from another root "
            "service incarnation (two leaders with one epoch: the metadata store went back "
            "in time)"
        )
    return None


def after_obeying(highest: FenceToken, offered: FenceToken) -> FenceToken:
    """The highest token once ``offered`` (which :func:`refusal` let through) was obeyed."""
    return offered if offered.epoch > highest.epoch else highest


def reports_conflict(own: FenceToken, reported: FenceToken) -> bool:
    """True when an agent reporting ``reported`` (the highest token it obeyed) would refuse
    an RS holding ``own``: its epoch is above ours, or equal with another incarnation. The
    RS must then raise its epoch above it before it commands anything."""
    return refusal(reported, own) is not None
