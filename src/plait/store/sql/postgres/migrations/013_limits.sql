-- Queue limits stored in the database, so every process enforces them whether its app
-- declares the queue or not, and the spend step attempts report for the queues' budgets.
-- description: stored queue limits, spend budgets

-- a queue's limits as the engine of an app that declares it stored them when it opened
CREATE TABLE @schema@.queue_limits (
    name           text PRIMARY KEY,
    concurrency    integer,
    per_key        integer,
    rate           integer,
    rate_window    float8,
    budget         text NOT NULL,      -- JSON array of [unit, amount, window in seconds]
    budget_per_key boolean NOT NULL,
    fair           text,               -- JSON [turn, [[key, cost], ...]]; NULL: not fair
    app            text NOT NULL,
    updated_at     timestamptz NOT NULL
);

-- what a step attempt reported spent (ctx.spend), counted against a queue (and a key)
CREATE TABLE @schema@.spend (
    queue     text NOT NULL,
    queue_key text,
    unit      text NOT NULL,
    amount    float8 NOT NULL,
    at        timestamptz NOT NULL,
    run_id    text NOT NULL,
    step_key  text NOT NULL,
    attempt   integer NOT NULL
);
CREATE INDEX spend_at ON @schema@.spend (queue, at);
