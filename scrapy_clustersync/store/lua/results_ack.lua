-- results_ack: a reader group acknowledges the results it processed (XACK), then the job's
-- results stream is trimmed to the oldest entry that some registered group has not acknowledged
-- yet (XTRIM MINID): an entry leaves the stream only once EVERY group acknowledged it, so the
-- slowest reader sets the pace. With no group registered nothing is trimmed (an export reads
-- without a group, and without deleting). Re-runnable: acking an acked id changes nothing, and
-- the trim bound only moves forward.
--
-- A group's bound: its oldest pending entry (delivered, not acknowledged), else the entry after
-- its last delivered one (everything up to that is acknowledged); the stream keeps every entry
-- from the lowest bound of all groups on.
--
-- (store/results_store.py ResultsAckScript builds the call and reads the answer.)
--
-- KEYS[1]  results  stream  the job's results (store/keys.py)
-- ARGV[1]  group    string  the reader group that acknowledges ("" only trims)
-- ARGV[2..] id      string  stream ids the group processed
-- Returns {acked, trimmed}: how many ids the XACK took, how many entries the XTRIM removed.
-- Bounded: XACK a run of ids at a time (prelude send_in_batches), one XPENDING per group (a job
-- has a handful of reader groups), one XTRIM.
local results_key = KEYS[1]
local group = ARGV[1]
local id_from = 2

local function parse_id(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return tonumber(ms), tonumber(seq)
end

local function id_below(a, b)
  local a_ms, a_seq = parse_id(a)
  local b_ms, b_seq = parse_id(b)
  return a_ms < b_ms or (a_ms == b_ms and a_seq < b_seq)
end

-- the id right after `id`; a sequence past 2^53 (never auto ids) keeps `id` itself: one entry
-- more stays, which is safe
local function next_id(id)
  local ms, seq = parse_id(id)
  if seq >= 9007199254740991 then return id end
  return string.format('%d-%d', ms, seq + 1)
end

local function field(flat, name)
  for i = 1, #flat, 2 do
    if flat[i] == name then return flat[i + 1] end
  end
  return nil
end

if redis.call('TYPE', results_key)['ok'] ~= 'stream' then
  return {0, 0}
end
local acked = 0
local ids = {}
for i = id_from, #ARGV do ids[#ids + 1] = ARGV[i] end
if group ~= '' and #ids > 0 then
  in_batches(#ids, function(first, last)
    acked = acked + redis.call('XACK', results_key, group, unpack(ids, first, last))
  end)
end

local bound = nil
for _, info in ipairs(redis.call('XINFO', 'GROUPS', results_key)) do
  local name = field(info, 'name')
  local pending = redis.call('XPENDING', results_key, name)
  local own
  if tonumber(pending[1]) > 0 then
    own = pending[2]
  else
    own = next_id(field(info, 'last-delivered-id'))
  end
  if bound == nil or id_below(own, bound) then bound = own end
end
if bound == nil then
  return {acked, 0}
end
return {acked, redis.call('XTRIM', results_key, 'MINID', bound)}
