-- plait schema for PostgreSQL, version 15: a step's end written in place.
-- description: no index of steps holds a step's status, so a step's end is a heap-only update
--
-- A step's row is written twice, when its attempt starts and when it ends, and an update
-- that changes a column any index uses gets new entries in every index of the table. Two
-- indexes used the status: steps_running (run_id, of running steps), which no query reads,
-- and steps_gates, whose first column it was. So every step's end put a new entry in the
-- primary key too. Without them an end changes no indexed column and stays on its page
-- (a heap-only update; fillfactor 80 leaves it the room): about a sixth less WAL per
-- step, and a primary key that grows by the steps, not by their writes. The approval list
-- reads gates by creation time and checks their status on the row.
DROP INDEX @schema@.steps_running;
DROP INDEX @schema@.steps_gates;
CREATE INDEX steps_gates ON @schema@.steps (created_at) WHERE kind = 'approval';
