-- control: pause, resume or stop a job for every node, or settle a stop (stopping -> stopped
-- once no live node is left). The state is the meta field `control` (absent = running), with
-- `control_ms`, the server time of its last change. A change is PUBLISHed on the job's control
-- channel (`channel`), so that nodes apply it at once; nodes also re-read the field every
-- fraction of a second (node/control_follower.py), so one that missed the message converges.
-- The PUBLISH is best effort (redis.pcall): an ACL user without pub/sub permission (Redis 7's
-- default for a new user) still changes the state, which the nodes then read within REREAD_S;
-- a PUBLISH refused after the state was written must not report the change as failed.
--
-- (store/control_state.py ControlScript builds the call and reads the answer.)
--
-- KEYS[1]  meta       hash    epoch, control, control_ms, finished_ms (heartbeat.lua's record),
--                             stop_reason (closespider.lua's; a resume removes it)
-- KEYS[2]  nodes      zset    node id -> liveness deadline (server ms)
-- KEYS[3]  queue      zset    the legacy queue (frontier.lua); with meta's fqueued: queued
-- KEYS[4]  deadlines  zset    leased entry id -> lease deadline (server ms)
-- ARGV[1]  action     string  "pause", "resume", "stop" or "settle" (change nothing but a stop
--                             that no live node holds up any more)
-- ARGV[2]  channel    string  the job's control channel (store/keys.py JobKeys.control_channel)
-- Returns {verdict, before, after, control_ms}: verdict is "changed", "same" (already so:
-- nothing done), "finished" (the job finished: pause and stop make no sense, nothing done),
-- "stopping" (pause refused while a stop is under way or done) or "absent" (no such job);
-- before and after are running, paused, stopping or stopped; control_ms is the server ms of
-- the state's last change ("" if never changed).
-- Bounded: a few hash fields, ZCARDs and one ZCOUNT.
local meta_key = KEYS[1]
local nodes_key = KEYS[2]
local queue_key = KEYS[3]
local deadlines_key = KEYS[4]
local action = ARGV[1]
local channel = ARGV[2]
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if not redis.call('HGET', meta_key, 'epoch') then
  return {'absent', '', '', ''}
end
local function set_state(state)
  redis.call('HSET', meta_key, 'control', state, 'control_ms', now_ms)
  redis.pcall('PUBLISH', channel, state)  -- best effort: see the header
end
local state = redis.call('HGET', meta_key, 'control') or 'running'
if state == 'stopping' and redis.call('ZCOUNT', nodes_key, now_ms, '+inf') == 0 then
  state = 'stopped'  -- every node left (or died): the stop is complete
  set_state(state)
end
local before = state
-- finished as join.lua sees it: recorded by heartbeat.lua, and nothing queued or leased since
local finished = state == 'running' and redis.call('HEXISTS', meta_key, 'finished_ms') == 1
  and queued_count(meta_key, queue_key) == 0 and redis.call('ZCARD', deadlines_key) == 0
local verdict = 'same'
local after = state
if action == 'pause' then
  if finished then verdict = 'finished'
  elseif state == 'stopping' or state == 'stopped' then verdict = 'stopping'
  elseif state == 'running' then after = 'paused' end
elseif action == 'resume' then
  if state ~= 'running' then after = 'running' end
elseif action == 'stop' then
  if finished then verdict = 'finished'
  elseif state == 'running' or state == 'paused' then after = 'stopping' end
end
if after ~= before then
  if after == 'stopping' and redis.call('ZCOUNT', nodes_key, now_ms, '+inf') == 0 then
    after = 'stopped'  -- no node to wait for
  end
  verdict = 'changed'
  if after == 'running' then
    redis.call('HDEL', meta_key, 'stop_reason')  -- closespider.lua counts again from zero
  end
  set_state(after)
end
return {verdict, before, after, redis.call('HGET', meta_key, 'control_ms') or ''}
