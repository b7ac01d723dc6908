-- Test of locality.lua, run by tests/policy/test_policy_harness (docs/policies.md).
local t = ...

assert(t.open{ devices = { "host", "host", "host" } })
local out = t.place({
	{ kernel = "k", bytes = 300, resident = { 0, 200, 100 } },
	{ kernel = "k", bytes = 300, resident = { 300, 0, 0 } },
	{ kernel = "k", bytes = 300, resident = { 0, 0, 300 }, feasible = { true, true, false } },
})
assert(out[1] == 2, "most resident bytes: " .. out[1])
assert(out[2] == 1, "most resident bytes: " .. out[2])
assert(out[3] ~= 3, "never an infeasible device")
-- Nothing resident anywhere: the shortest queue, counting this batch's placements.
out = t.place({ { kernel = "k", bytes = 8 }, { kernel = "k", bytes = 8 } }, { 4, 0, 1 })
assert(out[1] == 2 and out[2] == 2, "shortest queue: " .. out[1] .. "," .. out[2])
out = t.place({ { kernel = "k", bytes = 8 }, { kernel = "k", bytes = 8 } }, { 4, 1, 1 })
assert(out[1] == 2 and out[2] == 3, "shortest queue with ties: " .. out[1] .. "," .. out[2])
assert(t.failures() == 0, "no call failed")

-- place_rank: the rank owning most input bytes; ties to the rank given fewest tasks, then the
-- lowest; the same answer every time.
local tasks = {
	{ buffers = { { owner = 1, bytes = 100 }, { owner = 3, bytes = 300 } } },
	{ buffers = { { owner = 2, bytes = 50 } } },
	{ buffers = {} },
	{ buffers = {} },
	{ buffers = {} },
}
local ranks = t.place_rank(tasks, 3)
assert(table.concat(ranks, ",") == "3,2,1,1,2", "place_rank: " .. table.concat(ranks, ","))
assert(table.concat(t.place_rank(tasks, 3), ",") == table.concat(ranks, ","), "deterministic")
assert(t.failures() == 0, "no call failed")
