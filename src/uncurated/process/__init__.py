"""The processes of a distributed run, below the objectives and the state that both use them.

- :mod:`.shard`: this process's share of a global batch (:class:`~.shard.Shard`) and the collectives an objective
  and the state store use to see the rest of it.
"""
