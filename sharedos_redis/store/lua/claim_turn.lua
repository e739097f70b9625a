-- claim_turn: take the turn lease of an open request (dispatched -> running).
-- A request that is accepted or dispatched, or running with an expired lease, is
-- claimed: attempts + 1, lease = now + lease_ms (indexed in the leases zset),
-- turn.started audited. A request that already used max_attempts turns is
-- dead-lettered instead: state dead, code request_dead_lettered, removed from the
-- open and leases indexes, PEXPIRE retention, one dead-letter entry, one
-- settlement entry (its waiter wakes) and a request.dead_lettered audit record.
-- Handed over by the relay (a.entry the outbox entry id, issue 11): the claim also
-- retires that outbox entry (XACK + XDEL, whatever the outcome) and, claiming an
-- accepted request, audits message.dispatched ahead of turn.started: what the relay's
-- dispatch_request would have done, in the same step as the claim.
-- Time is the Redis server's TIME unless a.now overrides it (tests).
-- KEYS[1] marker hash  sos:{ns}:msg:<id>     KEYS[2] leases zset  sos:{ns}:leases
-- KEYS[3] open zset    sos:{ns}:open         KEYS[4] settled stream sos:{ns}:settled
-- KEYS[5] audit stream sos:{ns}:audit        KEYS[6] dead stream  sos:{ns}:dead
-- KEYS[7] outbox       sos:{ns}:outbox
-- ARGV named (named() in _prelude.lua, store/scripts.py named_args):
--   a.id message id        a.lease lease ms        a.max_attempts max attempts
--   a.worker worker name   a.now now ms or ""      a.retention retention ms
--   a.settled_maxlen settled MAXLEN ~   a.audit_maxlen audit MAXLEN ~
--   a.dead_maxlen dead MAXLEN ~         a.event audit event id   a.at now RFC 3339
--   a.group the relay's consumer group  a.entry its outbox entry id or "" (not handed over)
--   a.dispatched the message.dispatched audit event id (with a.entry)
-- returns {outcome, attempt, env, deadline, traceparent}; outcome is claimed | busy |
--   closed (terminal) | missing | dead (dead-lettered by this call)
local a = named()
local function audit(ctx_json, etype, outcome, reason, metadata, id)
  append_event(KEYS[5], a.audit_maxlen, ctx_json, {id = id or a.event, type = etype,
    outcome = outcome, at = a.at, messageId = a.id, reason = reason,
    metadata = metadata})
end

if a.entry ~= '' then
  redis.call('XACK', KEYS[7], a.group, a.entry)
  redis.call('XDEL', KEYS[7], a.entry)
end
local m = redis.call('HMGET', KEYS[1], 'state', 'attempts', 'lease', 'deadline', 'env', 'ctx',
  'tp')
local state = m[1]
if not state then return {'missing', 0, '', 0} end
local attempts = tonumber(m[2]) or 0
local deadline = m[4] or '0'
if state ~= 'accepted' and state ~= 'dispatched' and state ~= 'running' then
  return {'closed', attempts, '', deadline}
end
local now = now_ms(a.now)
local now_s = string.format('%d', now)
if state == 'running' and (tonumber(m[3]) or 0) > now then
  return {'busy', attempts, '', deadline}
end
if state == 'accepted' and a.entry ~= '' then
  audit(m[6], 'message.dispatched', 'succeeded', nil, nil, a.dispatched)
end
if attempts >= tonumber(a.max_attempts) then
  local code = 'request_dead_lettered'
  end_request(KEYS[1], KEYS[3], KEYS[2], a.id, a.retention, 'state', 'dead', 'code', code,
    'updated', now_s)
  dead_letter(KEYS[6], a.dead_maxlen, a.id, code, a.at)
  announce(KEYS[4], a.settled_maxlen, a.id, 'dead', code)
  audit(m[6], 'request.dead_lettered', 'failed', code, nil)
  return {'dead', attempts, '', deadline}
end
attempts = attempts + 1
local lease = string.format('%d', now + tonumber(a.lease))
redis.call('HSET', KEYS[1], 'state', 'running', 'attempts', string.format('%d', attempts),
  'lease', lease, 'updated', now_s)
redis.call('ZADD', KEYS[2], lease, a.id)
audit(m[6], 'turn.started', 'succeeded', nil, {worker = a.worker, attempt = attempts})
return {'claimed', attempts, m[5], deadline, m[7] or ''}
