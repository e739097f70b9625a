-- cascade_cancel: end every open descendant of an ended request (the cascade's root) as
-- cancelled, reason request_cascade_cancelled, atomically. The tree is the trace's
-- requests linked by their markers' parent fields; the caller passes the marker key of
-- every request of the trace (read from the trace index just before) and the script
-- refuses if the index changed meanwhile (the caller reads it again). Each cancelled
-- descendant gets the terminal cleanup of settle_failure: HSET state/code/updated, lease
-- dropped, ZREM open + leases, PEXPIRE retention, a settlement entry {id, cancelled,
-- request_cascade_cancelled} (its waiter and the worker running its turn wake) and a
-- request.cancelled audit record with metadata {cascadeRoot = root id}. Descendants below
-- an already ended request are still reached (an open grandchild is an orphan too).
-- KEYS[1] root marker  sos:{ns}:msg:<root>   KEYS[2] trace index sos:{ns}:trace:<trace>
-- KEYS[3] open zset    KEYS[4] leases zset    KEYS[5] settled stream   KEYS[6] audit stream
-- KEYS[7..6+n] the marker of the i-th id of a.ids
-- ARGV[1] named arguments, one JSON object: root (root id), ids (the trace's ids, in the
--   order of KEYS[7..]), events (one audit event id per id), code (reason code),
--   now (ms or "": server TIME), at (RFC 3339), retention (ms), settled_maxlen,
--   audit_maxlen
-- returns {"cascaded", id...} (the ids this call cancelled) | {"request_open"} (the root
--   has not ended) | {"unknown_request"} | {"trace_changed"} (read the index again)
local a = cjson.decode(ARGV[1])
local root_state = redis.call('HGET', KEYS[1], 'state')
if not root_state then return {'unknown_request'} end
if root_state == 'accepted' or root_state == 'dispatched' or root_state == 'running' then
  return {'request_open'}
end
if redis.call('ZCARD', KEYS[2]) ~= #a.ids then return {'trace_changed'} end

local children, rows = {}, {}
for i, id in ipairs(a.ids) do
  local m = redis.call('HMGET', KEYS[6 + i], 'parent', 'state', 'ctx')
  rows[id] = {key = KEYS[6 + i], state = m[2], ctx = m[3], event = a.events[i]}
  if m[1] then
    children[m[1]] = children[m[1]] or {}
    table.insert(children[m[1]], id)
  end
end

local now = string.format('%d', now_ms(a.now))
local cancelled, queue, seen = {'cascaded'}, {a.root}, {[a.root] = true}
local head = 1
while head <= #queue do
  local parent = queue[head]
  head = head + 1
  for _, id in ipairs(children[parent] or {}) do
    if not seen[id] then
      seen[id] = true
      table.insert(queue, id)
      local row = rows[id]
      if row.state == 'accepted' or row.state == 'dispatched' or row.state == 'running' then
        end_request(row.key, KEYS[3], KEYS[4], id, a.retention, 'state', 'cancelled',
          'code', a.code, 'updated', now)
        announce(KEYS[5], a.settled_maxlen, id, 'cancelled', a.code)
        append_event(KEYS[6], a.audit_maxlen, row.ctx, {id = row.event,
          type = 'request.cancelled', outcome = 'failed', at = a.at, messageId = id,
          reason = a.code, metadata = {cascadeRoot = a.root}})
        table.insert(cancelled, id)
      end
    end
  end
end
return cancelled
