-- forget_missing: remove the ids of vanished request records from every index.
-- A request record (marker hash) that expired or was evicted while still open leaves
-- its id in the open and leases indexes. For each id whose record is gone (checked
-- here, so the check and the removal are atomic): ZREM open + leases and, if an index
-- held it, one dead-letter entry {id, reason, at} and one settlement entry
-- {id, state = "expired", result = reason} (its waiter wakes, finds no record and
-- ends with a typed outcome). An id whose record exists, or that no index holds, is
-- left alone, so calling this twice records once. The outbox needs nothing: the relay
-- retires an entry whose record is gone.
-- KEYS[1] open zset   sos:{ns}:open        KEYS[2] leases zset  sos:{ns}:leases
-- KEYS[3] settled stream sos:{ns}:settled  KEYS[4] dead stream  sos:{ns}:dead
-- KEYS[5..] marker hashes sos:{ns}:msg:<id>, one per id, in the order of ARGV[5..]
-- ARGV[1] reason code   ARGV[2] now RFC 3339   ARGV[3] settled MAXLEN ~
-- ARGV[4] dead MAXLEN ~   ARGV[5..] message ids
-- returns the ids forgotten by this call
local forgotten = {}
for i = 5, #ARGV do
  local id = ARGV[i]
  if redis.call('EXISTS', KEYS[i]) == 0 then
    local held = redis.call('ZREM', KEYS[1], id) + redis.call('ZREM', KEYS[2], id)
    if held > 0 then
      dead_letter(KEYS[4], ARGV[4], id, ARGV[1], ARGV[2])
      announce(KEYS[3], ARGV[3], id, 'expired', ARGV[1])
      forgotten[#forgotten + 1] = id
    end
  end
end
return forgotten
