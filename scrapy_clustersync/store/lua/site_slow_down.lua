-- site_slow_down: a site answered 429 or 503; slow it down for the whole cluster. With a
-- Retry-After (retry_ms >= 0) no turn of the site starts before now + retry_ms; without one the
-- site's backoff doubles (at least the site's delay, or BACKOFF_MIN_MS), up to backoff_max_ms,
-- and its next turn moves that far from now. site_turns.lua shrinks it with good responses.
-- Every node is told at once: "site <blocked_ms> <backoff_ms> <site>" is PUBLISHed on the job's
-- control channel (server ms the site is blocked until, 0: not; the backoff in force; the site
-- last, as it is the one free-form part), on which each node drops the turns of the site it
-- reserved and reserves again. Best effort (redis.pcall, as control.lua): a node that does not
-- hear it learns of the slow-down when it next reserves turns of the site.
--
-- (store/site_scripts.py SiteSlowDownScript builds the call and reads the answer.)
--
-- KEYS[1]  site           hash    see site_turns.lua
-- KEYS[2]  sites          zset    site -> server ms of its last use (status, purge)
-- ARGV[1]  site           string  the site (its Scrapy download slot key)
-- ARGV[2]  retry_ms       int     the Retry-After, in ms from now; -1: none (back off)
-- ARGV[3]  delay_ms       float   the site's delay on the node (the least backoff)
-- ARGV[4]  backoff_max_ms int     the longest backoff
-- ARGV[5]  idle_ms        int     the site's keys expire this long after its last turn
-- ARGV[6]  channel        string  the job's control channel (JobKeys.control_channel)
-- Returns {now_ms, blocked_ms offset from now (0: not blocked), backoff_ms}.

local BACKOFF_MIN_MS = 250  -- a site with no delay backs off from this

local site_key = KEYS[1]
local sites_key = KEYS[2]
local site = ARGV[1]
local retry_ms = tonumber(ARGV[2])
local delay_ms = tonumber(ARGV[3])
local backoff_max_ms = tonumber(ARGV[4])
local idle_ms = tonumber(ARGV[5])
local channel = ARGV[6]

local bad = wrong_type({site_key, 'hash', sites_key, 'zset'})
if bad then return bad end

local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local state = redis.call('HMGET', site_key, 'tat_ms', 'blocked_ms', 'backoff_ms')
local tat = math.max(tonumber(state[1] or now), now)
local blocked = math.max(tonumber(state[2] or 0), now)
local backoff = tonumber(state[3] or 0)

if retry_ms >= 0 then
  blocked = math.max(blocked, now + retry_ms)
  tat = math.max(tat, blocked)
else
  backoff = math.min(math.max(backoff * 2, delay_ms, BACKOFF_MIN_MS), backoff_max_ms)
  tat = math.max(tat, now + backoff)
end
redis.call('HSET', site_key, 'tat_ms', tostring(tat), 'blocked_ms', blocked,
           'backoff_ms', tostring(backoff), 'last_ms', now)
redis.call('PEXPIRE', site_key, math.ceil(tat - now) + idle_ms)
redis.call('ZADD', sites_key, now, site)
local blocked_until = 0
if blocked > now then blocked_until = blocked end
redis.pcall('PUBLISH', channel, 'site ' .. blocked_until .. ' ' .. tostring(backoff) .. ' ' .. site)
return {now, blocked - now, tostring(backoff)}
