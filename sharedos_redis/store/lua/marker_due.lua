-- marker_due: members of an index (open by deadline, leases by expiry) whose score
-- is at or before now, by the Redis server's clock so every process agrees.
-- KEYS[1] zset  sos:{ns}:open | sos:{ns}:leases
-- ARGV[1] now ms or "" (server TIME)   ARGV[2] limit
-- returns the due members, earliest first
return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf',
  string.format('%d', now_ms(ARGV[1])),
  'LIMIT', 0, tonumber(ARGV[2]))
