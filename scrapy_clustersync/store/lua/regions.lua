-- regions: pin sites to regions (`clustersync regions JOB --pin SITE=REGION`), or unpin them.
-- A site's region is part of its queue classes (frontier.lua: "<kind>:<priority>@<region>"),
-- so a pin moves the requests the site has queued from the lists of its old classes to those of
-- its new ones, each list with one RENAME, and its place in their ready or rest sets with it
-- (its turn or rest time kept): the frontier's invariants hold after every call. Leased
-- requests of the site go back to the classes of its region at that time, if their lease ends.
--
-- (store/region_pins.py RegionsScript builds the call and reads the answer.)
--
-- KEYS[1]  meta      hash    the job's epoch (absent: no such job, nothing done)
-- KEYS[2]  frontier  prefix  the frontier's key names start with this (frontier.lua)
-- ARGV[1..] pins     pairs   site, region ('' to unpin)
-- Returns {changed, moved}: sites whose region changed; requests of theirs moved between
-- lists. {-1, 0} when the job does not exist.
-- Bounded: a few commands per site and queue class (one class per priority in use).
local meta_key = KEYS[1]
local frontier_key = KEYS[2]
local pins_from = 1
if redis.call('HEXISTS', meta_key, 'epoch') == 0 then
  return {-1, 0}
end
frontier_setup(frontier_key, meta_key, '', '')
local classes = redis.call('ZRANGE', FRONTIER.classes, 0, -1, 'WITHSCORES')
local changed, moved = 0, 0

-- the sets that hold `site` in `class` (ready or rest), moved to `to` with the same score
local function move_membership(class, to, site)
  for _, set_key in ipairs({ready_key, rest_key}) do
    local score = redis.call('ZSCORE', set_key(class), site)
    if score then
      redis.call('ZREM', set_key(class), site)
      redis.call('ZADD', set_key(to), score, site)
    end
  end
  if redis.call('EXISTS', ready_key(class), rest_key(class)) == 0 then
    redis.call('ZREM', FRONTIER.classes, class)
  end
end

for i = pins_from, #ARGV - 1, 2 do
  local site, region = ARGV[i], ARGV[i + 1]
  local before = redis.call('HGET', FRONTIER.regions, site) or ''
  if before ~= region then
    changed = changed + 1
    if region == '' then
      redis.call('HDEL', FRONTIER.regions, site)
    else
      redis.call('HSET', FRONTIER.regions, site, region)
    end
    for j = 1, #classes, 2 do
      local class, order = classes[j], classes[j + 1]
      local kind, prio, class_region = parse_class(class)
      if class_region == before then
        local list = list_key(class, site)
        local length = redis.call('LLEN', list)
        if length > 0 then
          local to = class_named(kind, prio, region)
          local into = list_key(to, site)
          if redis.call('EXISTS', into) == 0 then
            redis.call('RENAME', list, into)
          else  -- (not expected: a site's requests are queued in its region's classes only)
            send_in_batches('RPUSH', into, redis.call('LRANGE', list, 0, -1))
            redis.call('UNLINK', list)
          end
          redis.call('ZADD', FRONTIER.classes, 'NX', order, to)
          move_membership(class, to, site)
          moved = moved + length
        end
      end
    end
  end
end
return {changed, moved}
