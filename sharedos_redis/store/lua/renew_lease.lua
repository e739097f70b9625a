-- renew_lease: extend the lease of a running turn, only for the attempt that holds it.
-- Time is the Redis server's TIME unless ARGV[4] overrides it (tests).
-- KEYS[1] marker hash  sos:{ns}:msg:<id>     KEYS[2] leases zset  sos:{ns}:leases
-- ARGV[1] message id   ARGV[2] lease ms      ARGV[3] attempt      ARGV[4] now ms or ""
-- returns 1 renewed; 0 no longer running, or another attempt holds it; -1 the marker is
--   gone (the caller removes the id from the indexes: forget_missing)
local m = redis.call('HMGET', KEYS[1], 'state', 'attempts')
if not m[1] then return -1 end
if m[1] ~= 'running' or m[2] ~= ARGV[3] then return 0 end
local lease = string.format('%d', now_ms(ARGV[4]) + tonumber(ARGV[2]))
redis.call('HSET', KEYS[1], 'lease', lease)
redis.call('ZADD', KEYS[2], lease, ARGV[1])
return 1
