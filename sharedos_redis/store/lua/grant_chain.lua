-- grant_chain: one grant and its ancestors, by id, in one round trip (delegation chains).
-- KEYS[1] grant id index  sos:{ns}:grant-ids   (grant id -> subject tag "<kind>:<id>")
-- ARGV[1] the namespace's grants key prefix "sos:{ns}:grants:" (the subject hashes share
--         KEYS[1]'s hash tag, so every key read here is on its slot)
-- ARGV[2] the first grant id   ARGV[3] the most grants to return
-- returns the grants' JSON in order; stops where a grant names no parent or an id is unknown
local out, id = {}, ARGV[2]
while id and #out < tonumber(ARGV[3]) do
  local tag = redis.call('HGET', KEYS[1], id)
  if not tag then break end
  local raw = redis.call('HGET', ARGV[1] .. tag, id)
  if not raw then break end
  out[#out + 1] = raw
  local ok, grant = pcall(cjson.decode, raw)
  if not ok or type(grant) ~= 'table' or type(grant['parentGrantId']) ~= 'string' then break end
  id = grant['parentGrantId']
end
return out
