-- swap_grant: compare-and-set one stored grant (used by revoke), recording the revocation.
-- KEYS[1] grants hash       sos:{ns}:grants:<kind>:<id>
-- KEYS[2] revocations hash  sos:{ns}:revocations   (grant id -> revoked-from epoch ms;
--                           field "" -> the revision, incremented by every revocation)
-- ARGV[1] grant id
-- ARGV[2] the grant JSON the caller read
-- ARGV[3] the grant JSON to store
-- ARGV[4] revoked-from, epoch ms (the earliest revocation is kept)
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
local before = tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '')
if before == nil or tonumber(ARGV[4]) < before then
  redis.call('HSET', KEYS[2], ARGV[1], ARGV[4])
end
redis.call('HINCRBY', KEYS[2], '', 1)
return 1
