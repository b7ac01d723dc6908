-- Test of round_robin.lua, run by tests/policy/test_policy_harness (docs/policies.md).
local t = ...

assert(t.open{ devices = { "host", "host" } })
local seen = {}
for i = 1, 6 do
	seen[i] = t.place({ { kernel = "k" } })[1]
end
assert(table.concat(seen, ",") == "1,2,1,2,1,2", "turns: " .. table.concat(seen, ","))
local out = t.place({ { kernel = "k", feasible = { true, false } }, { kernel = "k" } })
assert(out[1] == 1 and out[2] == 2, "skips infeasible devices: " .. out[1] .. "," .. out[2])
assert(t.failures() == 0, "no call failed")
