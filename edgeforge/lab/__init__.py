"""A labgrid lab behind the device verbs: the ``[labgrid]`` inventory table (:mod:`.config`),
the labgrid client driven as a subprocess (:mod:`.client`, what it prints: :mod:`.parse`), and
holding a place: reserve, wait in the queue, acquire, release, cancel (:mod:`.hold`).

Nothing here imports labgrid: it runs ``python -m labgrid.remote.client`` in a child, and says
``pip install 'edgeforge[lab]'`` when this interpreter has no labgrid. See docs/lab.md."""
