-- plait schema for SQLite, version 7: the trace a run belongs to.
-- description: runs keep the trace context current when they were started
--
-- With tracing on, the W3C trace context of the code that started a run is stored with
-- it (as JSON, the propagator's carrier), so every pass and step of the run, in any
-- process and after any restart, joins the starter's trace. NULL: not traced.

ALTER TABLE plait_runs ADD COLUMN trace TEXT;
