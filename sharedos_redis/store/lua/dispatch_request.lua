-- dispatch_request: after the relay woke the recipient, retire one outbox entry.
-- Moves the marker accepted -> dispatched (only if still accepted: a worker may
-- already run it, or it may be settled), appends message.dispatched to the audit
-- stream (attributed to the requester's stored context), and XACKs + XDELs the
-- entry so the outbox holds only undispatched entries.
-- KEYS[1] marker hash   sos:{ns}:msg:<id>
-- KEYS[2] outbox        sos:{ns}:outbox
-- KEYS[3] audit         sos:{ns}:audit
-- ARGV[1] consumer group    ARGV[2] outbox entry id    ARGV[3] message id
-- ARGV[4] now ms            ARGV[5] now RFC 3339       ARGV[6] audit event id
-- ARGV[7] audit MAXLEN ~
-- returns 1 dispatched; 0 acked only (marker gone or no longer accepted);
--        -1 acked only, the stored context is unreadable (left to the reconciler)
local marker = redis.call('HMGET', KEYS[1], 'state', 'ctx')
redis.call('XACK', KEYS[2], ARGV[1], ARGV[2])
redis.call('XDEL', KEYS[2], ARGV[2])
if marker[1] ~= 'accepted' then
  return 0
end
if not append_event(KEYS[3], ARGV[7], marker[2], {id = ARGV[6], type = 'message.dispatched',
    outcome = 'succeeded', at = ARGV[5], messageId = ARGV[3]}) then
  return -1
end
redis.call('HSET', KEYS[1], 'state', 'dispatched', 'updated', ARGV[4])
return 1
