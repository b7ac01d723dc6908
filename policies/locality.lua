-- locality: each ready task goes to the feasible device that already holds most of its input
-- bytes, so fewer bytes move; ties (no input anywhere, or equal shares) go to the shortest queue.
local P = { api = 1, name = "locality" }

local load = {}

function P.place(batch, out)
	local nd = batch.ndevices
	for d = 1, nd do
		load[d] = batch.queue[d]
	end
	for i = 1, batch.n do
		local feasible, resident = batch.feasible[i], batch.resident_bytes[i]
		local best, bestbytes, bestq = 0, -1, math.huge
		for d = 1, nd do
			if feasible[d] then
				local r = resident[d]
				if r > bestbytes or (r == bestbytes and load[d] < bestq) then
					best, bestbytes, bestq = d, r, load[d]
				end
			end
		end
		out.device[i] = best
		if best > 0 then
			load[best] = load[best] + 1
		end
	end
end

return P
