-- requeue: put dead letters back into the queue (`clustersync dead JOB --requeue`), each once.
-- A dead letter named here is taken out of the dead list and its request goes back into the
-- queue under its old entry id, in one step, so that a second call with the same letters (a
-- retry after a lost reply) finds them gone and changes nothing more. A requeue counts as a
-- push (stats `pushed`, and `requeued`), so `clustersync check`'s count invariant still holds:
-- pushed - acked - dead <= entries <= pushed - acked.
--
-- (store/dead_requeue.py RequeueScript builds the call and reads the answer.)
--
-- KEYS[1]  meta      hash    the job's epoch (absent: no such job, nothing done)
-- KEYS[2]  dead      list    dead letters, newest first (records.py DeadLetter)
-- KEYS[3]  entries   hash    entry id -> encoded request
-- KEYS[4]  queue     zset    entry id -> queue score (-priority)
-- KEYS[5]  stats     hash    job counters
-- ARGV[1..] letter   string  triples: the dead letter exactly as the dead list holds it, its
--                            entry id, the queue score read from its request
-- Returns {requeued, gone, queued}: letters put back; letters no longer in the dead list
-- (requeued before, or trimmed); letters whose entry id is already held (the letter is only
-- removed). {-1, 0, 0} when the job does not exist.
-- Bounded: one LREM (the dead list is capped) and a few commands per letter.
local meta_key = KEYS[1]
local dead_key = KEYS[2]
local entries_key = KEYS[3]
local queue_key = KEYS[4]
local stats_key = KEYS[5]
local letter_from = 1
if redis.call('HEXISTS', meta_key, 'epoch') == 0 then
  return {-1, 0, 0}
end
local requeued, gone, queued = 0, 0, 0
for i = letter_from, #ARGV - 2, 3 do
  local letter, id, score = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local newline = string.find(letter, '\n', 1, true)
  if not newline or redis.call('LREM', dead_key, 1, letter) == 0 then
    gone = gone + 1
  elseif redis.call('HEXISTS', entries_key, id) == 1 then
    queued = queued + 1
  else
    redis.call('HSET', entries_key, id, string.sub(letter, newline + 1))
    redis.call('ZADD', queue_key, tonumber(score) or 0, id)
    requeued = requeued + 1
  end
end
if requeued > 0 then
  redis.call('HINCRBY', stats_key, 'pushed', requeued)
  redis.call('HINCRBY', stats_key, 'requeued', requeued)
end
return {requeued, gone, queued}
