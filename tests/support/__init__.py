"""What the tests share and do not test: the apps they run in worker processes, the
effects ledger those apps write, ``eventually`` (poll with a deadline), free ports, the
stores a test runs on and the repository's paths.

``tests/`` is on ``sys.path`` (``pythonpath`` in pyproject.toml), so a test imports these
as ``support.<module>``; a worker process started from ``tests/`` loads an app the same
way (``support.crash_app:app``), so the app's module has one name in both.
"""
