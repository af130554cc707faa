-- frontier: the job's queue, one list per site and queue class, leased fairly across sites.
-- Loaded after prelude.lua by the scripts that push, lease and return entries (flush.lua,
-- lease.lua, heartbeat.lua); the script calls frontier_setup first and frontier_finish last.
--
-- A queued request is one item "<entry id>\t<encoded request>" of the list of its site (its
-- Scrapy download slot key) and class. A class is "<kind>:<priority>": kind 0 for most requests,
-- 1 for start requests (after the others of their priority, as Scrapy's start queues); the class
-- of a site pinned to a region (the regions hash) is "<kind>:<priority>@<region>", leased by the
-- nodes of that region first and by others only when they have nothing else (lease_class). FIFO
-- pushes go to the tail, LIFO pushes (Scrapy's LIFO queues) to the head, and the head is leased
-- first, so a list keeps Scrapy's order within its site and class. The keys, all named from the
-- prefix the script gets in its KEYS (the job's hash tag is in it, so they live on the job's
-- shard; store/keys.py JobKeys documents each):
--   <prefix>q:<class>:<site>  list   the queued items of one site and class
--   <prefix>ready:<class>     zset   site -> turn: the sites with items of the class, served in
--                                    turn order (round robin: a site served goes to the back)
--   <prefix>classes           zset   class -> order (-2 x priority + kind): best first
--   <prefix>sites             zset   site -> requests queued (status --sites: the deepest)
--   <prefix>requeued          hash   entry id -> "q<where>" for an entry put back by a lease's
--                                    end ("<where>": frontier_where), "d<where>" once it was
--                                    acked while queued again (skipped when its turn comes: a
--                                    late ack of a node thought dead)
--   meta fields fqueued (requests queued), fbytes (their bytes), fturn (the last turn given)
--   <prefix>rest:<class>      zset   site -> server ms: the sites of the class whose pace let no
--                                    lease hand out a request, until when one may (a lease puts
--                                    them back in ready:<class> then)
--   <prefix>regions           hash   site -> the region it is pinned to (regions.lua writes it)
-- A site is in ready:<class> or rest:<class> (never both) exactly while its list of that class
-- is not empty, and a class is in classes while its ready or rest set is not empty.
--
-- Jobs queued by an earlier version hold their entries in the "legacy" queue (a sorted set of
-- entry ids, their requests in the entries hash); lease.lua serves it first until it is empty,
-- and an entry put back with no site known goes there too (check.lua's repairs, requeue.lua).
local FRONTIER = {}

local function frontier_setup(prefix, meta, legacy, entries)
  FRONTIER.prefix, FRONTIER.meta, FRONTIER.legacy, FRONTIER.entries = prefix, meta, legacy, entries
  FRONTIER.classes = prefix .. 'classes'
  FRONTIER.sites = prefix .. 'sites'
  FRONTIER.requeued = prefix .. 'requeued'
  FRONTIER.queued, FRONTIER.bytes, FRONTIER.site_counts = 0, 0, {}
  FRONTIER.turn = nil  -- read on first use
  FRONTIER.any_requeued = nil  -- whether the requeued hash may hold an entry: read on first use
  FRONTIER.released = {}  -- entries released in lease order, queued by frontier_finish
  FRONTIER.pushes, FRONTIER.push_lists = {}, {}  -- new entries, by list and end (frontier_queue)
  FRONTIER.regions = prefix .. 'regions'
  FRONTIER.any_regions = nil  -- whether some site is pinned to a region: read on first use
  FRONTIER.region_of = {}  -- site -> its region ('' for none), as read in this call
end

-- whether some site of the job is pinned to a region (one EXISTS per call, on first use)
local function any_regions()
  if FRONTIER.any_regions == nil then
    FRONTIER.any_regions = redis.call('EXISTS', FRONTIER.regions) == 1
  end
  return FRONTIER.any_regions
end

-- the region `site` is pinned to, '' for none (one HGET per site and call, none in a job that
-- pins no site)
local function region_of(site)
  if not any_regions() then return '' end
  local region = FRONTIER.region_of[site]
  if region == nil then
    region = redis.call('HGET', FRONTIER.regions, site) or ''
    FRONTIER.region_of[site] = region
  end
  return region
end

-- the class of `kind`, `prio` and `region` ('' for none)
local function class_named(kind, prio, region)
  if region ~= '' then return kind .. ':' .. prio .. '@' .. region end
  return kind .. ':' .. prio
end

-- the class of `site`'s requests of `kind` and `prio`
local function class_of(kind, prio, site)
  return class_named(kind, prio, region_of(site))
end

-- a class's kind, priority (both strings) and region ('' for none)
local function parse_class(class)
  local colon = string.find(class, ':', 1, true)
  local at = string.find(class, '@', colon + 1, true)
  local prio = string.sub(class, colon + 1, at and at - 1 or nil)
  return string.sub(class, 1, colon - 1), prio, at and string.sub(class, at + 1) or ''
end

local function list_key(class, site)
  return FRONTIER.prefix .. 'q:' .. class .. ':' .. site
end

local function ready_key(class)
  return FRONTIER.prefix .. 'ready:' .. class
end

local function rest_key(class)
  return FRONTIER.prefix .. 'rest:' .. class
end

local function next_turn()
  if not FRONTIER.turn then
    FRONTIER.turn = tonumber(redis.call('HGET', FRONTIER.meta, 'fturn') or '0')
  end
  FRONTIER.turn = FRONTIER.turn + 1
  return FRONTIER.turn
end

local function counted(site, requests, bytes)
  FRONTIER.queued = FRONTIER.queued + requests
  FRONTIER.bytes = FRONTIER.bytes + bytes
  FRONTIER.site_counts[site] = (FRONTIER.site_counts[site] or 0) + requests
end

-- a site's list of `class` was empty and holds an item now
local function became_ready(class, kind, prio, site)
  redis.call('ZADD', ready_key(class), next_turn(), site)
  redis.call('ZADD', FRONTIER.classes, 'NX', -2 * tonumber(prio) + tonumber(kind), class)
end

-- Queue entry `id` (request `blob`) of `site`: at the tail of its list, or at the head
-- (`head`: a LIFO push, or an entry whose lease ended, which goes first again).
local function frontier_push(id, blob, kind, prio, site, head)
  local class = class_of(kind, prio, site)
  local item = id .. '\t' .. blob
  local length
  if head then
    length = redis.call('LPUSH', list_key(class, site), item)
  else
    length = redis.call('RPUSH', list_key(class, site), item)
  end
  if length == 1 then became_ready(class, kind, prio, site) end
  counted(site, 1, #item)
end

-- Queue a new entry as frontier_push does, the entries of one list and end of a call written
-- in one command by frontier_finish (a callback's links are mostly of its own site, a seed's
-- of a few sites). The call's groups are found by site, priority and slot (kind and end) without
-- making a string per entry; each group is counted once, when it is written.
local function frontier_queue(id, blob, kind, prio, site, head)
  local by_site = FRONTIER.pushes[site]
  if not by_site then
    by_site = {}
    FRONTIER.pushes[site] = by_site
  end
  local by_prio = by_site[prio]
  if not by_prio then
    by_prio = {}
    by_site[prio] = by_prio
  end
  local slot = ((kind == 1 or kind == '1') and 2 or 0) + (head and 2 or 1)
  local group = by_prio[slot]
  if not group then
    local class = class_of(kind, prio, site)
    group = {key = list_key(class, site), head = head, class = class, kind = kind, prio = prio,
             site = site, bytes = 0}
    by_prio[slot] = group
    FRONTIER.push_lists[#FRONTIER.push_lists + 1] = group
  end
  local item = id .. '\t' .. blob
  group[#group + 1] = item
  group.bytes = group.bytes + #item
end

local function write_queued()
  for _, group in ipairs(FRONTIER.push_lists) do
    local command = group.head and 'LPUSH' or 'RPUSH'
    in_batches(#group, function(first, last)
      if redis.call(command, group.key, unpack(group, first, last)) == last - first + 1 then
        became_ready(group.class, group.kind, group.prio, group.site)
      end
    end)
    counted(group.site, #group, group.bytes)
  end
  FRONTIER.pushes, FRONTIER.push_lists = {}, {}
end

-- where a leased entry came from, as its lease value keeps it (prelude.lua lease_value):
-- "" for the legacy queue, else its kind (one character) and its site
local function frontier_where(kind, site)
  return kind .. site
end

-- Put leased entry `id` back in the queue, first of its site and class; `score` and `where` as
-- its lease value holds them. Its request moves from the entries hash into the list.
-- `released`: one of the entries a node hands back in the order it leased them (flush.lua's
-- releases); they join their lists in frontier_finish, so that they keep that order.
local function frontier_return(id, score, where, released)
  if not where or where == '' then
    redis.call('ZADD', FRONTIER.legacy, score or '0', id)
    return
  end
  local blob = redis.call('HGET', FRONTIER.entries, id)
  if not blob then return end  -- (an entry with no request left: check.lua reports it)
  redis.call('HDEL', FRONTIER.entries, id)
  local prio = tostring(-tonumber(score or '0'))
  if prio == '-0' then prio = '0' end
  local kind, site = string.sub(where, 1, 1), string.sub(where, 2)
  if released then
    FRONTIER.released[#FRONTIER.released + 1] = {id, blob, kind, prio, site}
  else
    frontier_push(id, blob, kind, prio, site, true)
  end
  redis.call('HSET', FRONTIER.requeued, id, 'q' .. where)
  FRONTIER.any_requeued = true
end

-- Entry `id` is done while it may sit in the queue again (its lease ended, a late ack): true if
-- it was queued (it will be skipped when its turn comes).
local function frontier_settle_queued(id)
  local state = redis.call('HGET', FRONTIER.requeued, id)
  if not state or string.sub(state, 1, 1) ~= 'q' then return false end
  redis.call('HSET', FRONTIER.requeued, id, 'd' .. string.sub(state, 2))
  counted(string.sub(state, 3), -1, 0)
  return true
end

-- The pace of `site` for a lease: how many of its requests may be handed out now (math.huge: no
-- limit), the step between them, when the first may start, when this node's last may, when a
-- lease may have one if none now, and, when no node may have one now (not only this one), the
-- server ms from which one may (its rest, lease_class). pace (lease.lua): {on=,
-- recorded_first=, node=, now=, horizon=, default_ms=, delays=, per_domain=, nodes=,
-- site_prefix=, idle_ms=}. The site's politeness hash
-- (site_turns.lua): tat_ms, blocked_ms, backoff_ms, delay_ms; and what leases keep there:
-- lease_due_ms, when the next request handed out may start, and "lease:<node>", when the last
-- one handed to that node may. A node is handed what may start before its horizon, and the
-- cluster may hold one request more per other live node, so that each node has one to wait
-- for at the gate, whose turns decide the starts.
local function site_allowance(pace, site)
  if not pace.on then return math.huge, 0, nil, nil, nil end
  local s = redis.call('HMGET', pace.site_prefix .. site, 'tat_ms', 'blocked_ms', 'backoff_ms',
                       'delay_ms', 'lease_due_ms', 'lease:' .. pace.node)
  local delay = pace.delays[site] or pace.default_ms
  if pace.recorded_first and s[4] then delay = tonumber(s[4]) or delay end
  local step = math.max(delay, tonumber(s[3] or '0'))
  local blocked = tonumber(s[2] or '0')
  local due = math.max(tonumber(s[1] or '0'), blocked, tonumber(s[5] or '0'), pace.now)
  local own = math.max(tonumber(s[6] or '0'), pace.now)
  local ahead = pace.horizon + step * math.max(0, pace.nodes - 1)
  local mine = pace.now + pace.horizon
  if due > pace.now + ahead or own > mine then
    local rest = nil  -- the cluster may not start one (not only this node): until when
    if due > pace.now + ahead then rest = due - ahead end
    return 0, step, due, own, math.max(due - ahead, own - pace.horizon), rest
  end
  local left = math.huge
  if step > 0 then
    left = math.min(math.floor((pace.now + ahead - due) / step),
                    math.floor((mine - own) / step)) + 1
  end
  if pace.per_domain > 0 then left = math.min(left, pace.per_domain) end
  return left, step, due, own, nil
end

-- Lease up to `want` queued requests, handing each to hand(id, blob, score, where); returns how
-- many, and the soonest (server ms) a site passed over for its pace may have one (nil: none).
-- Classes best first; within a class, the sites in turn, each given a share of what is left per
-- round and never more than its pace allows (a site no node may be handed a request of within
-- the horizon rests: lease_class). Bounded: SITES_PER_LEASE site visits per call,
-- and as many classes (read CLASSES_PER_READ at a time): a class whose sites may not start a
-- request costs a visit per site, so the classes after it are reached (a slow site with
-- requests of many priorities holds back no other site).
local CLASSES_PER_READ = 16
local SITES_PER_LEASE = 512

local function take_items(class, site, n, hand, score, where)
  local items = redis.call('LPOP', list_key(class, site), n)
  if not items then return 0, true end
  if FRONTIER.any_requeued == nil then
    FRONTIER.any_requeued = redis.call('EXISTS', FRONTIER.requeued) == 1
  end
  local given, bytes = 0, 0
  for _, item in ipairs(items) do
    local tab = string.find(item, '\t', 1, true)
    local id = string.sub(item, 1, tab - 1)
    bytes = bytes + #item
    local state = FRONTIER.any_requeued and redis.call('HGET', FRONTIER.requeued, id)
    if state then redis.call('HDEL', FRONTIER.requeued, id) end
    -- an entry acked while it was queued again was counted out then (frontier_settle_queued)
    if not state or string.sub(state, 1, 1) ~= 'd' then
      hand(id, string.sub(item, tab + 1), score, where)
      given = given + 1
    end
  end
  counted(site, -given, -bytes)
  return given, #items < n or redis.call('EXISTS', list_key(class, site)) == 0
end

-- The sites of `class` that rest (their pace let no lease hand one of their requests out) and
-- may have one handed out by `now` (server ms) go back to its ready set, at the back; the
-- soonest another may is a time to try again (st.retry_at). Bounded: SITES_PER_LEASE sites
-- woken per call.
local function wake_class(class, ready, st, now)
  local rest = rest_key(class)
  local woken = {}
  if st.woken < SITES_PER_LEASE then
    woken = redis.call('ZRANGEBYSCORE', rest, '-inf', now, 'LIMIT', 0, SITES_PER_LEASE - st.woken)
  end
  for _, site in ipairs(woken) do
    redis.call('ZREM', rest, site)
    redis.call('ZADD', ready, next_turn(), site)
  end
  st.woken = st.woken + #woken
  local next_one = redis.call('ZRANGE', rest, 0, 0, 'WITHSCORES')
  if next_one[2] then
    local later = tonumber(next_one[2])
    if not st.retry_at or later < st.retry_at then st.retry_at = later end
  end
end

-- Lease from the sites of `class` in turn, until the lease is full or every site of the class
-- was visited since one last gave a request (those left may not start one yet). A site that may
-- not start one within the horizon rests (rest:<class>, until when a lease may hand one out),
-- so that a lease visits only sites that may. `st`: the call's {taken=, visits=, woken=,
-- retry_at=, paced=} (paced: site -> {left=, step=, due=, own=, rest=, given=}).
local function lease_class(class, st, want, pace, hand)
  local kind, prio = parse_class(class)
  local score, ready = tostring(-tonumber(prio)), ready_key(class)
  wake_class(class, ready, st, pace.on and pace.now or '+inf')  -- no pace: every site may
  local ready_sites, fruitless = redis.call('ZCARD', ready), 0
  while st.taken < want and st.visits < SITES_PER_LEASE and fruitless < ready_sites do
    local popped = redis.call('ZPOPMIN', ready,
                              math.min(want - st.taken, SITES_PER_LEASE - st.visits))
    if #popped == 0 then break end
    local share = math.ceil((want - st.taken) * 2 / #popped)
    for i = 1, #popped, 2 do
      local site = popped[i]
      st.visits = st.visits + 1
      local p = st.paced[site]
      if not p then
        local left, step, due, own, later, rest = site_allowance(pace, site)
        p = {left = left, step = step, due = due, own = own, rest = rest, given = 0}
        st.paced[site] = p
        if later and (not st.retry_at or later < st.retry_at) then st.retry_at = later end
      end
      local n, given, emptied = math.min(share, p.left, want - st.taken), 0, false
      if n > 0 then
        given, emptied = take_items(class, site, n, hand, score, frontier_where(kind, site))
        p.left, p.given, st.taken = p.left - given, p.given + given, st.taken + given
      end
      if given > 0 then fruitless = 0 end
      if emptied then
        ready_sites = ready_sites - 1
      elseif p.rest then  -- out of the turns until it may: not one of the fruitless visits
        redis.call('ZADD', rest_key(class), p.rest, site)
        ready_sites = ready_sites - 1
      else
        redis.call('ZADD', ready, next_turn(), site)
        if given == 0 then fruitless = fruitless + 1 end
      end
    end
  end
  if redis.call('EXISTS', ready, rest_key(class)) == 0 then
    redis.call('ZREM', FRONTIER.classes, class)
    return false
  end
  return true
end

-- Whether `class` is leased in this pass: a class of no region always; one of the node's region
-- (pace.region) in the first pass; one of another region only in the second (`foreign`).
local function in_pass(class, pace, foreign)
  if not any_regions() then return not foreign end
  local _, _, region = parse_class(class)
  if region == '' or region == pace.region then return not foreign end
  return foreign
end

local function lease_pass(want, pace, hand, st, foreign)
  -- classes read, and those passed over or visited that still hold requests (the next read
  -- starts after them)
  local read, kept, classes, at = 0, 0, {}, 0
  while st.taken < want and st.visits < SITES_PER_LEASE and read < SITES_PER_LEASE do
    at = at + 1
    if at > #classes then
      classes = redis.call('ZRANGE', FRONTIER.classes, kept, kept + CLASSES_PER_READ - 1)
      if #classes == 0 then break end
      at = 1
    end
    read = read + 1
    if not in_pass(classes[at], pace, foreign) or lease_class(classes[at], st, want, pace, hand)
    then
      kept = kept + 1
    end
  end
end

-- pace.region: the node's region ('' for none); pace.foreign: it has nothing to do, so that the
-- classes of other regions are leased too when its own region's and no region's give nothing
local function frontier_lease(want, pace, hand)
  local st = {taken = 0, visits = 0, woken = 0, retry_at = nil, paced = {}}
  lease_pass(want, pace, hand, st, false)
  if st.taken == 0 and pace.foreign and any_regions() then
    lease_pass(want, pace, hand, st, true)
  end
  for site, p in pairs(st.paced) do
    if p.step > 0 and p.given > 0 then
      local key = pace.site_prefix .. site
      redis.call('HSET', key, 'lease_due_ms', p.due + p.given * p.step,
                 'lease:' .. pace.node, p.own + p.given * p.step)
      redis.call('PEXPIRE', key, pace.idle_ms)
    end
  end
  return st.taken, st.retry_at
end

-- requests queued in the job: the frontier's and the legacy queue's
local function frontier_queued()
  return queued_count(FRONTIER.meta, FRONTIER.legacy) + FRONTIER.queued
end

local function frontier_finish()
  -- released entries go to the head after the call's new ones, the last first, so that the first
  -- released is leased first (one LPUSH of a list's items puts its last item at the head)
  for i = #FRONTIER.released, 1, -1 do
    local r = FRONTIER.released[i]
    frontier_queue(r[1], r[2], r[3], r[4], r[5], true)
  end
  FRONTIER.released = {}
  write_queued()
  if FRONTIER.queued ~= 0 then redis.call('HINCRBY', FRONTIER.meta, 'fqueued', FRONTIER.queued) end
  if FRONTIER.bytes ~= 0 then redis.call('HINCRBY', FRONTIER.meta, 'fbytes', FRONTIER.bytes) end
  if FRONTIER.turn then redis.call('HSET', FRONTIER.meta, 'fturn', FRONTIER.turn) end
  for site, delta in pairs(FRONTIER.site_counts) do
    if delta ~= 0 and site ~= '' then
      if tonumber(redis.call('ZINCRBY', FRONTIER.sites, delta, site)) <= 0 then
        redis.call('ZREM', FRONTIER.sites, site)
      end
    end
  end
  FRONTIER.queued, FRONTIER.bytes, FRONTIER.site_counts = 0, 0, {}
end
