"""The tenant layer: resource units, pools, tenants (DDL), unit placement, log streams and
their replicas, leaders, the reconciler, ``__all_ls_meta_table`` sync and the pre-checks that
DELETE / STOP / ISOLATE SERVER ask of it."""
