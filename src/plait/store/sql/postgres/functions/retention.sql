-- Retention: ended runs pruned, with everything of theirs.

-- One batch of a prune: up to p_limit ended top-level runs last updated before p_cutoff,
-- after the cursor (p_after_at, p_after_id), whose whole tree of child runs has ended
-- too, are deleted with everything of theirs. Returns how many runs (children included)
-- went, and the cursor of the last root looked at (NULL: nothing left to look at).
CREATE OR REPLACE FUNCTION @schema@.prune_runs(
    p_statuses text[], p_cutoff timestamptz, p_after_at timestamptz, p_after_id text,
    p_limit integer, OUT deleted integer, OUT last_at timestamptz, OUT last_id text
) LANGUAGE plpgsql AS $$
DECLARE
    roots text[];
    doomed text[];
BEGIN
    SELECT array_agg(id ORDER BY updated_at, id) INTO roots
    FROM (
        SELECT id, updated_at FROM @schema@.runs
        WHERE status IN ('completed', 'failed', 'cancelled', 'continued') AND parent_run_id IS NULL
            AND status = ANY (p_statuses) AND updated_at < p_cutoff
            AND (p_after_at IS NULL OR (updated_at, id) > (p_after_at, p_after_id))
        ORDER BY updated_at, id LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    ) picked;
    deleted := 0;
    IF roots IS NULL THEN
        last_at := NULL;
        last_id := NULL;
        RETURN;
    END IF;
    last_id := roots[array_length(roots, 1)];
    SELECT updated_at INTO last_at FROM @schema@.runs WHERE id = last_id;
    WITH RECURSIVE tree(root, id, status) AS (
        SELECT r.id, r.id, r.status FROM @schema@.runs r WHERE r.id = ANY (roots)
        UNION ALL
        SELECT t.root, c.id, c.status FROM @schema@.runs c JOIN tree t ON c.parent_run_id = t.id
    ), whole AS (
        SELECT root FROM tree GROUP BY root
        HAVING bool_and(status IN ('completed', 'failed', 'cancelled', 'continued'))
    )
    SELECT array_agg(t.id) INTO doomed FROM tree t JOIN whole w ON w.root = t.root;
    IF doomed IS NULL THEN
        RETURN;
    END IF;
    DELETE FROM @schema@.attempts WHERE run_id = ANY (doomed);
    DELETE FROM @schema@.steps WHERE run_id = ANY (doomed);
    DELETE FROM @schema@.events WHERE run_id = ANY (doomed);
    DELETE FROM @schema@.requests WHERE run_id = ANY (doomed);
    DELETE FROM @schema@.timers WHERE run_id = ANY (doomed);
    DELETE FROM @schema@.jobs WHERE run_id = ANY (doomed);
    DELETE FROM @schema@.state WHERE run_id = ANY (doomed);
    DELETE FROM @schema@.run_values WHERE run_id = ANY (doomed);
    DELETE FROM @schema@.run_tags WHERE run_id = ANY (doomed);
    DELETE FROM @schema@.stream_entries WHERE run_id = ANY (doomed);
    DELETE FROM @schema@.runs WHERE id = ANY (doomed);
    deleted := array_length(doomed, 1);
END $$;
