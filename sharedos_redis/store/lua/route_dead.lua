-- route_dead: the agents whose route lease expired (no live worker serves them), for the
-- reconciler's fail-fast step; entries expired longer than ``horizon`` are deleted (no
-- request accepted while they were live can still be open: its deadline has passed).
-- KEYS[1] agents   sos:{ns}:agents   (hash encoded agent id -> route lease expiry ms)
-- ARGV[1] horizon ms (the longest request timeout)   ARGV[2] now ms override ("")
-- returns {now ms, encoded agent id, ...}: the server clock, then the agents whose lease
--   expired within the horizon
local now = now_ms(ARGV[2])
local horizon = tonumber(ARGV[1])
local entries = redis.call('HGETALL', KEYS[1])
local dead = {now}
for i = 1, #entries, 2 do
  local expiry = tonumber(entries[i + 1]) or 0
  if expiry < now - horizon then
    redis.call('HDEL', KEYS[1], entries[i])
  elseif expiry < now then
    dead[#dead + 1] = entries[i]
  end
end
return dead
