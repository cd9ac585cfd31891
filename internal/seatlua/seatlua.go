// Package seatlua holds the text of the seat store's release script, which
// cancel/redisseat runs and internal/bench's raw baseline runs too (by
// EVALSHA, without the library around it), so that the baseline is the
// library's own script and never a copy that drifts from it. The script's
// KEYS, ARGV and return are documented at cancel/redisseat's releaseScript.
package seatlua

// LockID defines lockid(v), the id of a lock value (empty for anything but
// a lock); Release uses it.
const LockID = `
local function lockid(v)
  local ms, gen = string.match(v, '^L|[^|]*|[^|]*|(%d+)|?(%d*)$')
  if not ms then return '' end
  if gen == '' then return ms end
  return ms .. '.' .. gen
end
`

// Release is the release script's body, after LockID.
const Release = `
local mine = 'L|' .. ARGV[1] .. '|'
local freed, per = 0, {}
for i = 3, #ARGV do
  local v = redis.call('HGET', KEYS[1], ARGV[i])
  if v and string.sub(v, 1, #mine) == mine and (ARGV[2] == '' or lockid(v) == ARGV[2]) then
    redis.call('HDEL', KEYS[1], ARGV[i])
    redis.call('SREM', KEYS[3], ARGV[i])
    freed = freed + 1
    local user = string.match(string.sub(v, #mine + 1), '^[^|]+')
    if user then per[user] = (per[user] or 0) + 1 end
  end
end
for user, n in pairs(per) do
  local left = tonumber(redis.call('HGET', KEYS[2], user) or '0') - n
  if left > 0 then redis.call('HSET', KEYS[2], user, left) else redis.call('HDEL', KEYS[2], user) end
end
return freed
`
