-- _prelude: the helpers every script shares; store/scripts.py puts this text in front
-- of each script when it loads it (one script body per verb, no repeated blocks).

-- now_ms(override): ``override`` (tests) unless it is "" or nil, else the Redis
-- server's TIME in ms, so every process agrees on deadlines and leases.
local function now_ms(override)
  if override ~= nil and override ~= '' then return tonumber(override) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- append_event(audit, maxlen, ctx_json, fields): one audit record attributed to the
-- stored requester context (traceId, namespaceId, actor, authority, owner, purpose)
-- plus ``fields`` (id, type, outcome, at, ...); nothing when ctx_json is no JSON object.
local function append_event(audit, maxlen, ctx_json, fields)
  local ok, ctx = pcall(cjson.decode, ctx_json or '')
  if not ok or type(ctx) ~= 'table' then return false end
  local event = {
    version = '2', traceId = ctx['traceId'], namespaceId = ctx['namespaceId'],
    actor = ctx['actor'], authority = ctx['authority'], owner = ctx['owner'],
    purpose = ctx['purpose'],
  }
  for name, value in pairs(fields) do event[name] = value end
  redis.call('XADD', audit, 'MAXLEN', '~', maxlen, '*', 'e', cjson.encode(event))
  return true
end

-- end_request(marker, open, leases, id, retention, ...): the terminal transition's
-- cleanup: HSET the given field/value pairs, drop the lease, leave both indexes,
-- PEXPIRE the marker to its retention.
local function end_request(marker, open, leases, id, retention, ...)
  redis.call('HSET', marker, ...)
  redis.call('HDEL', marker, 'lease')
  redis.call('ZREM', open, id)
  redis.call('ZREM', leases, id)
  redis.call('PEXPIRE', marker, retention)
end

-- announce(settled, maxlen, id, state, result): the settlement entry that wakes the
-- waiter ({id, state[, result]}: a failure code; a reply stays in the marker only).
local function announce(settled, maxlen, id, state, result)
  if result then
    redis.call('XADD', settled, 'MAXLEN', '~', maxlen, '*', 'id', id, 'state', state,
      'result', result)
  else
    redis.call('XADD', settled, 'MAXLEN', '~', maxlen, '*', 'id', id, 'state', state)
  end
end

-- carry(audit, maxlen, first): append ARGV[first..] as audit records (wire JSON): records
-- the caller had queued, written in order ahead of this script's own (an audit outbox).
local function carry(audit, maxlen, first)
  for i = first, #ARGV do
    redis.call('XADD', audit, 'MAXLEN', '~', maxlen, '*', 'e', ARGV[i])
  end
end

-- dead_letter(dead, maxlen, id, reason, at): one dead-letter entry {id, reason, at}.
local function dead_letter(dead, maxlen, id, reason, at)
  redis.call('XADD', dead, 'MAXLEN', '~', maxlen, '*', 'id', id, 'reason', reason, 'at', at)
end


-- lease_lost(state, attempts, token): why attempt ``token`` no longer holds the turn
-- lease (the fencing check of a turn's own effects), or nil when it does or when
-- ``token`` is "" (an unfenced caller: router cancel, reconciler, dead-lettering).
-- The cause is 'attempt' when another attempt has claimed the request since, else the
-- state it left 'running' for under this attempt (cancelled, timed_out, dispatched...),
-- 'missing' when the record is gone.
local function lease_lost(state, attempts, token)
  if token == nil or token == '' then return nil end
  if not state then return 'missing' end
  if tonumber(attempts or '0') > tonumber(token) then return 'attempt' end
  if state ~= 'running' or attempts ~= token then return state end
  return nil
end

-- fence_metadata(token, attempts): the stale and the current attempt, for the refusal record.
local function fence_metadata(token, attempts)
  return {attempt = tonumber(token), currentAttempt = tonumber(attempts or '0')}
end

-- refuse(audit, maxlen, ctx_json, fallback_json, fields): one refusal record attributed to
-- the stored context, or to ``fallback_json`` when none is readable (records never drop).
local function refuse(audit, maxlen, ctx_json, fallback_json, fields)
  if not append_event(audit, maxlen, ctx_json, fields) then
    append_event(audit, maxlen, fallback_json, fields)
  end
end
