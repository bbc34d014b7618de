"""The store contract suite: what every ``plait.store.contract.Store`` must do.

It talks to a store only through the protocol in ``store/contract.py`` and builds every row
and op by hand (``store/rows.py``, ``store/ops.py``), so a new store is written against
those three files and this suite alone.
"""
