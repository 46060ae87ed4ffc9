"""The highest RS fencing token this agent obeyed, kept across restarts.

Every RS -> agent call (``ApplyReplicas``, ``RequestHeartbeat``, ``CheckServerEmpty``,
``DumpStacks``) and every lease answer carries the RS's token, ``(rs_epoch,
rs_incarnation)`` (:class:`obcommon.fencing.FenceToken`). The agent obeys a command or a
lease answer, and answers any other call, only when :func:`obcommon.fencing.refusal` lets
its token through (:meth:`TokenKeeper.admit`, :meth:`TokenKeeper.check`), remembers the highest it obeyed,
reports it in its lease requests, and writes it to ``DATA_DIR/rs_token.json`` before it
acts on a higher one, so a restarted agent does not obey a root service it had already
seen deposed (ZooKeeper keeps its accepted epoch in a file for the same reason).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from obcommon.bounds import check_term
from obcommon.errors import ObError
from obcommon.fencing import NO_TOKEN, FenceToken, after_obeying, refusal
from observer_agent.identity import write_atomic

#: The file in DATA_DIR holding the highest token obeyed.
TOKEN_FILE = "rs_token.json"


def load_token(data_dir: Path) -> FenceToken:
    """The token kept in ``data_dir`` (:data:`NO_TOKEN` when there is none). Raises
    ``ValueError`` for a file that exists but cannot be read as a token: the agent must not
    start forgetting what it obeyed."""
    path = data_dir / TOKEN_FILE
    try:
        raw = path.read_text()
    except FileNotFoundError:
        return NO_TOKEN
    except OSError as e:
        raise ValueError(f"cannot read {path}: {e}") from e
    try:
        d = json.loads(raw)
        return FenceToken(int(d["epoch"]), int(d["incarnation"]))
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{path} is not a fencing token: {e}") from e


class TokenKeeper:
    """The highest token obeyed (``highest``), in memory and in ``data_dir``.

    ``log`` gets one INFO line ``obeying the root service of <token> (was <token>)`` for
    every token obeyed that is not the kept one (each new incarnation, including one of the
    same or a lower epoch, which the rule never lets through: the line is how a test or an
    operator sees from the log alone that no two incarnations of one epoch were obeyed) and a
    WARNING per refusal; ``refused`` counts the refusals (``ob_agent_commands_refused``-style
    readings).
    """

    def __init__(
        self,
        data_dir: Path,
        log: logging.Logger | logging.LoggerAdapter,  # type: ignore[type-arg]
        highest: FenceToken | None = None,
    ) -> None:
        """Start from ``highest`` (default: what ``data_dir`` keeps; ``ValueError`` from
        :func:`load_token` when that file is unreadable)."""
        self.data_dir = data_dir
        self.log = log
        self.highest = highest if highest is not None else load_token(data_dir)
        self.refused = 0

    def judge(self, offered: FenceToken) -> str | None:
        """Why ``offered`` must be refused (a lower epoch, the same epoch of another
        incarnation, an absurd jump above the highest epoch), or None. Changes
        nothing."""
        why = check_term("rs_epoch", offered.epoch, self.highest.epoch)
        return why or refusal(self.highest, offered)

    def obey(self, offered: FenceToken) -> None:
        """Make ``offered`` (which :meth:`judge` let through) the highest token, written to
        ``data_dir`` first when it is higher. Raises ``OSError`` when the file cannot be
        written (nothing changes: the caller refuses). Every ``offered`` other than the kept
        token is logged, even one that does not become the highest."""
        if offered == self.highest:
            return
        new = after_obeying(self.highest, offered)
        if new != self.highest:
            self.data_dir.mkdir(parents=True, exist_ok=True)
            payload = json.dumps({"epoch": new.epoch, "incarnation": new.incarnation})
            write_atomic(self.data_dir / TOKEN_FILE, payload.encode())
        old, self.highest = self.highest, new
        self.log.info("obeying the root service of %s (was %s)", offered, old)

    def check(self, offered: FenceToken, what: str) -> ObError | None:
        """:meth:`judge` for a call that is answered without being obeyed (``RequestHeartbeat``,
        ``CheckServerEmpty``, ``DumpStacks``: only a command or a lease answer makes a token
        the highest): None when ``what`` may be answered, else the error :meth:`admit` would
        answer with (``OB_RS_NOT_MASTER`` for a deposed root service or another incarnation
        of the epoch, ``OB_INVALID_ARGUMENT`` for an absurd epoch), counted in
        :attr:`refused` and logged. Writes nothing; never raises."""
        why = self.judge(offered)
        if why is None:
            return None
        return self._refused(offered, what, why)

    def _refused(self, offered: FenceToken, what: str, why: str) -> ObError:
        self.refused += 1
        name = "OB_INVALID_ARGUMENT" if offered.epoch > self.highest.epoch else "OB_RS_NOT_MASTER"
        err = ObError(name, detail=f"{what} refused: {why}")
        self.log.warning("%s", err.message)
        return err

    def admit(self, offered: FenceToken, what: str) -> ObError | None:
        """:meth:`judge` then :meth:`obey`: None when the caller may act on ``what`` (the
        command's name, for messages), else the error to answer with: ``OB_RS_NOT_MASTER``
        for a token that does not follow the highest, ``OB_INVALID_ARGUMENT`` for an absurd
        epoch, ``OB_ERR_SYS`` when the token cannot be kept on disk. Never raises."""
        why = self.judge(offered)
        if why is not None:
            return self._refused(offered, what, why)
        try:
            self.obey(offered)
        except OSError as e:
            self.refused += 1
            self.log.error("%s refused: cannot keep the fencing token %s: %s", what, offered, e)
            return ObError("OB_ERR_SYS", detail=f"{what} refused: cannot keep {offered}: {e}")
        return None
