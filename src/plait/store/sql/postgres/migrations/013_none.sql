-- A version that changes nothing (its number belongs to another change).
-- description: no change
SELECT 1;
