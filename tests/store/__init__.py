"""Store-level tests: the contract suite, and the tests of each store's own parts.

The contract suite (``test_actions``, ``test_children``, ``test_commit_together``,
``test_notify``, ``test_operating``, ``test_passes``, ``test_queued``, ``test_queues``,
``test_runs``) talks to a store only through the protocol in ``store/contract.py`` and
builds every row and op by hand (``store/rows.py``, ``store/ops.py``), so a new store is
written against those three files and that suite alone. The other files test one store's
SQL, schema files, migrations or connections.
"""
