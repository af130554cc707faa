-- tasks: the user's tasks and the job's failed requests, kept by the scripts that push, lease and
-- ack (flush.lua, lease.lua), so that a task's record changes in the same atomic step as its
-- requests, with no call of its own. Loaded after prelude.lua; the script calls task_setup first.
--
-- A task is the user's id in a request's meta["clustersync_task"] (children inherit it). The
-- job keeps, in KEYS it is given:
--   tasks     hash  task id -> its record, a JSON object (store/task_records.py TaskRecord parses it):
--                   state, requests (entries pushed), open (of those, still queued or leased),
--                   done, failed, filtered (pushes dedup dropped), created_ms, started_ms,
--                   ended_ms, updated_ms, node (of the last change), failure (the first failed
--                   request: url, node, at_ms, status, error, attempts, errback)
--   task_of   hash  entry id -> task id, while the entry is queued or leased
--   failed    list  the newest failed requests, a JSON object each (store/task_records.py
--                   FailedRequest), at most `keep` of them
-- The state is never written by a caller: it follows from the counts, in one place
-- (task_state): pending (open, none leased yet) -> running (one was leased) -> success or failed
-- (nothing open; failed if any request failed). Counts change only when an entry really is
-- pushed or really leaves the job, which the scripts already count once (a repeated ack, a late
-- ack of a reclaimed entry, a retried call change nothing), and a lease moves only pending to
-- running: so a late or repeated update never turns success back into running. Only new work (a
-- new entry pushed for the task) reopens a finished task. "paused" and "terminated" are not
-- stored: readers show them from the job's control state (store/task_records.py).
local TASKS = {}

local function task_setup(tasks_key, task_of_key, node, now_ms)
  TASKS.tasks, TASKS.task_of, TASKS.node, TASKS.now = tasks_key, task_of_key, node, now_ms
  -- jobs without tasks pay one EXISTS per call, not one HGET per entry
  TASKS.any = redis.call('EXISTS', task_of_key) == 1
end

local function task_load(id)
  local raw = redis.call('HGET', TASKS.tasks, id)
  if raw then
    local ok, rec = pcall(cjson.decode, raw)
    if ok and type(rec) == 'table' then return rec end
  end
  return {requests = 0, open = 0, done = 0, failed = 0, filtered = 0, created_ms = TASKS.now}
end

local function task_state(rec)
  if rec.open > 0 then
    if rec.started_ms then return 'running' end
    return 'pending'
  end
  if rec.failed > 0 then return 'failed' end
  return 'success'
end

local function task_save(id, rec)
  rec.state = task_state(rec)
  if rec.state == 'success' or rec.state == 'failed' then
    rec.ended_ms = rec.ended_ms or TASKS.now
  else
    rec.ended_ms = nil
  end
  rec.updated_ms, rec.node = TASKS.now, TASKS.node
  redis.call('HSET', TASKS.tasks, id, cjson.encode(rec))
end

-- A push of task `id` queued entry `entry` (nil: dedup dropped it).
local function task_pushed(id, entry)
  local rec = task_load(id)
  if entry then
    rec.requests, rec.open = rec.requests + 1, rec.open + 1
    redis.call('HSET', TASKS.task_of, entry, id)
    TASKS.any = true
  else
    rec.filtered = rec.filtered + 1
  end
  task_save(id, rec)
end

-- Entry `entry` was leased: its task, if pending, is running now (nothing else changes).
local function task_leased(entry)
  if not TASKS.any then return end
  local id = redis.call('HGET', TASKS.task_of, entry)
  if not id then return end
  local rec = task_load(id)
  if task_state(rec) ~= 'pending' then return end
  rec.started_ms = TASKS.now
  task_save(id, rec)
end

-- Entry `entry` left the job (acked, failed or dead-lettered), once; `failure` is nil or what
-- failed (a table). Returns its task id, or nil.
local function task_settled(entry, failure)
  if not TASKS.any then return nil end
  local id = redis.call('HGET', TASKS.task_of, entry)
  if not id then return nil end
  redis.call('HDEL', TASKS.task_of, entry)
  local rec = task_load(id)
  rec.open, rec.done = math.max(0, rec.open - 1), rec.done + 1
  if failure then
    rec.failed = rec.failed + 1
    rec.failure = rec.failure or failure
  end
  task_save(id, rec)
  return id
end

-- What failed, as the F op says it: url, status (0: none), error, attempts (0: unknown), errback.
local function failure_of(url, status, error, attempts, errback)
  local failure = {url = url, node = TASKS.node, at_ms = TASKS.now, error = error,
                   errback = errback == '1'}
  if tonumber(status) > 0 then failure.status = tonumber(status) end
  if tonumber(attempts) > 0 then failure.attempts = tonumber(attempts) end
  return failure
end

-- Record a failed request in the `failed` list, newest first, keeping `keep` (0: none).
local function failed_record(failed_key, keep, entry, task, failure)
  if keep <= 0 then return end
  local record = {entry = entry, task = task}
  for name, value in pairs(failure) do record[name] = value end
  redis.call('LPUSH', failed_key, cjson.encode(record))
  redis.call('LTRIM', failed_key, 0, keep - 1)
end
