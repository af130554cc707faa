-- heartbeat: keep a node alive, renew its leases, record whether it is idle, declare dead the
-- nodes whose heartbeats stopped (their leases back in the queue, in the same step), follow the
-- job's start(), and say whether the whole job is finished. A node that leaves (ttl_ms = 0) is
-- removed from the live set.
--
-- (store/heartbeat_script.py HeartbeatScript builds the call and reads the answer.)
--
-- KEYS[1]  meta           hash    job epoch, start_claim, start_done
-- KEYS[2]  nodes          zset    node id -> liveness deadline (server ms)
-- KEYS[3]  node_info      hash    node id -> JSON record written by the node
-- KEYS[4]  idle           hash    node id -> server ms since which the node is idle
-- KEYS[5]  deadlines      zset    leased entry id -> lease deadline (server ms)
-- KEYS[6]  leased         hash    leased entry id -> "<queue score>|<node>"
-- KEYS[7]  queue          zset    the legacy queue: entry id -> -priority (frontier.lua)
-- KEYS[8]  last_call      hash    this node's write counter (see flush.lua); it expires a day
--                                 after the node left (prelude.lua bump_writes)
-- KEYS[9]  stats          hash    job counters (acked: requests done; reclaimed, declared_dead)
-- KEYS[10] dead_nodes     hash    node id -> JSON record of its death (see declare_dead below)
-- KEYS[11] node_seen      zset    node id -> server ms of its last heartbeat (a node declared
--                                 dead, or moved on, before its first: its deadline less ttl_ms)
-- KEYS[12] node_stats     hash    "<node>\t<stat>" -> int (pruned with the node)
-- KEYS[13] scrapy_stats   hash    the nodes' stats summed (their names: prune_nodes, prelude)
-- KEYS[14] pruned         hash    the summary of the pruned nodes (prune_nodes, prelude)
-- KEYS[15] entries        hash    entry id -> encoded request (leased entries)
-- KEYS[16] frontier       prefix  the frontier's key names start with this (frontier.lua)
-- KEYS[17] node_leases    zset    leased entry id -> its node's number and lease sequence
--                                 (lease_index.lua: the index of each node's leases)
-- KEYS[18] node_numbers   hash    node id -> its number and its last lease sequence
-- KEYS[19] reclaiming     zset    the dead nodes whose leases are still being returned
-- ARGV[1]  epoch          string  the job epoch the node joined
-- ARGV[2]  node           string  node id
-- ARGV[3]  ttl_ms         int     liveness duration (CLUSTERSYNC_NODE_DEAD_AFTER); 0 = the
--                                 node leaves the job
-- ARGV[4]  lease_ms       int     lease duration for renewed leases
-- ARGV[5]  info           string  the node's JSON record
-- ARGV[6]  idle           0|1|2   0 busy; 1 idle; 2 idle now but busy since its last heartbeat
--                                 (its idle time starts again now)
-- ARGV[7]  idle_after_ms  int     how long every live node must be idle; 0 = never finish
-- ARGV[8]  writes_seen    int     the node's write counter as it last saw it; -1 = no check
-- ARGV[9]  grace_ms       int     after a gap in which no node's heartbeat arrived (Redis was
--                                 away, or every node stood still) for longer than gap_ms, the
--                                 nodes alive at the last heartbeat before it get this long
--                                 more (their retries are spread out) instead of being
--                                 declared dead for Redis's absence; only nodes heard from
--                                 (node_seen) within ttl_ms + grace_ms before the gap: a lone
--                                 node's late heartbeats look like gaps too, and must not keep
--                                 a dead node alive for ever
-- ARGV[10] told_ms        int     declared_ms of the last death of this node it was told of
--                                 (0: none): that record is deleted now, as the node knows it
-- ARGV[11] gap_ms         int     how long a gap with no heartbeat must be to give the grace (0:
--                                 ttl_ms). Shorter than ttl_ms (the worker passes two
--                                 heartbeat intervals): an outage of less than ttl_ms still
--                                 lets the deadline of a node that beat a little before it pass.
--                                 A shorter gap that is longer than half of it (one heartbeat
--                                 interval: a live node beats at least that often) moves the
--                                 deadlines of the nodes alive before it on by what it lasted
--                                 beyond that half: the outage counts for nobody's death, even
--                                 when one node beats again sooner than another after it
-- ARGV[12] retention_ms   int     nodes that left or were declared dead longer ago than this
--                                 are pruned, PRUNE_PER_BEAT per call (0: never)
-- ARGV[13..] lease_id     string  lease ids this node holds, to renew
-- A node that does not leave takes the start() claim over if its holder is no longer alive
-- (every node waits for start() to be done).
-- Returns {finished 0|1, queued, leased, live nodes, server ms, writes, start, finish_wait, done,
-- declared, my_death};
-- start is "done" (start() exhausted), "mine" (this node holds the claim, perhaps just taken
-- over), "other" (another live node runs it) or "none" (nobody claimed it); finish_wait is
-- how many ms from now the job is finished if nothing changes (0: it is), -1 if it cannot be
-- by waiting (work is queued or leased, start() runs, a live node is busy); done is how many
-- requests the job's nodes acked in its whole life; declared is one line
-- "<leases>\t<silent ms>\t<node>" per node this call declared dead ("" if none), silent ms
-- being how long since its last heartbeat; my_death is this node's own dead_nodes record if
-- another node had declared it dead ("" if not): the node has come back (a long pause, a cut
-- network), is live again from this call on and must not use what it held (prefetched
-- entries are back in the queue). The record is answered until a heartbeat says, in told_ms,
-- that the node was told (a retried call whose answer was lost tells it again).
-- Death: a node whose liveness deadline passed is declared dead by the next heartbeat of any node
-- that does not leave, in one atomic step: it leaves the live set and the idle hash, its leases
-- are to go back to the queue (it joins `reclaiming`, lease_index.lua), and a record
-- {declared_ms, by, deadline_ms, last_beat_ms, leases_returned, record} goes to dead_nodes,
-- record being the node's last node_info JSON and leases_returned how many leases its index
-- range held; at most DEATHS_PER_BEAT nodes per call. Its leases go back with their old score
-- (they skip dedup), DEAD_LEASES_PER_BEAT per heartbeat (this one first) and lease.lua's
-- reclaim_max per lease call, each node's in the order it leased them: the call time is
-- bounded whatever it held, and no call reads all the job's leases. Each heartbeat also sweeps
-- UNINDEXED_LEASES_PER_BEAT leases for those written before the index (lease_index.lua
-- sweep_unindexed_leases), until one whole pass is done. Lease deadlines stay the backstop
-- (lease.lua).
-- The job is finished when start() is done (or was never claimed), the queue is empty, no
-- lease is out and every live node has been idle for idle_after_ms (idle: nothing buffered,
-- prefetched or held; a node that worked since its last heartbeat starts its idle time again).
-- The first heartbeat that finds the job finished records it in meta (FINISH_FIELDS, see
-- prelude.lua: server ms, requests done, live nodes, idle time), so that a node joining later
-- learns it (join.lua); one that finds it unable to finish by waiting clears that record.
-- Errors (before any change): CLUSTERSYNC_STATE_LOST, CLUSTERSYNC_WRONG_TYPE,
-- CLUSTERSYNC_ROLLED_BACK <w> <e> (as flush).
local meta_key = KEYS[1]
local nodes_key = KEYS[2]
local node_info_key = KEYS[3]
local idle_key = KEYS[4]
local deadlines_key = KEYS[5]
local leased_key = KEYS[6]
local queue_key = KEYS[7]
local last_call_key = KEYS[8]
local stats_key = KEYS[9]
local dead_nodes_key = KEYS[10]
local node_seen_key = KEYS[11]
local node_stats_key = KEYS[12]
local scrapy_stats_key = KEYS[13]
local pruned_key = KEYS[14]
local entries_key = KEYS[15]
local frontier_key = KEYS[16]
local node_leases_key = KEYS[17]
local node_numbers_key = KEYS[18]
local reclaiming_key = KEYS[19]
local prune_keys = {node_seen = node_seen_key, nodes = nodes_key, node_info = node_info_key,
                    node_stats = node_stats_key, scrapy_stats = scrapy_stats_key,
                    idle = idle_key, dead_nodes = dead_nodes_key, pruned = pruned_key}
local epoch = ARGV[1]
local node = ARGV[2]
local ttl_ms = tonumber(ARGV[3])
local lease_ms = tonumber(ARGV[4])
local info = ARGV[5]
local idle = ARGV[6]
local idle_after_ms = tonumber(ARGV[7])
local writes_seen = ARGV[8]
local grace_ms = tonumber(ARGV[9])
local told_ms = ARGV[10]
local gap_ms = tonumber(ARGV[11])
local retention_ms = tonumber(ARGV[12])
local lease_id_from = 13
if redis.call('HGET', meta_key, 'epoch') ~= epoch then
  return redis.error_reply('CLUSTERSYNC_STATE_LOST job epoch missing or changed')
end
local refused = wrong_type({nodes_key, 'zset', node_info_key, 'hash', idle_key, 'hash',
                            deadlines_key, 'zset', leased_key, 'hash', queue_key, 'zset',
                            last_call_key, 'hash', stats_key, 'hash', dead_nodes_key, 'hash',
                            node_seen_key, 'zset', node_stats_key, 'hash',
                            pruned_key, 'hash', entries_key, 'hash',
                            frontier_key .. 'sites', 'zset',
                            frontier_key .. 'requeued', 'hash', node_leases_key, 'zset',
                            node_numbers_key, 'hash', reclaiming_key, 'zset'})
if refused then return refused end
local writes, rolled_back = bump_writes(last_call_key, writes_seen)
if not writes then return rolled_back end
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local leaving = ttl_ms == 0
frontier_setup(frontier_key, meta_key, queue_key, entries_key)
lease_index_setup({node_leases = node_leases_key, node_numbers = node_numbers_key,
                   reclaiming = reclaiming_key, meta = meta_key, leased = leased_key,
                   deadlines = deadlines_key, nodes = nodes_key})
local DEATHS_PER_BEAT = 100
-- the leases of dead nodes a beat returns to the queue at most (index entries read)
local DEAD_LEASES_PER_BEAT = 250
-- the leases a beat's sweep for those with no index entry reads (an HSCAN hint)
local UNINDEXED_LEASES_PER_BEAT = 250
local PRUNE_PER_BEAT = 10

-- a gap with no heartbeat at all is Redis's absence (or the whole cluster's), not a death: a
-- long one gives the nodes alive before it the grace; a shorter one, longer than a heartbeat
-- interval, moves their deadlines on by its excess (a node whose first heartbeat after an
-- outage comes later than another's is not dead for the outage)
local last_beat = tonumber(redis.call('HGET', meta_key, 'beat_ms') or '0')
if gap_ms <= 0 then gap_ms = ttl_ms end
local gap, interval_ms = now_ms - last_beat, math.floor(gap_ms / 2)
if last_beat > 0 and gap > interval_ms and not leaving then
  local alive_then = redis.call('ZRANGEBYSCORE', nodes_key, last_beat, '+inf', 'WITHSCORES',
                                'LIMIT', 0, 100000)
  for i = 1, #alive_then, 2 do
    local other, deadline_ms = alive_then[i], tonumber(alive_then[i + 1])
    -- only a node that was heard from shortly before the gap: a gap also comes from a lone
    -- node whose heartbeats are late (far from Redis, a busy machine), and deadlines moved on
    -- by each of its late beats would keep a dead node alive for ever. (A node that never beat
    -- is heard from at its join: its deadline less a threshold, kept from its first move on.)
    redis.call('ZADD', node_seen_key, 'NX', deadline_ms - ttl_ms, other)
    local heard_ms = tonumber(redis.call('ZSCORE', node_seen_key, other))
    if heard_ms >= last_beat - ttl_ms - grace_ms then
      local moved_on = deadline_ms + gap - interval_ms
      if gap > gap_ms then moved_on = now_ms + ttl_ms + grace_ms end
      redis.call('ZADD', nodes_key, 'GT', moved_on, other)
    end
  end
end
if not leaving then  -- a leaving node's beat must not hide the gap from the next one
  redis.call('HSET', meta_key, 'beat_ms', now_ms)
end

-- this node back after others declared it dead: it is live again from here on, and listed
-- dead until it says it knows
local my_death = redis.call('HGET', dead_nodes_key, node) or ''
if my_death ~= '' and string.match(my_death, '^{"declared_ms":(%d+),') == told_ms then
  redis.call('HDEL', dead_nodes_key, node)
  my_death = ''
end

redis.call('HSET', node_info_key, node, info)
redis.call('ZADD', node_seen_key, now_ms, node)
if leaving then
  redis.call('ZREM', nodes_key, node)
  redis.call('HDEL', idle_key, node)
  lease_index_node_left(node)
  -- nothing left to send (it leaves only then): its call record may expire (prelude.lua)
  redis.call('PEXPIRE', last_call_key, CALL_RECORD_KEEP_MS)
else
  redis.call('ZADD', nodes_key, now_ms + ttl_ms, node)
  if idle == '2' then
    redis.call('HSET', idle_key, node, now_ms)
  elseif idle == '1' then
    redis.call('HSETNX', idle_key, node, now_ms)
  else
    redis.call('HDEL', idle_key, node)
  end
end

-- declare dead every other node whose deadline passed; its leases are to go back to the queue
local function declare_dead()
  local dead = redis.call('ZRANGEBYSCORE', nodes_key, '-inf', '(' .. now_ms, 'LIMIT', 0,
                          DEATHS_PER_BEAT)
  if #dead == 0 then return '' end
  local returned, deadline = {}, {}
  for _, other in ipairs(dead) do
    returned[other] = lease_index_node_died(other)
    deadline[other] = redis.call('ZSCORE', nodes_key, other)
  end
  local lines = {}
  for _, other in ipairs(dead) do
    local record = redis.call('HGET', node_info_key, other) or 'null'
    local last_beat_ms = redis.call('ZSCORE', node_seen_key, other) or (deadline[other] - ttl_ms)
    -- a node that died before its first heartbeat is pruned from then (prune_nodes)
    redis.call('ZADD', node_seen_key, 'NX', last_beat_ms, other)
    redis.call('HSET', dead_nodes_key, other, '{"declared_ms":' .. now_ms .. ',"by":' ..
               cjson.encode(node) .. ',"deadline_ms":' .. deadline[other] ..
               ',"last_beat_ms":' .. last_beat_ms ..
               ',"leases_returned":' .. returned[other] .. ',"record":' .. record .. '}')
    redis.call('ZREM', nodes_key, other)
    redis.call('HDEL', idle_key, other)
    lines[#lines + 1] = returned[other] .. '\t' .. (now_ms - last_beat_ms) .. '\t' .. other
  end
  redis.call('HINCRBY', stats_key, 'declared_dead', #dead)
  return table.concat(lines, '\n')
end
-- a leaving node declares nobody dead: it cannot give the outage grace (it has no liveness),
-- and the next heartbeat of a live node does it, with the grace if a gap calls for it
local declared = ''
if not leaving then
  declared = declare_dead()
  local reclaimed = reclaim_dead_leases(DEAD_LEASES_PER_BEAT)
  reclaimed = reclaimed + sweep_unindexed_leases(UNINDEXED_LEASES_PER_BEAT)
  if reclaimed > 0 then redis.call('HINCRBY', stats_key, 'reclaimed', reclaimed) end
  prune_nodes(prune_keys, now_ms, retention_ms, PRUNE_PER_BEAT)
end

local lease_deadline = now_ms + lease_ms
for j = lease_id_from, #ARGV do
  local _, owner = parse_lease(redis.call('HGET', leased_key, ARGV[j]))
  if owner == node then
    redis.call('ZADD', deadlines_key, 'XX', lease_deadline, ARGV[j])
  end
end

-- start(): done, or claimed by a node that is alive, or taken over from one that is not
local start = 'none'
local claim = redis.call('HMGET', meta_key, 'start_claim', 'start_done')
if claim[2] then
  start = 'done'
elseif claim[1] == node then
  start = 'mine'
elseif claim[1] then
  local alive_until = redis.call('ZSCORE', nodes_key, claim[1])
  if (not alive_until or tonumber(alive_until) < now_ms) and not leaving then
    redis.call('HSET', meta_key, 'start_claim', node)
    redis.call('HINCRBY', meta_key, 'start_takeovers', 1)
    start = 'mine'
  else
    start = 'other'
  end
end

frontier_finish()
local queued = frontier_queued()
local leased = redis.call('ZCARD', deadlines_key)
local live = redis.call('ZRANGEBYSCORE', nodes_key, now_ms, '+inf', 'LIMIT', 0, 100000)
local idle_after = idle_after_ms

-- every live node has to be idle; the wait only lets a node that just turned idle settle
local function finish_wait()
  if idle_after <= 0 or queued > 0 or leased > 0 or (start ~= 'done' and start ~= 'none') then
    return -1
  end
  if (redis.call('HGET', meta_key, 'control') or 'running') ~= 'running' then return -1 end  -- control.lua
  local wait = 0
  for _, other in ipairs(live) do
    local since = redis.call('HGET', idle_key, other)
    if not since then return -1 end
    wait = math.max(wait, idle_after - (now_ms - tonumber(since)))
  end
  return wait
end

local wait = finish_wait()
local done = tonumber(redis.call('HGET', stats_key, 'acked') or '0')
local finished = 0
if wait == 0 then
  finished = 1
  if redis.call('HSETNX', meta_key, 'finished_ms', now_ms) == 1 then
    redis.call('HSET', meta_key, 'finished_pages', done,
               'finished_nodes', #live, 'finished_idle_ms', idle_after)
  end
elseif wait < 0 then
  redis.call('HDEL', meta_key, FINISH_FIELDS[1], FINISH_FIELDS[2], FINISH_FIELDS[3], FINISH_FIELDS[4])
end
return {finished, queued, leased, #live, now_ms, writes, start, wait, done, declared, my_death}
