"""An app that runs ``queue_app``'s ``in_single`` workflow on queue ``single`` without
declaring the queue: its workers enforce the limits another app's engine stored."""

from __future__ import annotations

import plait
from support import queue_app

app = plait.App("undeclared")
app.function(queue_app.hold)
app.workflow(name="in_single", queue="single")(queue_app._flow)  # pyright: ignore[reportPrivateUsage]
