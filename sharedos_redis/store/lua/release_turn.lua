-- release_turn: a draining worker hands a running turn back so another worker re-runs it
-- at once (not after the lease expires). Only the attempt that holds the lease may do it.
-- KEYS[1] marker hash  sos:{ns}:msg:<id>     KEYS[2] leases zset  sos:{ns}:leases
-- ARGV[1] message id   ARGV[2] attempt       ARGV[3] now ms
-- returns 1 released (state dispatched, lease dropped); 0 not running under that attempt
local m = redis.call('HMGET', KEYS[1], 'state', 'attempts')
if m[1] ~= 'running' or m[2] ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], 'state', 'dispatched', 'updated', ARGV[3])
redis.call('HDEL', KEYS[1], 'lease')
redis.call('ZREM', KEYS[2], ARGV[1])
return 1
