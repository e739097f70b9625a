-- accept_request: durably accept one request (the transport's only write on deliver).
-- Atomically: write the decision's before-effect audit records; refuse a duplicate id;
-- spend one hop of the trace budget; write the marker hash (with its parent and replay
-- fingerprint); index it by deadline and in its trace; append the outbox entry and the
-- audit records of the accept. A refusal writes nothing for the message but its
-- message.refused record (a.accepted retyped, reason = the code); when the request carries a
-- reserved grant use (a.grant non-empty) the refusal gives that use back and records it
-- (grant.usage.released, reason = the refusal's code), atomically.
-- KEYS[1] marker hash   sos:{ns}:msg:<id>
-- KEYS[2] budget        sos:{ns}:budget:<trace>   (string int, hops left)
-- KEYS[3] open index    sos:{ns}:open             (zset, score = deadline ms)
-- KEYS[4] outbox        sos:{ns}:outbox           (stream)
-- KEYS[5] audit         sos:{ns}:audit            (stream)
-- KEYS[6] usage         sos:{ns}:usage            (hash grant id -> uses spent)
-- KEYS[7] trace index   sos:{ns}:trace:<trace>    (zset id -> accept ms; PEXPIRE budget ttl)
-- KEYS[8] parent marker sos:{ns}:msg:<parent>     (KEYS[1] again for a root request)
-- KEYS[9] agents        sos:{ns}:agents           (hash encoded agent id -> route lease
--                                                   expiry ms, store/directory.py)
-- ARGV named (named() in _prelude.lua, store/scripts.py named_args), all strings:
--   a.id message id   a.from, a.to address tags   a.purpose   a.trace trace id
--   a.now accept ms   a.deadline ms   a.retention ms   a.hops default budget
--   a.budget_ttl ms   a.maxlen audit MAXLEN ~
--   a.tp W3C traceparent or "" (host-owned, never in the envelope)
--   a.grant reserved grant id or ""   a.parent parent request id or ""
--   a.fp replay fingerprint   a.attempt the parent turn's attempt (fencing token) or ""
--   a.route "1": check the agent directory
--   a.h the header every audit record below is compacted against (store/audit.py; the
--     script writes its records as one audit entry)
--   a.env envelope wire JSON   a.ctx requester context wire JSON
--   a.accepted the message.accepted audit record JSON
--   a.released the grant.usage.released record JSON ("" without a reserved use); the
--     script sets its reason
--   a.decided n: the first n ARGV after the pairs are audit records written first,
--     whatever the outcome (the decision's before-effect records, kernel.outbox); the
--     ARGV after them are audit records written only if accepted or attached
-- returns {"accepted", hops left} | {"attached", stored deadline ms, stored state} |
--   {refusal code, -1 | 0}; refusal codes: duplicate_message, budget_exhausted,
--   turn_lease_lost, replay_conflict; with a.route "1": route_not_agent (the recipient is
--   no agent), route_unavailable (no live route lease in KEYS[9], server clock)
-- Nested requests (a.parent non-empty; issue 12, ADR 0028):
--   fence: with a.attempt non-empty the parent marker must be running as that attempt,
--     else turn_lease_lost (checked first: a stale attempt neither accepts nor re-attaches);
--   replay: an existing id (derived from parent + call order) with the same parent and
--     fingerprint re-attaches: nothing new is accepted, no hop is spent, the reserved use
--     is given back (reason replay_attached: the effect was admitted once, by the first
--     accept, whose use stays spent; ADR 0029), the replay is audited as message.replayed
--     (a.accepted retyped: exactly one of accepted/replayed is ever written) together with
--     the records written only if accepted; a different parent or fingerprint is
--     replay_conflict. A root request (a.parent "") with a taken id stays duplicate_message.
-- Route lease (a.route "1", ADR 0025): checked after the fence and the replay (a re-run
--   re-attaches whatever the route), before the hop is spent.
local a, first = named()
local decided = first - 1 + (tonumber(a.decided) or 0)
audit_open(KEYS[5], a.maxlen, a.h)
audit_add_args(first, decided)

-- release(reason): give back the reserved use, with its record (reason = why)
local function release(reason)
  if a.grant ~= '' and a.released ~= ''
      and tonumber(redis.call('HGET', KEYS[6], a.grant) or '0') > 0 then
    redis.call('HINCRBY', KEYS[6], a.grant, -1)
    local record = cjson.decode(a.released)
    record['reason'] = reason
    audit_add(cjson.encode(record))
  end
end

-- retyped(type, outcome, reason, metadata): a.accepted (the message.accepted record) as
-- another record of the same request (its event id is free: exactly one is ever written)
local function retyped(etype, outcome, reason, metadata)
  local record = cjson.decode(a.accepted)
  record['type'], record['outcome'] = etype, outcome
  record['reason'], record['metadata'] = reason, metadata
  audit_add(cjson.encode(record))
end

-- refuse(code, hops): give back the reserved use (with its record), audit the refusal
-- (message.refused, reason = code) and return it
local function refuse(code, hops)
  release(code)
  retyped('message.refused', 'denied', code, nil)
  return {code, hops}
end

-- fence (issue 12): only the attempt holding the parent's turn may cause its effects
if a.attempt ~= '' then
  local turn = redis.call('HMGET', KEYS[8], 'state', 'attempts')
  if lease_lost(turn[1], turn[2], a.attempt) then return refuse('turn_lease_lost', -1) end
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  if a.parent == '' then return refuse('duplicate_message', -1) end
  -- replay (issue 12): the same call of a re-run turn re-attaches to what it started
  local seen = redis.call('HMGET', KEYS[1], 'parent', 'fp', 'deadline', 'state')
  if seen[1] ~= a.parent or seen[2] ~= a.fp then return refuse('replay_conflict', -1) end
  release('replay_attached')
  retyped('message.replayed', 'succeeded', nil,
    {state = seen[4], attempt = tonumber(a.attempt)})
  audit_add_args(decided + 1)
  return {'attached', tonumber(seen[3]) or 0, seen[4]}
end

-- route lease (ADR 0025), a.route == "1": after authorization, before any hop is spent; a
-- route refusal gives the reserved use back like any other (never no_matching_grant)
if a.route == '1' then
  local kind, agent_id = string.match(a.to, '^([^:]*):(.*)$')
  if kind ~= 'agent' then return refuse('route_not_agent', -1) end
  local lease = tonumber(redis.call('HGET', KEYS[9], agent_id) or '0') or 0
  if lease < now_ms('') then return refuse('route_unavailable', -1) end
end
local stored = redis.call('GET', KEYS[2])
local hops = tonumber(stored or a.hops)
if hops == nil or hops < 1 then
  return refuse('budget_exhausted', 0)
end
hops = hops - 1
redis.call('SET', KEYS[2], hops, 'PX', a.budget_ttl)
redis.call('HSET', KEYS[1],
  'env', a.env, 'ctx', a.ctx, 'state', 'accepted', 'from', a.from, 'to', a.to,
  'purpose', a.purpose, 'trace', a.trace, 'created', a.now, 'deadline', a.deadline,
  'attempts', '0', 'updated', a.now, 'fp', a.fp)
if a.parent ~= '' then redis.call('HSET', KEYS[1], 'parent', a.parent) end
redis.call('ZADD', KEYS[7], a.now, a.id)
redis.call('PEXPIRE', KEYS[7], a.budget_ttl)
if a.tp ~= '' then
  redis.call('HSET', KEYS[1], 'tp', a.tp)
  redis.call('XADD', KEYS[4], '*', 'id', a.id, 'tp', a.tp)
else
  redis.call('XADD', KEYS[4], '*', 'id', a.id)
end
redis.call('PEXPIREAT', KEYS[1], tonumber(a.deadline) + tonumber(a.retention))
redis.call('ZADD', KEYS[3], a.deadline, a.id)
audit_add(a.accepted)
audit_add_args(decided + 1)
return {'accepted', hops}
