-- settings: change some of a job's shared settings, all or nothing, as one new version. The
-- values are the `settings` hash (setting name -> canonical JSON of its value); the version is
-- the meta field `settings_version` (absent = 0), bumped by one per call that changes a value;
-- each changed key gets one record in the `settings_log` list (oldest first, trimmed to the
-- newest `history_keep`). Setting a key to the value it holds changes nothing and records
-- nothing. The values are validated by the caller (scrapy_clustersync/live_settings.py): the
-- script stores what it is given.
-- A change is PUBLISHed on the job's control channel as "settings <version>", best effort
-- (redis.pcall), as control.lua does: an ACL user without pub/sub permission still changes the
-- settings, which the nodes then find on their next re-read of `settings_version`.
-- Re-runnable: the meta field `settings_call` keeps the call id and reply of the last call that
-- changed something; the same call id again (redis-py retrying a call that timed out) answers
-- that reply and changes nothing more.
--
-- (store/shared_settings.py SettingsScript builds the call and reads the answer.)
--
-- KEYS[1]  meta           hash    epoch, settings_version, settings_call
-- KEYS[2]  settings       hash    setting name -> canonical JSON of its value
-- KEYS[3]  settings_log   list    one JSON record per changed key, oldest first
-- ARGV[1]  expect_version string  the version the change is made on ("" = whichever is current)
-- ARGV[2]  call_id        string  unique per call (a retried call sends the same)
-- ARGV[3]  who            string  "user@host" of the CLI, for the history
-- ARGV[4]  history_keep   int     how many records the log keeps at most (>= 1)
-- ARGV[5]  channel        string  the job's control channel (store/keys.py JobKeys.control_channel)
-- ARGV[6..] change        string  pairs: setting name, canonical JSON of its new value ("" =
--                                 unset it)
-- Returns {verdict, version, ms, changed key...}: verdict is "changed" (a new version; the keys
-- whose value changed follow), "same" (every value was already so: nothing done), "stale"
-- (expect_version is not the current version: nothing done) or "absent" (no such job); version
-- is the current version after the call; ms is the server ms of the change ("" unless changed).
-- Bounded: two hash fields, HGET and HSET/HDEL per pair, one RPUSH per changed key, one LTRIM.
local meta_key = KEYS[1]
local settings_key = KEYS[2]
local settings_log_key = KEYS[3]
local expect_version = ARGV[1]
local call_id = ARGV[2]
local who = ARGV[3]
local history_keep = tonumber(ARGV[4])
local channel = ARGV[5]
local change_from = 6
local bad = wrong_type({meta_key, 'hash', settings_key, 'hash', settings_log_key, 'list'})
if bad then return bad end
if not redis.call('HGET', meta_key, 'epoch') then
  return {'absent', '0', ''}
end
local last = redis.call('HGET', meta_key, 'settings_call')
if last then
  local last_id, reply = string.match(last, '^([^\n]*)\n(.*)$')
  if last_id == call_id then return cjson.decode(reply) end
end
local version = tonumber(redis.call('HGET', meta_key, 'settings_version') or '0')
if expect_version ~= '' and tonumber(expect_version) ~= version then
  return {'stale', tostring(version), ''}
end
-- what changes: the pairs whose value differs from the one stored
local changed = {}
for i = change_from, #ARGV, 2 do
  local old = redis.call('HGET', settings_key, ARGV[i])
  local new = ARGV[i + 1]
  if new == '' then new = false end
  if old ~= new then changed[#changed + 1] = {ARGV[i], old, new} end
end
if #changed == 0 then
  return {'same', tostring(version), ''}
end
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
version = version + 1
local head = '{"version":' .. version .. ',"ms":' .. now_ms .. ',"who":' .. cjson.encode(who)
local reply = {'changed', tostring(version), tostring(now_ms)}
for _, each in ipairs(changed) do
  local key, old, new = each[1], each[2], each[3]
  if new then redis.call('HSET', settings_key, key, new)
  else redis.call('HDEL', settings_key, key) end
  -- the values are JSON already: concatenated, not re-encoded (cjson would write 1.0 as 1)
  redis.call('RPUSH', settings_log_key, head .. ',"key":' .. cjson.encode(key) .. ',"old":' ..
             (old or 'null') .. ',"new":' .. (new or 'null') .. '}')
  reply[#reply + 1] = key
end
redis.call('LTRIM', settings_log_key, -history_keep, -1)
redis.call('HSET', meta_key, 'settings_version', version,
           'settings_call', call_id .. '\n' .. cjson.encode(reply))
redis.pcall('PUBLISH', channel, 'settings ' .. version)  -- best effort: see the header
return reply
