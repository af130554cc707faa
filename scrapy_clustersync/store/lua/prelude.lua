-- prelude: prepended to every script of the job when it is loaded (store/script_base.py
-- load_lua). Its functions take every key and argument they need as parameters: none reads KEYS
-- or ARGV.
--
-- wrong_type({key, type, key, type, ...}): an error reply if a key holds another type than the
-- script writes to it (another program wrote into the job's keys), else nil. Scripts check this
-- before their first write: Redis does not roll a script back, so a WRONGTYPE error half way
-- would leave its writes half applied. A key that does not exist is fine. (A flat list: every
-- call of the busy scripts builds one, and a table per pair is garbage Lua must collect.)
local function wrong_type(expected)
  for i = 1, #expected, 2 do
    local found = redis.call('TYPE', expected[i])['ok']
    if found ~= 'none' and found ~= expected[i + 1] then
      return redis.error_reply('CLUSTERSYNC_WRONG_TYPE ' .. expected[i] .. ' holds a ' .. found ..
                               ', not a ' .. expected[i + 1])
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


-- lease_value(score, node, where): what the leased hash holds for an entry leased to ``node``:
-- "<queue score>|<node>" for an entry of the legacy queue (frontier.lua), else
-- "<queue score>|<node>\n<where>" (``where``: frontier.lua frontier_where, its kind and site),
-- what puts the entry back in its place when the lease ends (store/records.py LeaseValue parses
-- it). parse_lease(value): its score, node and where ("" for the legacy queue); nil, nil for a
-- missing value (HGET's false) or one of another form.
local function lease_value(score, node, where)
  if where and where ~= '' then return score .. '|' .. node .. '\n' .. where end
  return score .. '|' .. node
end

local function parse_lease(value)
  if not value then return nil, nil end
  local score, owner, where = string.match(value, '^([^|]*)|([^\n]*)\n?(.*)$')
  return score, owner, where
end

-- in_batches(n, visit): visit(first, last) for each run of at most ARG_BATCH of the indexes
-- 1..n, in order: a list's values go to a command a run at a time (Lua's unpack is bounded). A
-- list of pairs keeps its pairs whole, ARG_BATCH being even.
local ARG_BATCH = 1000
local function in_batches(n, visit)
  for first = 1, n, ARG_BATCH do visit(first, math.min(n, first + ARG_BATCH - 1)) end
end

-- send_in_batches(command, key, values[, option]): `command key [option] values...`, a run of
-- values per call (in_batches)
local function send_in_batches(command, key, values, option)
  in_batches(#values, function(first, last)
    if option then
      redis.call(command, key, option, unpack(values, first, last))
    else
      redis.call(command, key, unpack(values, first, last))
    end
  end)
end

-- queued_count(meta, legacy): the requests queued in the job: the frontier's (frontier.lua keeps
-- their count in the meta hash) and the legacy queue's
local function queued_count(meta, legacy)
  return tonumber(redis.call('HGET', meta, 'fqueued') or '0') + redis.call('ZCARD', legacy)
end

-- The fields of the meta hash that say how the job's last run ended (heartbeat.lua writes them
-- when it first finds the job finished) and who runs start(); restart_job(meta, now_ms, run)
-- clears them and starts the next run (see Runs below), so that start() runs again on the next
-- node: what `clustersync restart` and CLUSTERSYNC_RECRAWL do (the queue, stats and dedup
-- record are left alone).
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

-- Runs: a job's run starts when the job is created (start_run, run 1) and at each restart
-- (restart_job, the next run). The meta hash holds the run's number ('run'), its start
-- ('run_started_ms', server ms) and the job's figures as they were then ('run_base', JSON:
-- the stats counters, pages, items, seen), so that `clustersync status` shows this run's figures
-- beside the job's totals (store/job_runs.py reads them). ``run`` takes the job's figure keys:
-- {stats=, scrapy_stats=, seen=, bloom=}; it is called after a forgotten dedup record is gone.
local function start_run(meta, now_ms, run, number)
  local base = {}
  local counters = redis.call('HGETALL', run.stats)  -- a handful of counters
  for i = 1, #counters, 2 do base[counters[i]] = tonumber(counters[i + 1]) end
  local summed = redis.call('HMGET', run.scrapy_stats, 'response_received_count',
                            'item_scraped_count')
  base['pages'] = tonumber(summed[1] or '0')
  base['items'] = tonumber(summed[2] or '0')
  local seen = redis.call('SCARD', run.seen)
  local layers = tonumber(redis.call('HGET', run.bloom, 'layers') or '0')
  for i = 0, layers - 1 do  -- a filter has a few layers
    seen = seen + tonumber(redis.call('HGET', run.bloom, 'count' .. i) or '0')
  end
  base['seen'] = seen
  redis.call('HSET', meta, 'run', number, 'run_started_ms', now_ms, 'run_base', cjson.encode(base))
end

local function restart_job(meta, now_ms, run)
  redis.call('HDEL', meta, 'start_done', 'start_claim', FINISH_FIELDS[1], FINISH_FIELDS[2], FINISH_FIELDS[3], FINISH_FIELDS[4])
  local restarts = redis.call('HINCRBY', meta, 'restarts', 1)
  redis.call('HSET', meta, 'restarted_ms', now_ms)
  -- a job created before runs were numbered: its run is one more than its restarts
  local number = tonumber(redis.call('HGET', meta, 'run') or restarts) + 1
  start_run(meta, now_ms, run, number)
end

-- prune_nodes(k, now_ms, retention_ms, limit): forget at most ``limit`` nodes whose last
-- heartbeat (k.node_seen, server ms) is older than retention_ms and that are no longer live
-- (they left, or were declared dead): their node_info, node_stats, idle and dead_nodes entries
-- go, and k.pruned keeps a summary (nodes, closed, dead: how many; "stat\t<name>": their
-- summed node stats, so that the job's totals stay whole). A node's stat fields are
-- "<node>\t<name>" for the names of k.scrapy_stats (flush.lua adds to both). ``k``:
-- {node_seen=, nodes=, node_info=, node_stats=, scrapy_stats=, idle=, dead_nodes=, pruned=}.
-- Returns how many were pruned (0 when retention_ms <= 0).
local function prune_nodes(k, now_ms, retention_ms, limit)
  if retention_ms <= 0 then return 0 end
  local old = redis.call('ZRANGEBYSCORE', k.node_seen, '-inf', '(' .. (now_ms - retention_ms),
                         'LIMIT', 0, limit)
  if #old == 0 then return 0 end
  -- the stats' names, a few dozen (lower case: the helpers' code never names KEYS)
  local names = redis.call('hkeys', k.scrapy_stats)
  local pruned = 0
  for _, other in ipairs(old) do
    if not redis.call('ZSCORE', k.nodes, other) then
      local kind = 'closed'
      if redis.call('HDEL', k.dead_nodes, other) == 1 then kind = 'dead' end
      for _, name in ipairs(names) do
        local field = other .. '\t' .. name
        local value = redis.call('HGET', k.node_stats, field)
        if value then
          redis.call('HINCRBY', k.pruned, 'stat\t' .. name, value)
          redis.call('HDEL', k.node_stats, field)
        end
      end
      redis.call('HDEL', k.node_info, other)
      redis.call('HDEL', k.idle, other)
      redis.call('ZREM', k.node_seen, other)
      redis.call('HINCRBY', k.pruned, 'nodes', 1)
      redis.call('HINCRBY', k.pruned, kind, 1)
      pruned = pruned + 1
    end
  end
  return pruned
end
