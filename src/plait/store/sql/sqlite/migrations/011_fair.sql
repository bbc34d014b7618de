-- Fair queues (app.queue(..., fair=True, weights=...)): the turns each key of a fair
-- queue has had, and each fair queue's clock, kept in the database so that every
-- admitting process takes keys in the same turn order.
-- description: fair queues

CREATE TABLE plait_queue_turns (
    queue     TEXT NOT NULL,
    queue_key TEXT NOT NULL,
    finish    INTEGER NOT NULL,
    PRIMARY KEY (queue, queue_key)
) WITHOUT ROWID;

CREATE TABLE plait_queue_clocks (
    queue TEXT PRIMARY KEY,
    clock INTEGER NOT NULL
) WITHOUT ROWID;
