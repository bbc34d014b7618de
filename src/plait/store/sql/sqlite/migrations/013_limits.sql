-- Queue limits stored in the database, so every process enforces them whether its app
-- declares the queue or not, and the spend step attempts report for the queues' budgets.
-- description: stored queue limits, spend budgets

-- a queue's limits as the engine of an app that declares it stored them when it opened
CREATE TABLE plait_queue_limits (
    name           TEXT PRIMARY KEY,
    concurrency    INTEGER,
    per_key        INTEGER,
    rate           INTEGER,
    rate_window    REAL,
    budget         TEXT NOT NULL,      -- JSON array of [unit, amount, window in seconds]
    budget_per_key INTEGER NOT NULL,
    fair           TEXT,               -- JSON [turn, [[key, cost], ...]]; NULL: not fair
    app            TEXT NOT NULL,
    updated_at     REAL NOT NULL
) WITHOUT ROWID;

-- what a step attempt reported spent (ctx.spend), counted against a queue (and a key)
CREATE TABLE plait_spend (
    queue     TEXT NOT NULL,
    queue_key TEXT,
    unit      TEXT NOT NULL,
    amount    REAL NOT NULL,
    at        REAL NOT NULL,
    run_id    TEXT NOT NULL,
    step_key  TEXT NOT NULL,
    attempt   INTEGER NOT NULL
);
CREATE INDEX plait_spend_at ON plait_spend (queue, at);
