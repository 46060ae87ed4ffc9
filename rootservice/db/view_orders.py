"""The order rows of each system table and view come back in when a SELECT has no ORDER BY
(:mod:`rootservice.db.query_repo`), as InnoDB returns a table's rows in primary-key order:
lower-case table name -> its key columns."""

from __future__ import annotations

DEFAULT_ORDER = {
    "__all_server": ("svr_ip", "svr_port"),
    "__all_zone": ("zone", "name"),
    "__all_sys_parameter": ("name",),
    "__all_rootservice_job": ("job_id",),
    "__all_rootservice_event_history": ("id",),
    "__all_service_epoch": ("name",),
    "dba_ob_servers": ("svr_ip", "svr_port"),
    "dba_ob_zones": ("zone",),
    "__all_unit_config": ("unit_config_id",),
    "__all_resource_pool": ("resource_pool_id",),
    "__all_unit": ("unit_id",),
    "__all_tenant": ("tenant_id",),
    "__all_ls_status": ("tenant_id", "ls_id"),
    "__all_ls_meta_table": ("tenant_id", "ls_id", "svr_ip", "svr_port"),
    "__all_space_usage": ("tenant_id", "svr_ip", "svr_port", "start_seq", "file_type"),
    "dba_ob_unit_configs": ("unit_config_id",),
    "dba_ob_resource_pools": ("resource_pool_id",),
    "dba_ob_units": ("unit_id",),
    "dba_ob_tenants": ("tenant_id",),
    "dba_ob_ls": ("tenant_id", "ls_id"),
    "dba_ob_ls_locations": ("tenant_id", "ls_id", "svr_ip", "svr_port"),
    "dba_ob_rootservice_jobs": ("job_id",),
    "cdb_ob_ls_locations": ("tenant_id", "ls_id", "svr_ip", "svr_port"),
    "__all_server_report": ("svr_ip", "svr_port"),
    "__all_server_event_history": ("id",),
    "dba_ob_rootservice_event_history": ("timestamp",),
    "dba_ob_server_event_history": ("timestamp",),
    "gv$ob_servers": ("svr_ip", "svr_port"),
    "v$ob_servers": ("svr_ip", "svr_port"),
    "gv$ob_units": ("unit_id", "svr_ip", "svr_port"),
    "gv$ob_log_stat": ("tenant_id", "ls_id", "svr_ip", "svr_port"),
    "dba_ob_server_jobs": ("job_id",),
    "dba_ob_unit_jobs": ("job_id",),
    "dba_ob_tenant_jobs": ("job_id",),
    "cdb_ob_ls": ("tenant_id", "ls_id"),
    "cdb_ob_ls_replica_tasks": (
        "tenant_id",
        "ls_id",
        "target_replica_svr_ip",
        "target_replica_svr_port",
    ),
}
