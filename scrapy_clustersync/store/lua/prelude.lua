-- prelude: prepended to every script of the job when it is loaded (store/script_base.py
-- load_lua). Its functions take every key and argument they need as parameters: none reads KEYS
-- or ARGV.
--
-- wrong_type({{key, type}, ...}): an error reply if a key holds another type than the script
-- writes to it (another program wrote into the job's keys), else nil. Scripts check this before
-- their first write: Redis does not roll a script back, so a WRONGTYPE error half way would
-- leave its writes half applied. A key that does not exist is fine.
local function wrong_type(expected)
  for _, pair in ipairs(expected) do
    local found = redis.call('TYPE', pair[1])['ok']
    if found ~= 'none' and found ~= pair[2] then
      return redis.error_reply('CLUSTERSYNC_WRONG_TYPE ' .. pair[1] .. ' holds a ' .. found ..
                               ', not a ' .. pair[2])
    end
  end
  return nil
end

-- bump_writes(key, expected): the node's write counter in ``key`` (its call hash), bumped by
-- one; or nil and an error reply if it is below ``expected``, what the node last saw: Redis came
-- back older than that (see flush.lua). -1 = do not check.
-- The call hash never expires while the node may still send writes: a node that stopped while
-- Redis was away left them in a spool, replayed under its id whenever a node starts there
-- again, and a missing counter would read as a rollback (its acks turned into releases). It
-- gets CALL_RECORD_KEEP_MS once the node is done: its leaving heartbeat (heartbeat.lua), or the
-- replay of its spool (store/job_store.py retire_calls).
local CALL_RECORD_KEEP_MS = 86400000  -- a day: a retried call of a node that left still finds it

local function bump_writes(key, expected)
  local writes = tonumber(redis.call('HGET', key, 'writes') or '0')
  if writes < tonumber(expected) then
    return nil, redis.error_reply('CLUSTERSYNC_ROLLED_BACK ' .. writes .. ' ' .. expected)
  end
  redis.call('HSET', key, 'writes', writes + 1)
  return writes + 1
end


-- lease_value(score, node): what the leased hash holds for an entry leased to ``node``:
-- "<queue score>|<node>", the score putting the entry back in its place when the lease ends
-- (store/records.py LeaseValue parses it). parse_lease(value): its score and node; nil, nil for
-- a missing value (HGET's false) or one of another form.
local function lease_value(score, node)
  return score .. '|' .. node
end

local function parse_lease(value)
  if not value then return nil, nil end
  return string.match(value, '^([^|]*)|(.*)$')
end

-- The fields of the meta hash that say how the job's last run ended (heartbeat.lua writes them
-- when it first finds the job finished) and who runs start(); restart_job(meta, now_ms) clears
-- them, so that start() runs again on the next node: what `clustersync restart` and
-- CLUSTERSYNC_RECRAWL do (the queue, stats and dedup record are left alone).
local FINISH_FIELDS = {'finished_ms', 'finished_pages', 'finished_nodes', 'finished_idle_ms'}

-- The job's dedup record, which a script that may forget it gets as its KEYS from `first` on:
-- the exact set (seen), the bloom hash, then the Bloom chunk strings that hash names; and, as its
-- ARGV from `fields_from` on, the bloom hash as the caller read it to name those chunks (field,
-- value pairs). dedup_unchanged(keys, first, argv, fields_from) is false if the hash changed
-- since (the caller reads it again and retries); forget_dedup(keys, first) deletes the record.
local function dedup_unchanged(keys, first, argv, fields_from)
  local bloom = keys[first + 1]
  if redis.call('HLEN', bloom) * 2 ~= #argv - fields_from + 1 then
    return false
  end
  for i = fields_from, #argv, 2 do
    if redis.call('HGET', bloom, argv[i]) ~= argv[i + 1] then
      return false
    end
  end
  return true
end

local function forget_dedup(keys, first)
  redis.call('UNLINK', unpack(keys, first))
end

local function restart_job(meta, now_ms)
  redis.call('HDEL', meta, 'start_done', 'start_claim', FINISH_FIELDS[1], FINISH_FIELDS[2], FINISH_FIELDS[3], FINISH_FIELDS[4])
  redis.call('HINCRBY', meta, 'restarts', 1)
  redis.call('HSET', meta, 'restarted_ms', now_ms)
end
