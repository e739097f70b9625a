-- marker_due: members of an index (open by deadline, leases by expiry) whose score
-- is at or before now, by the Redis server's clock so every process agrees.
-- KEYS[1] zset  sos:{ns}:open | sos:{ns}:leases
-- ARGV[1] now ms or "" (server TIME)   ARGV[2] limit
-- returns the due members, earliest first
local now
if ARGV[1] ~= '' then
  now = tonumber(ARGV[1])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', string.format('%d', now),
  'LIMIT', 0, tonumber(ARGV[2]))
