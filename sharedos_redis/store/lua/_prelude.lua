-- _prelude: the helpers every script shares; store/scripts.py puts this text in front
-- of each script when it loads it (one script body per verb, no repeated blocks).

-- named(): this call's named arguments (store/scripts.py named_args builds them): ARGV[1]
-- the number of pairs, then each name and its value; returns the table of values by
-- name and the index of the first argument after the pairs (carried records, ...).
-- The names a script reads are the a.<name> its header declares (tests check both sides).
-- Cost (measured on real scripts, paired with the positional ones): ~2 us for 7 pairs,
-- ~2.5-3 us for 14 (the longer ARGV, the loop and the table's growth; presizing the table
-- with a constructor saved nothing measurable).
local function named()
  local argv = ARGV  -- a local: reading the global in the loop costs ~1 us more (14 pairs)
  local a, last = {}, 2 * tonumber(argv[1])
  for i = 2, last, 2 do a[argv[i]] = argv[i + 1] end
  return a, last + 2
end

-- now_ms(override): ``override`` (tests) unless it is "" or nil, else the Redis
-- server's TIME in ms, so every process agrees on deadlines and leases.
local function now_ms(override)
  if override ~= nil and override ~= '' then return tonumber(override) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- This script's audit entry (issue 11): every record a script writes goes into ONE stream
-- entry, appended by audit_flush() after the script body (store/scripts.py puts that call
-- after every script). Layout (store/audit.py, decode_entry is its reader): 'h', the
-- attribution the records share, then 'e', 'e2', ... each record without the keys equal
-- to h's (an attribution key a record lacks is null); a lone record without h is whole.
local ATTRIBUTION = {'version', 'traceId', 'namespaceId', 'actor', 'authority', 'owner',
  'purpose'}
local audit_entry = {key = nil, maxlen = nil, head = nil, records = {}}

-- audit_open(audit, maxlen, head): the stream and MAXLEN ~ of this script's entry, and its
-- header (JSON text from store/audit.py compact_records; "" or nil: none yet)
local function audit_open(audit, maxlen, head)
  audit_entry.key, audit_entry.maxlen = audit, maxlen
  if head ~= nil and head ~= '' then audit_entry.head = head end
end

-- audit_add(record): queue one record (JSON text compacted against the header)
local function audit_add(record)
  audit_entry.records[#audit_entry.records + 1] = record
end

-- audit_flush(): append the queued records as one entry (nothing when none)
local function audit_flush()
  local e = audit_entry
  if #e.records == 0 then return end
  local args = {'XADD', e.key, 'MAXLEN', '~', e.maxlen, '*'}
  if e.head then
    args[#args + 1], args[#args + 2] = 'h', e.head
  end
  for i, record in ipairs(e.records) do
    args[#args + 1] = i == 1 and 'e' or ('e' .. i)
    args[#args + 1] = record
  end
  redis.call((table.unpack or unpack)(args))
end

-- append_event(audit, maxlen, ctx_json, fields): queue one audit record attributed to the
-- stored requester context (traceId, namespaceId, actor, authority, owner, purpose) plus
-- ``fields`` (id, type, outcome, at, ...); nothing when ctx_json is no JSON object. The
-- first record of an entry sets its header; a later one carries its whole attribution.
local function append_event(audit, maxlen, ctx_json, fields)
  local ok, ctx = pcall(cjson.decode, ctx_json or '')
  if not ok or type(ctx) ~= 'table' then return false end
  local head = {version = '2'}
  for i = 2, #ATTRIBUTION do head[ATTRIBUTION[i]] = ctx[ATTRIBUTION[i]] end
  local record = {}
  for name, value in pairs(fields) do record[name] = value end
  audit_open(audit, maxlen, nil)
  if audit_entry.head == nil and #audit_entry.records == 0 then
    audit_entry.head = cjson.encode(head)
  else
    for _, name in ipairs(ATTRIBUTION) do
      if head[name] == nil then record[name] = cjson.null else record[name] = head[name] end
    end
  end
  audit_add(cjson.encode(record))
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

-- audit_add_args(from, to): queue ARGV[from..to] (to nil: to the last) as audit records,
-- the records a caller passes after the named arguments (JSON compacted against the header)
local function audit_add_args(from, to)
  for i = from, to or #ARGV do audit_add(ARGV[i]) end
end

-- carry(audit, maxlen, first): queue ARGV[first + 1..] as audit records compacted against
-- the header ARGV[first] (store/audit.py compact_records): records the caller had queued,
-- written in order ahead of this script's own, in its entry (an audit outbox); ``first``
-- is the index named() returns when they follow the named arguments
local function carry(audit, maxlen, first)
  audit_open(audit, maxlen, ARGV[first])
  audit_add_args(first + 1)
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
