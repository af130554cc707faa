-- lease: hand a batch of queued requests to one node, and first return expired leases.
-- The legacy queue (a job queued by an earlier version) is served first, then the frontier
-- (frontier.lua): the best class first, its sites in turn, each no faster than its pace allows.
-- A leased entry stays in Redis (entries + deadlines + leased, and node_leases: lease_index.lua)
-- until it is acked. First, a bounded slice of the leases of nodes declared dead goes back to
-- the queue (heartbeat.lua), then leases whose deadline (server time) has passed, each in its
-- place, skipping dedup.
--
-- (store/lease_script.py LeaseScript builds the call and reads the answer.)
--
-- KEYS[1]  meta         hash    job epoch
-- KEYS[2]  queue        zset    the legacy queue: entry id -> -priority (frontier.lua)
-- KEYS[3]  entries      hash    entry id -> encoded request (leased entries, the legacy queue's)
-- KEYS[4]  deadlines    zset    leased entry id -> lease deadline (server ms)
-- KEYS[5]  leased       hash    leased entry id -> "<queue score>|<node>"
-- KEYS[6]  stats        hash    job counters
-- KEYS[7]  last_call    hash    this node's write counter, last call id and result
-- KEYS[8]  tasks        hash    task id -> task record (tasks.lua: a pending task turns running)
-- KEYS[9]  task_of      hash    entry id -> task id
-- KEYS[10] frontier     prefix  the frontier's key names start with this (frontier.lua)
-- KEYS[11] site_prefix  prefix  a site's politeness hash is this and the site (site_turns.lua)
-- KEYS[12] nodes        zset    node id -> liveness deadline: how many nodes are live (the pace)
-- KEYS[13] node_leases  zset    leased entry id -> its node's number and lease sequence
--                               (lease_index.lua: the index of each node's leases)
-- KEYS[14] node_numbers hash    node id -> its number and its last lease sequence
-- KEYS[15] reclaiming   zset    the dead nodes whose leases are still being returned
-- ARGV[1]  epoch        string  the job epoch the node joined
-- ARGV[2]  call_id      string  unique per call
-- ARGV[3]  node         string  node id
-- ARGV[4]  count        int     how many entries to lease at most
-- ARGV[5]  lease_ms     int     lease duration in milliseconds
-- ARGV[6]  reclaim_max  int     how many leases of dead nodes (index entries read) and expired
--                               leases to return at most in this call, in that order
-- ARGV[7]  writes_seen  int     the node's write counter as it last saw it; -1 = do not check
-- ARGV[8]  pace         0|1|2   1, 2: hand out a site's requests no faster than its pace allows
--                               within horizon_ms (CLUSTERSYNC_POLITENESS = "cluster"); 2: the
--                               delay its politeness hash records first (AutoThrottle); 0: no pace
-- ARGV[9]  horizon_ms   int     how far ahead this lease is meant to last
-- ARGV[10] delay_ms     float   the delay of a site not in delays (DOWNLOAD_DELAY)
-- ARGV[11] per_domain   int     a site's requests handed out at once at most (0: no cap)
-- ARGV[12] idle_ms      int     a site's politeness hash expires this long after its last use
-- ARGV[13] region       string  the node's region ('' for none): the sites pinned to it and those
--                               pinned to none are leased first (frontier.lua frontier_lease)
-- ARGV[14] foreign      0|1     1: the node has nothing to do, so that when those give nothing
--                               the sites pinned to other regions are leased
-- ARGV[15..] delays     pairs   site, delay_ms: the sites with a delay of their own
-- Returns a flat array: the node's write counter, then in how many ms a site passed over for its
-- pace may have a request handed out (-1: none was), then id1, blob1, score1, id2, blob2, ...
-- (the queue score is -priority: the node keeps Scrapy's order across priorities)
-- Errors (before any change): CLUSTERSYNC_STATE_LOST, CLUSTERSYNC_WRONG_TYPE,
-- CLUSTERSYNC_ROLLED_BACK <w> <e> (as flush).
local meta_key = KEYS[1]
local queue_key = KEYS[2]
local entries_key = KEYS[3]
local deadlines_key = KEYS[4]
local leased_key = KEYS[5]
local stats_key = KEYS[6]
local last_call_key = KEYS[7]
local tasks_key = KEYS[8]
local task_of_key = KEYS[9]
local epoch = ARGV[1]
local call_id = ARGV[2]
local node = ARGV[3]
local count = tonumber(ARGV[4])
local lease_ms = tonumber(ARGV[5])
local reclaim_max = tonumber(ARGV[6])
local writes_seen = ARGV[7]
local frontier_key = KEYS[10]
local site_prefix_key = KEYS[11]
local nodes_key = KEYS[12]
local node_leases_key = KEYS[13]
local node_numbers_key = KEYS[14]
local reclaiming_key = KEYS[15]
local pace = ARGV[8]
local horizon_ms = tonumber(ARGV[9])
local delay_ms = tonumber(ARGV[10])
local per_domain = tonumber(ARGV[11])
local idle_ms = tonumber(ARGV[12])
local region = ARGV[13]
local foreign = ARGV[14]
local delays_from = 15
local site_pace = {on = pace ~= '0', recorded_first = pace == '2', horizon = horizon_ms,
                   default_ms = delay_ms, per_domain = per_domain, idle_ms = idle_ms,
                   node = node, site_prefix = site_prefix_key, delays = {},
                   region = region, foreign = foreign == '1'}
for i = delays_from, #ARGV - 1, 2 do site_pace.delays[ARGV[i]] = tonumber(ARGV[i + 1]) end
if redis.call('HGET', meta_key, 'epoch') ~= epoch then
  return redis.error_reply('CLUSTERSYNC_STATE_LOST job epoch missing or changed')
end
local refused = wrong_type({queue_key, 'zset', entries_key, 'hash', deadlines_key, 'zset',
                            leased_key, 'hash', stats_key, 'hash', last_call_key, 'hash',
                            tasks_key, 'hash', task_of_key, 'hash', nodes_key, 'zset',
                            node_leases_key, 'zset', node_numbers_key, 'hash',
                            reclaiming_key, 'zset',
                            frontier_key .. 'classes', 'zset', frontier_key .. 'sites', 'zset',
                            frontier_key .. 'requeued', 'hash'})
if refused then return refused end
local writes, rolled_back = bump_writes(last_call_key, writes_seen)
if not writes then return rolled_back end
local out = {writes, -1}

local deadline
-- the writes of the entries leased, sent a batch per command (lease_writes)
local new_entries, new_deadlines, new_leases, new_ids = {}, {}, {}, {}
-- blob: the entry's request, or nil when it is in the entries hash (the legacy queue)
local function lease_one(id, score, where, blob)
  if blob then
    new_entries[#new_entries + 1] = id
    new_entries[#new_entries + 1] = blob
  else
    blob = redis.call('HGET', entries_key, id)
  end
  new_deadlines[#new_deadlines + 1] = deadline
  new_deadlines[#new_deadlines + 1] = id
  new_leases[#new_leases + 1] = id
  new_leases[#new_leases + 1] = lease_value(score, node, where)
  new_ids[#new_ids + 1] = id
  task_leased(id)
  out[#out + 1] = id
  out[#out + 1] = blob or ''
  out[#out + 1] = tostring(score)
end

local function lease_writes()
  send_in_batches('HSET', entries_key, new_entries)
  send_in_batches('ZADD', deadlines_key, new_deadlines)
  send_in_batches('HSET', leased_key, new_leases)
  index_leases(node, new_ids)
end

local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
deadline = now_ms + lease_ms
site_pace.now = now_ms
if site_pace.on then site_pace.nodes = redis.call('ZCOUNT', nodes_key, now_ms, '+inf') end
task_setup(tasks_key, task_of_key, node, now_ms)
frontier_setup(frontier_key, meta_key, queue_key, entries_key)
lease_index_setup({node_leases = node_leases_key, node_numbers = node_numbers_key,
                   reclaiming = reclaiming_key, meta = meta_key, leased = leased_key,
                   deadlines = deadlines_key, nodes = nodes_key})

local last = redis.call('HMGET', last_call_key, 'lease_id', 'lease_result')
if last[1] == call_id then
  -- the same call again: hand out the same entries if they are still leased to this node
  for id in string.gmatch(last[2] or '', '%S+') do
    local score, owner, where = parse_lease(redis.call('HGET', leased_key, id))
    if owner == node then lease_one(id, score, where, nil) end
  end
  lease_writes()
  return out
end

local reclaimed, read = reclaim_dead_leases(reclaim_max)
reclaimed = reclaimed + reclaim_expired_leases(now_ms, reclaim_max - read)
if reclaimed > 0 then
  redis.call('HINCRBY', stats_key, 'reclaimed', reclaimed)
end

local ids = {}
local popped = redis.call('ZPOPMIN', queue_key, count)
for j = 1, #popped, 2 do
  lease_one(popped[j], popped[j + 1], '', nil)
  ids[#ids + 1] = popped[j]
end
if #ids < count then
  local _, retry_at = frontier_lease(count - #ids, site_pace, function(id, blob, score, where)
    lease_one(id, score, where, blob)
    ids[#ids + 1] = id
  end)
  if retry_at then out[2] = math.max(0, retry_at - now_ms) end
end
frontier_finish()
lease_writes()
if #ids > 0 then
  redis.call('HINCRBY', stats_key, 'leased', #ids)
end
redis.call('HSET', last_call_key, 'lease_id', call_id, 'lease_result', table.concat(ids, ' '))
return out
