-- swap_grant: compare-and-set one stored grant (used by revoke).
-- KEYS[1] grants hash  sos:{ns}:grants:<kind>:<id>
-- ARGV[1] grant id
-- ARGV[2] the grant JSON the caller read
-- ARGV[3] the grant JSON to store
-- returns 1 when swapped, 0 when the stored value changed meanwhile (re-read and retry),
--        -1 when the grant is gone
local current = redis.call('HGET', KEYS[1], ARGV[1])
if not current then
  return -1
end
if current ~= ARGV[2] then
  return 0
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
return 1
