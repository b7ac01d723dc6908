-- The sandbox as a policy sees it, and deterministic random numbers (tests/policy/probe.lua).
local t = ...

assert(t.open{ devices = { "host", "host" } })
local out, err = t.place({ { kernel = "probe" } })
assert(err == nil, err)
assert(out[1] == 1)
assert(t.place({ { kernel = "argmin" } })[1] == 2, "odx.argmin")
local function sequence()
	assert(t.open{ devices = { "host", "host" } })
	local s = {}
	for i = 1, 16 do
		s[i] = t.place({ { kernel = "rand" } })[1]
	end
	return table.concat(s, ",")
end
local a, b = sequence(), sequence()
assert(a == b, "odx.random is seeded the same way each time: " .. a .. " vs " .. b)
assert(a:find("1") and a:find("2"), "odx.random covers the range: " .. a)
