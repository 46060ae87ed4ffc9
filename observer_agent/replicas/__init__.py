"""Log-stream (LS) replicas hosted by the agent (docs/design/migration.md; OceanBase's ObLS and its
palf log, reduced to what server management and disaster recovery need to observe).

One concept per module; import names from the module that defines them:

- :mod:`~observer_agent.replicas.storage`: a replica's files (data file, checksum,
  ``meta.json`` / :class:`ReplicaMeta`, directory names and paths);
- :mod:`~observer_agent.replicas.log`: the applied log (:class:`ReplicaLog`) and the merge
  of a leader's entries into it;
- :mod:`~observer_agent.replicas.replica`: one hosted :class:`Replica` and its build state;
- :mod:`~observer_agent.replicas.hosted`: the set of hosted replicas and the lock over
  changes to it;
- :mod:`~observer_agent.replicas.replication`: the leader / follower loop (append, pull,
  catch-up);
- :mod:`~observer_agent.replicas.copy`: building a replica by streaming it from a member
  (replica migration), its data phase in :mod:`~observer_agent.replicas.copy_stream`;
- :mod:`~observer_agent.replicas.serving`: answering peers (``FetchLog``, ``FetchData``);
- :mod:`~observer_agent.replicas.apply`: one upsert or drop of ``ApplyReplicas``;
- :mod:`~observer_agent.replicas.faults`: the fault-switch files;
- :mod:`~observer_agent.replicas.peers`, :mod:`~observer_agent.replicas.tasks`: channels to
  other agents, background tasks and blocking calls;
- :mod:`~observer_agent.replicas.manager`: the :class:`ReplicaManager` composing them, which
  the agent owns.

The RS drives membership, leadership and terms with ``ObserverService.ApplyReplicas``
(:meth:`ReplicaManager.apply`). Times are integer microseconds since the Unix epoch from the
agent's :class:`Clock`; the asyncio loop's monotonic time is only used for waits and
deadlines.
"""
