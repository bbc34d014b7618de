-- Runs that continue as new (wf.continue_as_new): the links of a chain, and the status
-- continued among the ended statuses a prune walks.
-- description: runs continued as new: continued_from, continued_to; continued is an ended status

ALTER TABLE @schema@.runs ADD COLUMN continued_from text, ADD COLUMN continued_to text;

DROP INDEX @schema@.runs_ended;
CREATE INDEX runs_ended ON @schema@.runs (updated_at, id)
    WHERE status IN ('completed', 'failed', 'cancelled', 'continued') AND parent_run_id IS NULL;
