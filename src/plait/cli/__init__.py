"""The ``plait`` command: start, inspect and act on runs; run workers and the server.

``app`` holds the Typer app (``cli``), the options commands share and their error
handling; each other module adds the commands of one group to it as it is imported.
``follow``, ``terminal``, ``diagram`` and ``metrics_server`` are what only the command
line uses.
"""

# isort: off
# Each module adds its commands to ``cli``: this order is the order of ``plait --help``.
from plait.cli import start as start
from plait.cli import runs as runs
from plait.cli import actions as actions
from plait.cli import bulk as bulk
from plait.cli import schedules as schedules
from plait.cli import queues as queues
from plait.cli import worker as worker
from plait.cli import operations as operations
from plait.cli import approvals as approvals
from plait.cli import fork as fork
from plait.cli import stream as stream
from plait.cli import check as check
from plait.cli import graph as graph
from plait.cli import serve as serve

# isort: on
from plait.cli.app import cli

__all__ = ["cli", "main"]


def main() -> None:
    """The ``plait`` console script (``python -m plait`` and ``python -m plait.cli`` too)."""
    cli()
