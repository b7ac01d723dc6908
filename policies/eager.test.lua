-- Test of eager.lua, run by tests/policy/test_policy_harness (docs/policies.md).
local t = ...

local function expect(got, want, what)
	for i = 1, #want do
		assert(got[i] == want[i], string.format("%s: task %d went to %s, expected %s", what, i,
			tostring(got[i]), tostring(want[i])))
	end
end

assert(t.open{ devices = { "host", "host", "host" } })
expect(t.place({ { kernel = "k" } }, { 3, 1, 2 }), { 2 }, "shortest queue")
expect(t.place({ { kernel = "k" }, { kernel = "k" }, { kernel = "k" }, { kernel = "k" } }, { 0, 0, 0 }),
	{ 1, 2, 3, 1 }, "a batch counts its own placements")
expect(t.place({ { kernel = "k", feasible = { false, true, false } } }, { 0, 9, 0 }), { 2 },
	"only feasible devices")
expect(t.place({ { kernel = "k", feasible = { false, false, false } } }), { 0 },
	"no feasible device: the built-in")
assert(t.failures() == 0, "no call failed")
