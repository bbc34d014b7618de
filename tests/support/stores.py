"""The stores the suite runs on: SQLite always, PostgreSQL unless told otherwise
(``PLAIT_TEST_STORES=sqlite,postgres`` chooses, ``PLAIT_SKIP_POSTGRES=1`` leaves it out)."""

from __future__ import annotations

import os

STORES = ["sqlite"]
if os.environ.get("PLAIT_TEST_STORES"):
    STORES = os.environ["PLAIT_TEST_STORES"].split(",")
elif os.environ.get("PLAIT_SKIP_POSTGRES") != "1":
    STORES.append("postgres")
