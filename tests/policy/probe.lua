-- A policy that probes its sandbox (tests/policy/sandbox.test.lua): every name a policy must not
-- reach is checked at load, and `place` reports what leaked.
local P = { api = 1 }

local leaks = {}
local function leak(what, cond)
	if cond then
		leaks[#leaks + 1] = what
	end
end
leak("io", io ~= nil)
leak("os", os ~= nil)
leak("debug", debug ~= nil)
leak("package", package ~= nil)
leak("require", require ~= nil)
leak("load", load ~= nil)
leak("loadfile", loadfile ~= nil)
leak("dofile", dofile ~= nil)
leak("collectgarbage", collectgarbage ~= nil)
leak("string.dump", string.dump ~= nil)
leak("coroutine", coroutine ~= nil)
leak("math.randomseed", math.randomseed ~= nil)
leak("string metatable", type(getmetatable("")) == "table")
leak("(''):dump", pcall(function() return ("").dump end) and ("").dump ~= nil)
leak("odx helpers missing", type(odx) ~= "table" or type(odx.argmin) ~= "function")

function P.place(batch, out)
	if batch.kernel[1] == "rand" then
		out.device[1] = odx.random(batch.ndevices)
	elseif batch.kernel[1] == "argmin" then
		out.device[1] = odx.argmin({ 5, 3, 4 }) -- 2
	elseif #leaks > 0 then
		error("sandbox leaks: " .. table.concat(leaks, ", "))
	else
		out.device[1] = 1
	end
end

return P
