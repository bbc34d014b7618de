-- Nothing changes on PostgreSQL. On SQLite this migration moves the stream-reset trigger
-- off the column every step's end sets; here the functions that end an attempt failed,
-- interrupted or cancelled write its stream's reset themselves, and no trigger runs for
-- an attempt that succeeded. The number is kept so that both dialects walk the same
-- versions.
-- description: the stream-reset trigger watches attempt_error (SQLite only)

-- a migration runs at least one statement
SELECT 1;
