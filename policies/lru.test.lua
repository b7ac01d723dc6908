-- Test of lru.lua, run by tests/policy/test_policy_harness (docs/policies.md).
local t = ...

local function same(got, want, what)
	assert(got, what .. ": the call fell back")
	assert(#got == #want, string.format("%s: %d victims, expected %d (%s)", what, #got, #want,
		table.concat(got, ",")))
	for i = 1, #want do
		assert(got[i] == want[i], string.format("%s: victim %d is %s, expected %s (%s)", what, i,
			tostring(got[i]), tostring(want[i]), table.concat(got, ",")))
	end
end

-- A generous budget: the 200-candidate sort below must not fail on a loaded machine.
assert(t.open{ devices = { "host", "host" }, budget_us = 100000 })
-- Ages from last_use (ns): 1 is the oldest, 3 the newest.
local c = {
	{ bytes = 100, last_use = 3000 },
	{ bytes = 100, last_use = 1000 },
	{ bytes = 100, last_use = 2000 },
}
same(t.evict(150, c), { 2, 3 }, "least recently used first, just enough bytes")
same(t.evict(1000, c), { 2, 3, 1 }, "not enough room: every candidate")
same(t.evict(0, c), {}, "nothing needed")
-- Clean before dirty, unwanted before wanted, whatever their age.
c = {
	{ bytes = 100, last_use = 1000, dirty = true },
	{ bytes = 100, last_use = 5000 },
	{ bytes = 100, last_use = 500, priority = 2 },
	{ bytes = 100, last_use = 4000 },
}
same(t.evict(400, c), { 4, 2, 1, 3 }, "clean, then dirty, then wanted")
-- Never used (last_use 0) is the oldest of all; equal candidates keep their order.
c = { { bytes = 10, last_use = 7 }, { bytes = 10 }, { bytes = 10, last_use = 7 } }
same(t.evict(30, c), { 2, 1, 3 }, "never used first, ties by index")
-- Placement is eager's.
local out = t.place({ { kernel = "k" }, { kernel = "k" } }, { 1, 0 })
assert(out[1] == 2 and out[2] == 1, "eager placement: " .. out[1] .. "," .. out[2])
-- A long list: still a total order (table.sort picks random pivots above 100 entries).
c = {}
for i = 1, 200 do
	c[i] = { bytes = 1, last_use = 1000 + (i % 7) }
end
local a, err = t.evict(200, c)
assert(a, err)
local b = t.evict(200, c)
assert(#a == 200 and table.concat(a, ",") == table.concat(b, ","), "deterministic order")
assert(t.failures() == 0, "no call failed")
