-- plait schema for PostgreSQL, version 7: who registered each graph version, who owns a name.
-- description: graph versions record who registered them; each graph name has one owner
--
-- A graph name belongs to whoever registered it first (NULL: the app's code or trusted
-- code); only that user may register more versions of it. Names registered before this
-- version belong to trusted code.

ALTER TABLE @schema@.workflow_versions ADD COLUMN registered_by text;

CREATE TABLE @schema@.graph_owners (
    workflow   text PRIMARY KEY,
    owner      text,
    created_at timestamptz NOT NULL
);

INSERT INTO @schema@.graph_owners (workflow, owner, created_at)
SELECT workflow, NULL, min(created_at) FROM @schema@.workflow_versions
WHERE kind = 'graph' GROUP BY workflow
ON CONFLICT (workflow) DO NOTHING;
