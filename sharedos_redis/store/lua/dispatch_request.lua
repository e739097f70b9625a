-- dispatch_request: after the relay woke the recipient, retire one outbox entry.
-- Moves the marker accepted -> dispatched (only if still accepted: a worker may
-- already run it, or it may be settled), appends message.dispatched to the audit
-- stream (attributed to the requester's stored context), and XACKs + XDELs the
-- entry so the outbox holds only undispatched entries.
-- KEYS[1] marker hash   sos:{ns}:msg:<id>
-- KEYS[2] outbox        sos:{ns}:outbox
-- KEYS[3] audit         sos:{ns}:audit
-- ARGV named (named() in _prelude.lua, store/scripts.py named_args):
--   a.group consumer group   a.entry outbox entry id   a.id message id
--   a.now now ms   a.at now RFC 3339   a.event audit event id   a.audit_maxlen audit MAXLEN ~
-- returns 1 dispatched; 0 acked only (marker gone or no longer accepted);
--        -1 acked only, the stored context is unreadable (left to the reconciler)
local a = named()
local marker = redis.call('HMGET', KEYS[1], 'state', 'ctx')
redis.call('XACK', KEYS[2], a.group, a.entry)
redis.call('XDEL', KEYS[2], a.entry)
if marker[1] ~= 'accepted' then
  return 0
end
if not append_event(KEYS[3], a.audit_maxlen, marker[2], {id = a.event,
    type = 'message.dispatched', outcome = 'succeeded', at = a.at, messageId = a.id}) then
  return -1
end
redis.call('HSET', KEYS[1], 'state', 'dispatched', 'updated', a.now)
return 1
