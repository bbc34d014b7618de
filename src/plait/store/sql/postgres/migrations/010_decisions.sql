-- A refused approval decision keeps who sent it, when and why, never its data: decisions
-- refused before this version drop theirs here (the functions drop it from now on, in the
-- transaction that refuses one).
-- description: refused decisions: no data

UPDATE @schema@.events SET payload = NULL WHERE outcome = 'refused' AND payload IS NOT NULL;
