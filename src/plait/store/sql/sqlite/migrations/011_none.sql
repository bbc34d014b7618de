-- A version that changes nothing.
-- description: no change
SELECT 1;
