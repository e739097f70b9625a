-- release_grant_use: give back one reserved grant use refused before admission, audited.
-- KEYS[1] usage hash  sos:{ns}:usage   (field = grant id, value = uses spent)
-- KEYS[2] audit       sos:{ns}:audit   (stream)
-- ARGV[1] grant id
-- ARGV[2] audit MAXLEN ~
-- ARGV[3], ARGV[4] the grant.usage.released audit field/value ('' '': the caller records it)
-- returns 1 when a use was given back, 0 when none was spent (nothing written)
local used = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
if used < 1 then
  return 0
end
redis.call('HINCRBY', KEYS[1], ARGV[1], -1)
if ARGV[3] ~= '' then
  redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[2], '*', ARGV[3], ARGV[4])
end
return 1
