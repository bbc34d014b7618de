-- plait schema for SQLite, version 5: who registered each graph version, who owns a name.
-- description: graph versions record who registered them; each graph name has one owner
--
-- A graph name belongs to whoever registered it first (NULL: the app's code or trusted
-- code); only that user may register more versions of it. Names registered before this
-- version belong to trusted code.

ALTER TABLE plait_workflow_versions ADD COLUMN registered_by TEXT;

CREATE TABLE IF NOT EXISTS plait_graph_owners (
    workflow   TEXT PRIMARY KEY,
    owner      TEXT,
    created_at REAL NOT NULL
) WITHOUT ROWID;

INSERT OR IGNORE INTO plait_graph_owners (workflow, owner, created_at)
SELECT workflow, NULL, min(created_at) FROM plait_workflow_versions
WHERE kind = 'graph' GROUP BY workflow;
