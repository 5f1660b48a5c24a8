"""The processes of a distributed run, below the objectives, the state, the data and the trainer that use them.

- :mod:`.group`: the process group as this process sees it: its place (rank, world size, its index range of a
  partition), the collectives, and a failed collective as :class:`~.group.PeerLost`. The one module of the library
  that imports ``torch.distributed`` (with the engines' wrappers in :mod:`uncurated.train.parallel`).
- :mod:`.shard`: this process's share of a global batch (:class:`~.shard.Shard`) and the collectives an objective
  and the state store use to see the rest of it.
"""
