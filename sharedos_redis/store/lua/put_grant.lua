-- put_grant: store one grant; a grant id names one grant in its namespace, forever.
-- KEYS[1] grants hash       sos:{ns}:grants:<kind>:<id>
-- KEYS[2] grant id index    sos:{ns}:grant-ids     (grant id -> subject tag)
-- KEYS[3] revocations hash  sos:{ns}:revocations
-- ARGV[1] grant id
-- ARGV[2] grant JSON
-- ARGV[3] subject tag "<kind>:<encoded id>"
-- returns 1 when stored (new, or replacing the same subject's grant), 0 when the id belongs
--        to another subject, -1 when the id was revoked (revoked ids are never reused)
if redis.call('HEXISTS', KEYS[3], ARGV[1]) == 1 then
  return -1
end
local owner = redis.call('HGET', KEYS[2], ARGV[1])
if owner and owner ~= ARGV[3] then
  return 0
end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 1
