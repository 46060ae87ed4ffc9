"""Emptying servers (docs/design/migration.md): the root balancer task (``root_balancer``) that applies
migration plans through unit moves (``unit_moves``), replica copies (``copy_tasks``) and job
progress (``job_progress``); the lost-replica checker task (``lost_replica_checker``); the
planner seam (``planner``, ``planners``); what it needs from the layers below (``ports``); and
the pure Spark transforms (``spark/``)."""
