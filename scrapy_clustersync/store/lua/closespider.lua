-- closespider: add one node's counts of pages, items and errors to the job's totals and, when a
-- total reaches its CLOSESPIDER_* limit (or a timeout passed on the Redis clock), stop the job
-- for every node with Scrapy's close reason (`closespider_pagecount` ...): the meta field
-- `control` becomes `stopping` (as control.lua's stop), `stop_reason` records the reason, and
-- "stopping <reason>" is PUBLISHed on the job's control channel (best effort, as control.lua).
-- A resume (control.lua) removes `stop_reason`: the next call finds the counts' own
-- `stop_reason` without the meta's and starts the counts again from zero (and the timeouts
-- from then).
-- A limit of 0 is off (Scrapy's meaning). A call id seen before from this node adds nothing.
--
-- (store/closespider_script.py CloseSpiderScript builds the call and reads the answer.)
--
-- KEYS[1]  meta        hash    epoch, control, control_ms, stop_reason (written here)
-- KEYS[2]  closespider hash    pages, items, errors, pages_no_item, started_ms, last_item_ms,
--                              tickets, stop_reason (the reason these counts stopped the job),
--                              "call:<node>" -> "<that node's last call id> <granted>"
-- ARGV[1]  channel     string  the job's control channel (store/keys.py JobKeys.control_channel)
-- ARGV[2]  node        string  the calling node's id
-- ARGV[3]  call_id     string  this call's id (a retried call adds nothing more)
-- ARGV[4]  pages       int     responses the node received since its last call
-- ARGV[5]  items       int     items it scraped since
-- ARGV[6]  errors      int     spider errors since
-- ARGV[7]  pagecount   int     CLOSESPIDER_PAGECOUNT (0: off)
-- ARGV[8]  itemcount   int     CLOSESPIDER_ITEMCOUNT (0: off)
-- ARGV[9]  errorcount  int     CLOSESPIDER_ERRORCOUNT (0: off)
-- ARGV[10] timeout_ms  int     CLOSESPIDER_TIMEOUT in ms, from the counts' start (0: off)
-- ARGV[11] no_item_ms  int     CLOSESPIDER_TIMEOUT_NO_ITEM in ms since the last item (0: off)
-- ARGV[12] pages_no_item int   CLOSESPIDER_PAGECOUNT_NO_ITEM (0: off)
-- ARGV[13] want        int     page tickets the node asks for (granted: at most what is left of
--                              pagecount once every ticket granted is counted; 0 without one)
-- ARGV[14] give_back   int     tickets the node took and did not use (a request that got no
--                              response, tickets left at close): they can be granted again
-- Returns {pages, items, errors, stop_reason, granted}: the job's totals after this call, the
-- reason the job was stopped for a limit ("" if it was not) and the tickets granted by this
-- call (a retried call answers the same).
-- Page tickets: a request goes to the site only with a ticket, so the site sees at most
-- pagecount requests of the cluster (`tickets` counts those out, given back or not).
-- Bounded: a few hash fields, one PUBLISH.
local meta_key = KEYS[1]
local closespider_key = KEYS[2]
local channel = ARGV[1]
local node = ARGV[2]
local call_id = ARGV[3]
local pages = tonumber(ARGV[4])
local items = tonumber(ARGV[5])
local errors = tonumber(ARGV[6])
local pagecount = tonumber(ARGV[7])
local itemcount = tonumber(ARGV[8])
local errorcount = tonumber(ARGV[9])
local timeout_ms = tonumber(ARGV[10])
local no_item_ms = tonumber(ARGV[11])
local pages_no_item = tonumber(ARGV[12])
local want = tonumber(ARGV[13])
local give_back = tonumber(ARGV[14])
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function answer(granted)
  local c = redis.call('HMGET', closespider_key, 'pages', 'items', 'errors')
  return {tonumber(c[1]) or 0, tonumber(c[2]) or 0, tonumber(c[3]) or 0,
          redis.call('HGET', meta_key, 'stop_reason') or '', granted}
end
if not redis.call('HGET', meta_key, 'epoch') then
  return {0, 0, 0, '', 0}
end
-- resumed after a stop for a limit: count again from zero
if redis.call('HEXISTS', closespider_key, 'stop_reason') == 1
    and redis.call('HEXISTS', meta_key, 'stop_reason') == 0 then
  redis.call('HDEL', closespider_key, 'pages', 'items', 'errors', 'pages_no_item', 'started_ms',
             'last_item_ms', 'stop_reason', 'tickets')
end
redis.call('HSETNX', closespider_key, 'started_ms', now_ms)
redis.call('HSETNX', closespider_key, 'last_item_ms', now_ms)
local call_field = 'call:' .. node
local last = redis.call('HGET', closespider_key, call_field)
if last and string.sub(last, 1, #call_id + 1) == call_id .. ' ' then
  return answer(tonumber(string.sub(last, #call_id + 2)))
end
local total_pages = redis.call('HINCRBY', closespider_key, 'pages', pages)
local total_items = redis.call('HINCRBY', closespider_key, 'items', items)
local total_errors = redis.call('HINCRBY', closespider_key, 'errors', errors)
local since_item
if items > 0 then
  redis.call('HSET', closespider_key, 'last_item_ms', now_ms, 'pages_no_item', 0)
  since_item = 0
else
  since_item = redis.call('HINCRBY', closespider_key, 'pages_no_item', pages)
end
-- (tickets given back after a resume started the counts again were not counted: not below 0)
local tickets = math.max(0,
  (tonumber(redis.call('HGET', closespider_key, 'tickets')) or 0) - give_back)
local granted = 0
local state = redis.call('HGET', meta_key, 'control') or 'running'
if pagecount > 0 and want > 0 and state == 'running' then
  granted = math.max(0, math.min(want, pagecount - tickets))
end
redis.call('HSET', closespider_key, 'tickets', tickets + granted)
redis.call('HSET', closespider_key, call_field, call_id .. ' ' .. granted)
if state ~= 'running' and state ~= 'paused' then
  return answer(granted)  -- stopping or stopped already: nothing to decide
end
local started_ms = tonumber(redis.call('HGET', closespider_key, 'started_ms'))
local last_item_ms = tonumber(redis.call('HGET', closespider_key, 'last_item_ms'))
local reason = nil
if errorcount > 0 and total_errors >= errorcount then reason = 'closespider_errorcount'
elseif pagecount > 0 and total_pages >= pagecount then reason = 'closespider_pagecount'
elseif itemcount > 0 and total_items >= itemcount then reason = 'closespider_itemcount'
elseif timeout_ms > 0 and now_ms - started_ms >= timeout_ms then reason = 'closespider_timeout'
elseif no_item_ms > 0 and now_ms - last_item_ms >= no_item_ms then
  reason = 'closespider_timeout_no_item'
elseif pages_no_item > 0 and since_item >= pages_no_item then
  reason = 'closespider_pagecount_no_item'
end
if reason then
  redis.call('HSET', meta_key, 'control', 'stopping', 'control_ms', now_ms, 'stop_reason', reason)
  redis.call('HSET', closespider_key, 'stop_reason', reason)
  redis.pcall('PUBLISH', channel, 'stopping ' .. reason)  -- best effort: see control.lua
end
return answer(granted)
