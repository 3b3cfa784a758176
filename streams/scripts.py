"""Every Lua script of the stream layer, with the race each one closes.

A script runs atomically in Redis, and every script here touches keys of ONE hash tag (one
shard, or the notices), so each is also Redis-Cluster-safe. Keys are always passed in KEYS,
and every call checks that they share one tag (:func:`awooop.streams.keys.one_slot`): a cross-slot
key set fails on a single Redis too, before a cluster would answer CROSSSLOT.

The epoch protocol the scripts implement (details in docs/streams.md):
- the relay creates a shard's consumer groups, republishes what Postgres says is unfinished,
  and only then sets ``epoch(shard)``: an epoch implies the groups were created after the last
  loss of data;
- the relay only appends to a shard's streams while the epoch it knows is still there, checked
  inside the same script as the XADDs: entries never land in a stream whose groups were lost;
- a consumer that finds its group missing creates it at ``0`` unless it knows that the stream
  survived (same epoch as before and a remembered last id): never at ``$``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from redis.exceptions import NoScriptError

from awooop.streams.keys import one_slot


class LuaScript:
    """A script called by SHA, loaded on first use (and again after SCRIPT FLUSH/restart)."""

    def __init__(self, name: str, source: str) -> None:
        self.name = name
        self.source = source
        self.sha = hashlib.sha1(source.encode(), usedforsecurity=False).hexdigest()

    async def __call__(
        self, redis: Any, keys: Sequence[str], args: Sequence[str | bytes | int] = ()
    ) -> Any:
        one_slot(keys)
        try:
            return await redis.evalsha(self.sha, len(keys), *keys, *args)
        except NoScriptError:
            return await redis.eval(self.source, len(keys), *keys, *args)


# KEYS: guard, events stream, work stream. ARGV: expected guard value, field name, routes (one
# character per entry: "e" = events stream only, "w" = work stream only, "b" = both), entry
# lengths (comma-separated), the entries concatenated. (Five arguments instead of two per
# entry: packing thousands of arguments was the relay's largest client-side cost.)
# Returns the number of entries, or -1 (nothing written) when the guard key does not hold the
# expected value. Race closed: Redis can lose its data between the relay's epoch check and this
# call; reading the guard in the same atomic script as the XADDs means entries are only ever
# appended to streams whose groups exist (groups are created before the epoch is set and are
# lost together with it). The guard is epoch(shard) in normal operation and epoch-pending(shard)
# (the reset token) while a reset republishes.
PUBLISH = LuaScript(
    "publish",
    """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
local field, routes, blob = ARGV[2], ARGV[3], ARGV[5]
local pos, i = 1, 0
for size in string.gmatch(ARGV[4], '%d+') do
  i = i + 1
  local data = string.sub(blob, pos, pos + tonumber(size) - 1)
  pos = pos + tonumber(size)
  local route = string.sub(routes, i, i)
  if route ~= 'w' then redis.call('XADD', KEYS[2], '*', field, data) end
  if route == 'w' or route == 'b' then redis.call('XADD', KEYS[3], '*', field, data) end
end
return i
""",
)

# KEYS: epoch, epoch-pending, then one stream key per group to create. ARGV: reset token, then
# one group name per stream key. Returns 0 when the epoch exists (another relay finished a reset
# first: adopt it), else 1 after creating every group at 0 (MKSTREAM; BUSYGROUP is fine: a
# consumer may already have created its group at 0, which is the same thing) and recording the
# token as the reset in progress. At 0 is right: the epoch is missing, so every entry in these
# streams was added after the loss.
RESET_BEGIN = LuaScript(
    "reset_begin",
    """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
for i = 3, #KEYS do
  local r = redis.pcall('XGROUP', 'CREATE', KEYS[i], ARGV[i - 1], '0', 'MKSTREAM')
  if type(r) == 'table' and r.err and not string.find(r.err, 'BUSYGROUP', 1, true) then
    return redis.error_reply(r.err)
  end
end
redis.call('SET', KEYS[2], ARGV[1])
return 1
""",
)

# KEYS: epoch-pending, epoch. ARGV: reset token. Moves the token to the epoch only if the reset
# token is still there: if Redis lost its data again during the republish (the token is gone),
# returns 0 and the relay starts the reset over instead of declaring a half-filled stream whole.
RESET_FINISH = LuaScript(
    "reset_finish",
    """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[2], ARGV[1])
redis.call('DEL', KEYS[1])
return 1
""",
)

# KEYS: notices epoch, notices stream. ARGV: a fresh epoch value, MAXLEN, field, then entries.
# Writes the fresh epoch first when it is missing (Redis lost the notices: readers see the value
# change and revalidate their caches), then appends. Returns 1 when it wrote a fresh epoch.
PUBLISH_NOTICES = LuaScript(
    "publish_notices",
    """
local reset = 0
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('SET', KEYS[1], ARGV[1])
  reset = 1
end
for i = 4, #ARGV do
  redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[2], '*', ARGV[3], ARGV[i])
end
return reset
""",
)

# KEYS: stream. ARGV: MAXLEN for a stream without groups, field name.
# Trimming policy (see streams/relay_trim.py): a group still needs its pending entries (they may be
# reclaimed) and everything after its last-delivered id. The floor is the smallest of those
# over all groups; entries strictly below it go (MINID ~, so whole macro nodes only, never at
# or above the floor). A stream without groups is only capped (MAXLEN ~). Race closed: a group
# created between reading the groups and trimming could need entries below the floor; doing
# both in one script leaves no such window.
# Returns {trimmed, floor id or false, the floor entry's field or false, drained,
# {{group, pending, lag}}}: trimmed is -1 when the stream does not exist; drained is 1 when
# every group has read and acknowledged the stream's last entry.
TRIM = LuaScript(
    "trim",
    """
local function parse(id)
  local dash = string.find(id, '-', 1, true)
  return tonumber(string.sub(id, 1, dash - 1)), tonumber(string.sub(id, dash + 1))
end
local function older(a, b)
  local am, as = parse(a)
  local bm, bs = parse(b)
  return am < bm or (am == bm and as < bs)
end
if redis.call('EXISTS', KEYS[1]) == 0 then return {-1, false, false, 0, {}} end
local groups = redis.call('XINFO', 'GROUPS', KEYS[1])
local stats = {}
local floor = false
local any_pending = false
for _, g in ipairs(groups) do
  local info = {}
  for i = 1, #g, 2 do info[g[i]] = g[i + 1] end
  local need = info['last-delivered-id']
  if info['pending'] > 0 then
    need = redis.call('XPENDING', KEYS[1], info['name'])[2]
    any_pending = true
  end
  if not floor or older(need, floor) then floor = need end
  table.insert(stats, {info['name'], info['pending'], info['lag'] or -1})
end
if not floor then
  return {redis.call('XTRIM', KEYS[1], 'MAXLEN', '~', ARGV[1]), false, false, 0, stats}
end
local trimmed = redis.call('XTRIM', KEYS[1], 'MINID', '~', floor)
local data = false
local first = redis.call('XRANGE', KEYS[1], floor, '+', 'COUNT', 1)[1]
if first then
  for i = 1, #first[2], 2 do
    if first[2][i] == ARGV[2] then data = first[2][i + 1] end
  end
end
local drained = 0
local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)[1]
if last and not any_pending and last[1] == floor then drained = 1 end
return {trimmed, floor, data, drained, stats}
""",
)

# KEYS: epoch, stream. ARGV: group, the epoch the consumer knew ('' if none), the last entry id
# it read from this stream in that epoch ('' if none). Creates the group (MKSTREAM) at:
# - the remembered last id when the epoch is unchanged (the stream survived; only the group
#   went away): no flood of duplicates, nothing after that id is missed;
# - 0 otherwise: with no epoch every entry was added after the loss, and after a new epoch the
#   stream holds only what the relay republished and published since.
# Never at $ (that would skip entries published before the group existed). Atomic with the
# epoch read, so a relay reset cannot slip between the decision and the creation.
# Returns {current epoch or '', start id used, 1 if created / 0 if the group existed}.
ENSURE_GROUP = LuaScript(
    "ensure_group",
    """
local current = redis.call('GET', KEYS[1])
local start = '0'
if current and current == ARGV[2] and ARGV[3] ~= '' then start = ARGV[3] end
local r = redis.pcall('XGROUP', 'CREATE', KEYS[2], ARGV[1], start, 'MKSTREAM')
local created = 1
if type(r) == 'table' and r.err then
  if not string.find(r.err, 'BUSYGROUP', 1, true) then return redis.error_reply(r.err) end
  created = 0
end
return {current or '', start, created}
""",
)

# KEYS: stream. ARGV: group, consumer, min idle ms, start cursor, count.
# One XAUTOCLAIM step plus the delivery count of each claimed entry (XAUTOCLAIM increments it
# but does not return it); in one script so no other consumer can claim the entry in between.
# Returns {next cursor, {{id, fields, delivery count}}, {deleted ids}}.
AUTOCLAIM = LuaScript(
    "autoclaim",
    """
local r = redis.call('XAUTOCLAIM', KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4], 'COUNT', ARGV[5])
local out = {}
for _, entry in ipairs(r[2]) do
  if entry then
    local p = redis.call('XPENDING', KEYS[1], ARGV[1], entry[1], entry[1], 1)
    local count = 1
    if p[1] then count = p[1][4] end
    table.insert(out, {entry[1], entry[2], count})
  end
end
return {r[1], out, r[3] or {}}
""",
)

# KEYS: stream. ARGV: group, consumer, then entry ids. Resets the idle time of the entries this
# consumer still owns (XCLAIM ... JUSTID does not count a delivery). An entry another consumer
# has reclaimed in the meantime is left alone: touching it would steal it back. Returns the
# number of entries touched.
TOUCH = LuaScript(
    "touch",
    """
local touched = 0
for i = 3, #ARGV do
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1)
  if p[1] and p[1][2] == ARGV[2] then
    redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[i], 'JUSTID')
    touched = touched + 1
  end
end
return touched
""",
)

# KEYS: stream. ARGV: group, consumer, entry id, delivery count. Sets the entry's delivery count
# (XCLAIM ... RETRYCOUNT ... JUSTID; its idle time restarts, as the reclaim that delivered it
# just restarted it) if this consumer still owns it. Race closed: another consumer that
# reclaimed the entry meanwhile keeps it, and keeps the count its own claim gave it. Returns 1
# when the count was set, else 0.
SET_DELIVERIES = LuaScript(
    "set_deliveries",
    """
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[3], ARGV[3], 1)
if p[1] and p[1][2] == ARGV[2] then
  redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[3], 'RETRYCOUNT', ARGV[4], 'JUSTID')
  return 1
end
return 0
""",
)
