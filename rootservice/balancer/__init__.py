"""Emptying servers (SPEC.md section 9): the root balancer that applies migration plans, job
progress, lost-replica cleanup, the planners and the pure Spark transforms (``spark/``)."""
