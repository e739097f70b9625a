-- read_grants: one subject's grants and the live revocation state of each of them, in one
-- read (issue 11: the grant load and a decision's revocation check are one round trip;
-- the script is atomic, so it is one consistent read of both hashes, SharedOS ADR 0027).
-- KEYS[1] grants hash       sos:{ns}:grants:<kind>:<id>   (grant id -> grant JSON)
-- KEYS[2] revocations hash  sos:{ns}:revocations   (grant id -> revoked-from epoch ms;
--                           field "" -> the revision, incremented by every revocation)
-- returns {grant ids, their grant JSON, their revoked-from (false: never revoked), the
--          revision (false: no revocation yet)}; writes nothing
local stored = redis.call('HGETALL', KEYS[1])
local ids, grants, revoked = {}, {}, {}
for i = 1, #stored, 2 do
  ids[#ids + 1], grants[#grants + 1] = stored[i], stored[i + 1]
  revoked[#revoked + 1] = redis.call('HGET', KEYS[2], stored[i])
end
return {ids, grants, revoked, redis.call('HGET', KEYS[2], '')}
