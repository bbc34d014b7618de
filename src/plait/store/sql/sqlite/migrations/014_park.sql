-- Runs that wait needs_attention (a step with on_exhausted="park" failed its last
-- attempt) have not ended: they keep their de-duplication key until a retry or a cancel.
-- They hold no queue slot (plait_runs_queue_active is left as it is).
-- description: needs_attention runs hold their dedup key

DROP INDEX plait_runs_dedup;
CREATE UNIQUE INDEX plait_runs_dedup ON plait_runs (dedup)
    WHERE dedup IS NOT NULL
        AND status IN ('queued', 'running', 'suspended', 'paused', 'needs_attention');
