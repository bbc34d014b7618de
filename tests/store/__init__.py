"""The store contract suite: what every ``plait.store.base.Store`` must do.

It talks to a store only through the protocol in ``store/base.py`` and builds every row
by hand, so a new store is written against ``base.py`` and this suite alone.
"""
