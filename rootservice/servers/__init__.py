"""The server whitelist (SPEC.md sections 2-9): the status record, heartbeat intake, the lease
checker, persistence to ``__all_server``, CheckAllServerTask, the admin operations on servers
and zones, the empty-server checker and the RS -> agent client."""
