"""The loops that do the work: passes, job steps, lease renewal.

Every engine with ``workers=True`` and every ``plait worker`` process runs these. They share
nothing but the database: a run is taken by a conditional write on its row (its lease),
a job step by one on its job row. A lease is renewed while its work goes on and expires
when the process dies, so another worker can take over.

One file per loop; ``Worker`` (``worker.py``) is made of them and owns the lifecycle and
the ``Host`` it offers the runtime:

* ``passes``: driving runs, one pass at a time, and the loop that claims due runs;
* ``jobs``: the step loop, which claims and runs the jobs of job steps;
* ``admission``: the queues' limits, and the loop that admits queued runs;
* ``ticks``: the schedule loop, which starts the run of each due tick;
* ``deadlines``: the deadline loop, which fails the runs past their deadline;
* ``leases``: the lease loop; ``stall_guard``, the thread that keeps the leases while the
  event loop is blocked;
* ``retention``: pruning ended runs (``Engine.prune`` and the ``--retain`` loop).

``state`` declares what the loops share. Nothing here imports the Engine.
"""

from plait.worker.ticks import spec_of
from plait.worker.worker import Worker

__all__ = ["Worker", "spec_of"]
