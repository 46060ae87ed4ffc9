"""RootService (RS): the control-plane process that owns cluster membership (docs/design/)."""

from obcommon.grpc_fork import disable_grpc_fork_handlers

# Before any module of the package imports grpc: PySpark forks from this process.
disable_grpc_fork_handlers()
