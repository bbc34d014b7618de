-- Requests with a reply (engine.request, wf.wait_for_request).
-- description: requests

-- Requests sent to runs (engine.request), each answered once: sent (waiting for the
-- workflow to take it, oldest first), taken (by the wait step taken_by), replied (reply:
-- JSON), refused (refusal: a JSON record), withdrawn (its sender stopped waiting at
-- deadline before the workflow took it).
CREATE TABLE plait_requests (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id      TEXT NOT NULL,
    name        TEXT NOT NULL,
    data        TEXT,
    status      TEXT NOT NULL,
    taken_by    TEXT,
    reply       TEXT,
    refusal     TEXT,
    created_at  REAL NOT NULL,
    deadline    REAL NOT NULL,
    answered_at REAL
);

-- the requests a pass may take, oldest first; a pruned run's requests go by run
CREATE INDEX plait_requests_sent ON plait_requests (run_id, id) WHERE status = 'sent';
CREATE INDEX plait_requests_run ON plait_requests (run_id);
