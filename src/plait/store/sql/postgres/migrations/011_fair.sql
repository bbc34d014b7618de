-- Fair queues (app.queue(..., fair=True, weights=...)): the turns each key of a fair
-- queue has had, and each fair queue's clock, kept in the database so that every
-- admitting process takes keys in the same turn order.
-- description: fair queues

CREATE TABLE @schema@.queue_turns (
    queue     text NOT NULL,
    queue_key text NOT NULL,
    finish    bigint NOT NULL,
    PRIMARY KEY (queue, queue_key)
);

CREATE TABLE @schema@.queue_clocks (
    queue text PRIMARY KEY,
    clock bigint NOT NULL
);
