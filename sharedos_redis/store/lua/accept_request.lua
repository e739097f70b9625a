-- accept_request: durably accept one request (the transport's only write on deliver).
-- Atomically: refuse a duplicate id; spend one hop of the trace budget; write the
-- marker hash; index it by deadline; append the outbox entry; append the audit record.
-- A refusal writes nothing for the message; when the request carries a reserved grant use
-- (ARGV[17] non-empty) the refusal gives that use back and records it, atomically.
-- KEYS[1] marker hash   sos:{ns}:msg:<id>
-- KEYS[2] budget        sos:{ns}:budget:<trace>   (string int, hops left)
-- KEYS[3] open index    sos:{ns}:open             (zset, score = deadline ms)
-- KEYS[4] outbox        sos:{ns}:outbox           (stream)
-- KEYS[5] audit         sos:{ns}:audit            (stream)
-- KEYS[6] usage         sos:{ns}:usage            (hash grant id -> uses spent)
-- ARGV[1] message id          ARGV[2] envelope wire JSON   ARGV[3] context wire JSON
-- ARGV[4] from tag            ARGV[5] to tag               ARGV[6] purpose
-- ARGV[7] trace id            ARGV[8] now ms               ARGV[9] deadline ms
-- ARGV[10] retention ms       ARGV[11] default hops        ARGV[12] budget ttl ms
-- ARGV[13] audit MAXLEN ~     ARGV[14], ARGV[15] the message.accepted audit field/value
-- ARGV[16] W3C traceparent or "" (host-owned trace context; never in the envelope)
-- ARGV[17] reserved grant id ('' for none)
-- ARGV[18], ARGV[19], ARGV[20], ARGV[21] the grant.usage.released audit field/value for a
--          duplicate, then for an exhausted budget
-- ARGV[22] parent request id ("" for a root request)   ARGV[23] replay fingerprint
-- ARGV[24] n, then ARGV[25..24+n] audit record JSON written first, whatever the outcome:
--          the decision's before-effect records (kernel.outbox), atomic with the accept
--          or the refusal; ARGV[25+n..] audit record JSON written only if accepted
-- KEYS[7] trace index   sos:{ns}:trace:<trace>    (zset id -> accept ms; PEXPIRE budget ttl)
-- returns {"accepted", hops left} | {"duplicate", -1} | {"budget_exhausted", 0}
local decided = 24 + (tonumber(ARGV[24]) or 0)
for i = 25, decided do
  redis.call('XADD', KEYS[5], 'MAXLEN', '~', ARGV[13], '*', 'e', ARGV[i])
end
local function refuse(status, hops, field, value)
  local grant = ARGV[17] or ''
  if grant ~= '' and tonumber(redis.call('HGET', KEYS[6], grant) or '0') > 0 then
    redis.call('HINCRBY', KEYS[6], grant, -1)
    redis.call('XADD', KEYS[5], 'MAXLEN', '~', ARGV[13], '*', field, value)
  end
  return {status, hops}
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  return refuse('duplicate', -1, ARGV[18], ARGV[19])
end
local stored = redis.call('GET', KEYS[2])
local hops
if stored then
  hops = tonumber(stored)
else
  hops = tonumber(ARGV[11])
end
if hops == nil or hops < 1 then
  return refuse('budget_exhausted', 0, ARGV[20], ARGV[21])
end
hops = hops - 1
redis.call('SET', KEYS[2], hops, 'PX', ARGV[12])
redis.call('HSET', KEYS[1],
  'env', ARGV[2], 'ctx', ARGV[3], 'state', 'accepted', 'from', ARGV[4], 'to', ARGV[5],
  'purpose', ARGV[6], 'trace', ARGV[7], 'created', ARGV[8], 'deadline', ARGV[9],
  'attempts', '0', 'updated', ARGV[8], 'fp', ARGV[23])
if ARGV[22] ~= '' then redis.call('HSET', KEYS[1], 'parent', ARGV[22]) end
redis.call('ZADD', KEYS[7], ARGV[8], ARGV[1])
redis.call('PEXPIRE', KEYS[7], ARGV[12])
if ARGV[16] and ARGV[16] ~= '' then
  redis.call('HSET', KEYS[1], 'tp', ARGV[16])
  redis.call('XADD', KEYS[4], '*', 'id', ARGV[1], 'tp', ARGV[16])
else
  redis.call('XADD', KEYS[4], '*', 'id', ARGV[1])
end
redis.call('PEXPIREAT', KEYS[1], tonumber(ARGV[9]) + tonumber(ARGV[10]))
redis.call('ZADD', KEYS[3], ARGV[9], ARGV[1])
redis.call('XADD', KEYS[5], 'MAXLEN', '~', ARGV[13], '*', ARGV[14], ARGV[15])
for i = decided + 1, #ARGV do
  redis.call('XADD', KEYS[5], 'MAXLEN', '~', ARGV[13], '*', 'e', ARGV[i])
end
return {'accepted', hops}
