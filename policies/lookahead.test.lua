-- Test of lookahead.lua, run by tests/policy/test_policy_harness (docs/policies.md).
local t = ...

local function list(x)
	return x and table.concat(x, ",") or "nil"
end

assert(t.open{ devices = { "host", { kind = "cuda", name = "gpu0" } } })

-- Prefetch, nothing measured (1 us per task): the order in which the devices reach the tasks,
-- earlier when the inputs take longer to arrive (1 MB at 10 GB/s = 100 us).
local w = {
	{ device = 1, buffers = { { id = 11, missing = 1000 } } },
	{ device = 1, buffers = { { id = 12, missing = 1000 } } },
	{ device = 2, buffers = { { id = 13, missing = 1000000 } } },
	{ device = 2, buffers = { { id = 14, missing = 0 } } }, -- nothing to fetch: left out
}
local order = t.prefetch(w)
assert(list(order) == "3,1,2", "deadline order: " .. list(order))
-- Priority: a device runs its higher-priority task first, so its inputs come first.
w = {
	{ device = 1, buffers = { { id = 1, missing = 64 } } },
	{ device = 1, priority = 5, buffers = { { id = 2, missing = 64 } } },
}
assert(list(t.prefetch(w)) == "2,1", "priority first: " .. list(t.prefetch(w)))
-- Measured devices: the long queue on device 1 makes its task less urgent.
for _ = 1, 5 do
	t.complete("k", 1, 64, 100.0)
	t.complete("k", 2, 64, 100.0)
end
w = {
	{ device = 1, buffers = { { id = 1, missing = 64 } } },
	{ device = 2, buffers = { { id = 2, missing = 64 } } },
}
assert(list(t.prefetch(w, { 10, 0 })) == "2,1", "queue drain: " .. list(t.prefetch(w, { 10, 0 })))

-- Placement: the transfer overlaps the queue drain (heft adds them).
-- Device 1: 10 queued x 100 us = 1000 us, nothing to fetch, 100 us run -> 1100.
-- Device 2: empty, 500 us to fetch, 100 us run -> 600: lookahead takes device 2.
local out = t.place({ { kernel = "k", bytes = 64, missing = { 0, 5000000 } } }, { 10, 0 })
assert(out[1] == 2, "transfer overlapped: " .. out[1])
-- Measured links change the estimate: a slow link into device 2's node makes device 1 better.
t.bandwidth(1, 2, 1e9)
out = t.place({ { kernel = "k", bytes = 64, missing = { 0, 5000000 } } }, { 10, 0 })
assert(out[1] == 1, "slow link: " .. out[1])
-- Unmeasured kernel, equal queues: spread like eager.
out = t.place({ { kernel = "new" }, { kernel = "new" } }, { 0, 0 })
assert(out[1] ~= out[2], "ties spread: " .. out[1] .. "," .. out[2])
assert(t.failures() == 0, "no call failed")
