-- Requests with a reply (engine.request, wf.wait_for_request).
-- description: requests

-- Requests sent to runs (engine.request), each answered once: sent (waiting for the
-- workflow to take it, oldest first), taken (by the wait step taken_by), replied (reply),
-- refused (refusal: a JSON record), withdrawn (its sender stopped waiting at deadline
-- before the workflow took it). Ids follow commit order: a request is inserted under its
-- run's row lock.
CREATE TABLE @schema@.requests (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id      text NOT NULL,
    name        text NOT NULL,
    data        jsonb,
    status      text NOT NULL,
    taken_by    text,
    reply       jsonb,
    refusal     jsonb,
    created_at  timestamptz NOT NULL,
    deadline    timestamptz NOT NULL,
    answered_at timestamptz
);

-- the requests a pass may take, oldest first; a pruned run's requests go by run
CREATE INDEX requests_sent ON @schema@.requests (run_id, id) WHERE status = 'sent';
CREATE INDEX requests_run ON @schema@.requests (run_id);
