"""Demos that need the test support (a private PostgreSQL, a Spark standalone cluster)."""
