-- read_grants: one subject's grants and the live revocation state of each of them, in one
-- read (issue 11: the grant load and a decision's revocation check are one round trip;
-- the script is atomic, so it is one consistent read of both hashes, SharedOS ADR 0027).
-- KEYS[1] grants hash       sos:{ns}:grants:<kind>:<id>   (grant id -> grant JSON)
-- KEYS[2] revocations hash  sos:{ns}:revocations   (grant id -> revoked-from epoch ms;
--                           field "" -> the revision, incremented by every revocation)
-- returns {HGETALL of KEYS[1] (id, JSON, id, JSON...), {revision, revoked-from of each id
--         in that order}} (false: no revocation yet / never revoked); writes nothing
local stored = redis.call('HGETALL', KEYS[1])
local ids = {}
for i = 1, #stored, 2 do ids[#ids + 1] = stored[i] end
-- one HMGET per 1000 ids: unpack() is bounded by the Lua C stack
local unpack_ = table.unpack or unpack
local revoked = redis.call('HMGET', KEYS[2], '', unpack_(ids, 1, math.min(#ids, 999)))
for first = 1000, #ids, 1000 do
  local more = redis.call('HMGET', KEYS[2], unpack_(ids, first, math.min(#ids, first + 999)))
  for _, value in ipairs(more) do revoked[#revoked + 1] = value end
end
return {stored, revoked}
