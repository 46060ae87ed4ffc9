"""The RS's front door: the gRPC servicers (lease, admin, health), statement dispatch and
SELECT. Everything here translates requests into calls on the managers below and
:class:`obcommon.errors.ObError` into answers; no policy lives here."""
