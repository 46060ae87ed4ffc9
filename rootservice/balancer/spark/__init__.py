"""Spark jobs of the RootService: the plans that empty a deleted or dead server (docs/design/migration.md).

Three pure transforms, each from the input DataFrames (:class:`rootservice.balancer.spark.readers.Inputs`)
to a small plan DataFrame that the RS applies itself (only the RS writes, docs/design/ha.md#fenced-writes):

- :func:`rootservice.balancer.spark.unit_plan.unit_migration_plan` - the root balancer (OceanBase's
  ``ObRootBalancer`` / ``ObUnitManager``): a new server for every unit of a DELETING or
  ``permanent_offline`` server, or the reason there is none;
- :func:`rootservice.balancer.spark.replica_plan.replica_migration_plan` - disaster recovery
  (``ObDRWorker``): replicas to build on their unit's server, with the member to copy from;
- :func:`rootservice.balancer.spark.lost_replicas.lost_replicas` - ``ObLostReplicaChecker``: rows of
  ``__all_ls_meta_table`` to delete.

Around them:

- :class:`rootservice.balancer.spark.session.SparkSessionManager` - one long-lived SparkSession per RS,
  created lazily on a background thread (``local[*]`` by default, any master unchanged);
- :mod:`rootservice.balancer.spark.readers` - the inputs from PostgreSQL (JDBC, 2 partitions) or SQLite
  (SQLAlchemy -> pandas/Arrow -> Spark), or from pandas frames the caller holds (the RS's
  in-memory server statuses: :data:`rootservice.balancer.spark.schema.SERVERS_SCHEMA`);
- :mod:`rootservice.balancer.spark.reference` - the same three computations in plain single-process
  pandas and as SQL inside PostgreSQL, for the benchmark (``make bench-spark``) and for the
  test that checks that the three engines agree.

Typical use by the RS::

    spark_mgr = SparkSessionManager(master, conf, db_url=db_url)
    spark_mgr.start_async()              # at start-up; never on the heartbeat path
    ...
    spark = spark_mgr.get()              # in the balancer thread; blocks until ready
    inputs = read_inputs(spark, db_url, servers=servers_pdf).persist()
    try:
        units = unit_migration_plan(inputs).toPandas()
        replicas = replica_migration_plan(inputs).toPandas()
        lost = lost_replicas(inputs).toPandas()
    finally:
        inputs.unpersist()
"""
