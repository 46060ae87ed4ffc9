"""The tenant layer: resource units, pools, tenants (DDL), unit placement, log streams and
their replicas, leaders, the reconciler, ``__all_ls_meta_table`` sync and the pre-checks that
DELETE / STOP / ISOLATE SERVER ask of it.

One concern per module:

- ``vocabulary`` names, limits, primary-zone grammar, unit demand and affinity (pure);
  ``unit_options`` the options of CREATE RESOURCE UNIT; ``placement`` unit placement (pure);
- ``ports`` what the layer needs from the servers package (consumer protocols);
- ``topology`` the desired layout and its cache (``LayoutVersion``, ``LayoutCache``);
- ``reports`` replica reports and the views of the log streams (``ReplicaReports``);
- ``host_health`` who may host or lead replicas; ``rooms`` servers as placement candidates;
- ``replica_specs`` specs and ApplyReplicas (``ReplicaApplier``);
- ``leaders`` leader choice, switch, coordination, moving leaders off (``LeaderCoordinator``);
- ``reconciler`` the ``ls_reconciler`` task; ``meta_sync`` the ``ls_meta_sync`` task;
- ``log_streams`` a tenant's replicas at CREATE / DROP TENANT (``TenantReplicas``);
- ``ddl`` + ``ddl_requests`` CREATE / DROP RESOURCE UNIT, POOL, TENANT (``TenantManager``);
- ``pre_checks`` DELETE / STOP / ISOLATE SERVER checks (``ServerPreChecks``);
- ``server_probes`` the empty-server checker's questions (``ServerProbes``);
- ``balancer_view`` the one object the balancer is given (``BalancerView``);
- ``once_log`` warnings logged once per log stream.
"""
