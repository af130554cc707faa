-- site_turns: reserve up to `count` turns of one site for one node, on the Redis clock. The
-- site's pace is GCRA: `tat_ms` is when its next turn may start; each turn reserved starts at
-- max(tat_ms, now, blocked_ms) and moves tat_ms on by the site's step (its delay, or its backoff
-- after 503s if longer, each drawn in (1 - jitter)..(1 + jitter) x with RANDOMIZE_DOWNLOAD_DELAY:
-- step x (1 + jitter x (u - u_before)), u uniform in 0..1 and u_before the draw of the step
-- before, kept in `jitter_u`. Each step is random, and n steps in a row sum to n x step within
-- one step x jitter: no window of time sees more turns than the delay allows, as independent
-- draws would (50 of them run 0.2 s short or long by chance alone, one turn in ten).
-- Turns after the first are reserved only while they start within horizon_ms, so one call
-- serves a few short turns and never holds many long ones. With a cap (CONCURRENT_REQUESTS_PER_
-- DOMAIN for the cluster), each turn also takes one of the site's in-flight slots, a token leased
-- for lease_ms at most: a node killed with -9 blocks them no longer than that. The node frees
-- the tokens of its requests that ended in its next call (`done`), and reports its good
-- responses since its last call (`good`): each shrinks a backoff by BACKOFF_RECOVERY.
--
-- (store/site_scripts.py SiteTurnsScript builds the call and reads the answer.)
--
-- KEYS[1]  site         hash    tat_ms, blocked_ms (no turn before: a Retry-After), backoff_ms
--                               (the delay after 503s), delay_ms (the step in force), seq (the
--                               tokens' counter), last_ms (the last reservation), waiter and
--                               waiter_ms (the node first refused by the full cap, and when: it
--                               has the next free slot for WAITER_MS), jitter_u (the last
--                               jitter draw); expires idle
-- KEYS[2]  inflight     zset    token -> lease deadline (server ms): the site's turns under way
-- KEYS[3]  sites        zset    site -> server ms of its last reservation (status, purge)
-- ARGV[1]  site         string  the site (its Scrapy download slot key)
-- ARGV[2]  node         string  the node's id (tokens are "<node>:<seq>")
-- ARGV[3]  count        int     turns wanted (0: only free `done`; else at least one is
--                               reserved, unless the cap is full)
-- ARGV[4]  delay_ms     float   the site's delay (0: none)
-- ARGV[5]  jitter       float   0: every step is the delay; 0.5: drawn in 0.5..1.5 x the delay
-- ARGV[6]  seed         int     seed of those draws
-- ARGV[7]  horizon_ms   int     turns after the first must start within this of now
-- ARGV[8]  cap          int     most turns under way for the site in the cluster (0: no cap)
-- ARGV[9]  lease_ms     int     how long a turn's in-flight slot is held at most
-- ARGV[10] idle_ms      int     the site's keys expire this long after its last turn
-- ARGV[11] good         int     good responses of the site on this node since its last call
-- ARGV[12..] done       string  tokens of this node's turns that ended (their slots are free)
-- Returns {now_ms, step_ms, backoff_ms, retry_ms, blocked_ms, offset_ms_1, token_1, offset_ms_2,
-- ...}: offsets from now_ms of the turns reserved, in order (tokens "" without a cap); retry_ms:
-- with the cap full, when to ask again (CAP_POLL_MS at most; -1: not full); blocked_ms: how long
-- the site is still blocked by a Retry-After (0: not).

local BACKOFF_RECOVERY = 0.9  -- a backoff shrinks to this share with each good response
local BACKOFF_FLOOR_MS = 1    -- a smaller backoff is none
local CAP_POLL_MS = 100       -- a node refused by a full cap asks again this soon
local WAITER_MS = 500         -- the node first refused has the next free slot this long

local site_key = KEYS[1]
local inflight_key = KEYS[2]
local sites_key = KEYS[3]
local site = ARGV[1]
local node = ARGV[2]
local count = tonumber(ARGV[3])
local delay_ms = tonumber(ARGV[4])
local jitter = tonumber(ARGV[5])
local seed = tonumber(ARGV[6])
local horizon_ms = tonumber(ARGV[7])
local cap = tonumber(ARGV[8])
local lease_ms = tonumber(ARGV[9])
local idle_ms = tonumber(ARGV[10])
local good = tonumber(ARGV[11])
local done_from = 12

local bad = wrong_type({site_key, 'hash', inflight_key, 'zset', sites_key, 'zset'})
if bad then return bad end

local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)

for i = done_from, #ARGV do
  redis.call('ZREM', inflight_key, ARGV[i])
end
redis.call('ZREMRANGEBYSCORE', inflight_key, '-inf', now)

local state = redis.call('HMGET', site_key, 'tat_ms', 'blocked_ms', 'backoff_ms', 'jitter_u')
local tat = math.max(tonumber(state[1] or now), now, tonumber(state[2] or 0))
local backoff = tonumber(state[3] or 0) * (BACKOFF_RECOVERY ^ good)
if backoff < BACKOFF_FLOOR_MS then backoff = 0 end
local step = math.max(delay_ms, backoff)

local room = count
local retry = -1
if cap > 0 and count > 0 then
  room = math.min(count, cap - redis.call('ZCARD', inflight_key))
  -- fairness: the node first refused takes the next free slot, not the node that freed it
  local waiter = redis.call('HMGET', site_key, 'waiter', 'waiter_ms')
  local waits = waiter[1] and tonumber(waiter[2]) > now - WAITER_MS
  if waits and waiter[1] ~= node then room = 0 end
  if room <= 0 then
    local first = redis.call('ZRANGE', inflight_key, 0, 0, 'WITHSCORES')
    retry = CAP_POLL_MS
    if first[2] then retry = math.min(retry, math.max(0, tonumber(first[2]) - now)) end
    if not waits then redis.call('HSET', site_key, 'waiter', node, 'waiter_ms', now) end
  elseif waits then
    redis.call('HDEL', site_key, 'waiter', 'waiter_ms')
  end
end

local drawn = tonumber(state[4] or 0.5)
if jitter > 0 then math.randomseed(seed) end
local blocked_left = math.max(0, tonumber(state[2] or 0) - now)
local reply = {now, tostring(step), tostring(backoff), retry, tostring(blocked_left)}
for i = 1, room do
  if i > 1 and tat - now > horizon_ms then break end
  local token = ''
  if cap > 0 then
    token = node .. ':' .. redis.call('HINCRBY', site_key, 'seq', 1)
    redis.call('ZADD', inflight_key, now + lease_ms, token)
  end
  reply[#reply + 1] = tostring(tat - now)
  reply[#reply + 1] = token
  local gap = step
  if jitter > 0 then
    local u = math.random()
    gap = step * (1 + jitter * (u - drawn))
    drawn = u
  end
  tat = tat + gap
end

redis.call('HSET', site_key, 'tat_ms', tostring(tat), 'backoff_ms', tostring(backoff),
           'jitter_u', tostring(drawn),
           'delay_ms', tostring(step), 'last_ms', now)
local keep_ms = math.ceil(tat - now) + idle_ms
redis.call('PEXPIRE', site_key, keep_ms)
if cap > 0 then redis.call('PEXPIRE', inflight_key, math.max(keep_ms, lease_ms)) end
redis.call('ZADD', sites_key, now, site)
redis.call('ZREMRANGEBYSCORE', sites_key, '-inf', now - idle_ms)
return reply
