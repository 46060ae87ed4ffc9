"""The RS's HTTP(S) front end, beside gRPC (:mod:`rootservice.api.grpc_server`)
and the MySQL protocol (:mod:`rootservice.api.mysql_server`): an aiohttp application on the
RS's event loop serving ``/metrics`` (Prometheus), ``/healthz`` / ``/readyz`` (probes), the
JSON status API under ``/api/v1/`` (:mod:`rootservice.http.status`) and the dashboard at
``/`` (``static/``). :mod:`rootservice.http.server` builds and starts it,
:mod:`rootservice.http.auth` authenticates, :mod:`rootservice.http.errors` turns ``ObError``
into JSON errors."""
