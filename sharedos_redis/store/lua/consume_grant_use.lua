-- consume_grant_use: spend one use of a grant if fewer than max_uses were spent.
-- KEYS[1] usage hash  sos:{ns}:usage   (field = grant id, value = uses spent)
-- ARGV[1] grant id
-- ARGV[2] max uses (positive integer)
-- returns 1 when a use was spent, 0 when the grant is exhausted
local used = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
if used < tonumber(ARGV[2]) then
  redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
  return 1
end
return 0
