"""The server layer (docs/design/): the whitelist and its status records, heartbeat
intake and requests, the lease checker, the persistence queue, load_server_manager,
CheckAllServerTask, the admin operations on servers and zones, the empty-server checker and the
RS -> agent client. One concept per module; collaborators from the layers above are typed
protocols defined next to their consumer."""
