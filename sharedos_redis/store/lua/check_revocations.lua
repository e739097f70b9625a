-- check_revocations: one consistent read of the revocation state of some grants (ADR 0027).
-- KEYS[1] revocations hash  sos:{ns}:revocations   (grant id -> revoked-from epoch ms)
-- KEYS[2] revision string   sos:{ns}:revocations:revision
-- ARGV[1] the operation instant, epoch ms
-- ARGV[2..] grant ids
-- returns {revision, revoked id, ...}: the ids revoked from at or before ARGV[1]
local at = tonumber(ARGV[1])
local out = {redis.call('GET', KEYS[2]) or '0'}
for i = 2, #ARGV do
  local from = tonumber(redis.call('HGET', KEYS[1], ARGV[i]) or '')
  if from ~= nil and from <= at then
    out[#out + 1] = ARGV[i]
  end
end
return out
