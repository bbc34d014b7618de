-- plait schema for PostgreSQL, version 22: a lease taken or given back in place.
-- description: no index of runs holds a lease, so a claim and the release of an ended run are heap-only updates
--
-- Every pass takes its run's lease (a claim) and gives it back (a release). Two indexes
-- used the lease's owner: runs_lease, its first column, and runs_idle, in its condition. So
-- each claim and each release changed an indexed column and put a new entry in every index
-- of runs (the primary key, the run list, the status and workflow filters, and more): a
-- run of ten steps paid four such writes, two of them for its lease alone. Without them a
-- claim changes no indexed column and stays on its page (fillfactor 80 leaves the room),
-- as does the release of a run that ended in its pass (its wake_at is already empty).
-- A worker now renews the leases of the runs it drives by their ids, and the queries that
-- look for leases read running runs only, through the status index.
DROP INDEX @schema@.runs_lease;
DROP INDEX @schema@.runs_idle;
CREATE INDEX runs_idle ON @schema@.runs (updated_at) WHERE status = 'running' AND wake_at IS NULL;
