-- plait schema for PostgreSQL, version 10: runs started together.
-- description: concurrent starts of one process share a statement and a transaction
--
-- A hundred runs started at once would pay a hundred round trips and WAL flushes. The
-- starts handed in while one is on its way go together in the next statement: each is
-- created exactly as create_run creates it alone, in the order given, and each caller
-- hears its own (created, run).

CREATE FUNCTION @schema@.create_runs(p_new @schema@.new_run[], p_now timestamptz)
RETURNS TABLE (created boolean, run @schema@.runs) LANGUAGE plpgsql AS $$
DECLARE
    n @schema@.new_run;
    one record;
BEGIN
    FOREACH n IN ARRAY p_new LOOP
        SELECT * INTO one FROM @schema@.create_run(n, p_now);
        created := one.created;
        run := one.run;
        RETURN NEXT;
    END LOOP;
END $$;
