-- route_lease: a worker's route lease on the agents it serves (the agent directory).
-- Sets each agent's expiry to now + lease unless a later one is stored (several workers
-- may serve one agent: the latest expiry stands). HSET, so a directory lost with a
-- restarted Redis is re-created by the next refresh.
-- KEYS[1] agents   sos:{ns}:agents   (hash encoded agent id -> route lease expiry ms)
-- ARGV[1] lease ms   ARGV[2] now ms override ("" = the server clock)
-- ARGV[3..] encoded agent ids
-- returns the expiry written (ms)
local expiry = now_ms(ARGV[2]) + tonumber(ARGV[1])
for i = 3, #ARGV do
  local stored = tonumber(redis.call('HGET', KEYS[1], ARGV[i]) or '0') or 0
  if stored < expiry then redis.call('HSET', KEYS[1], ARGV[i], expiry) end
end
return expiry
