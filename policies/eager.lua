-- eager: every ready task goes to the feasible device with the shortest queue, counting what
-- this batch already gave each device; ties go to the lowest device number.
local P = { api = 1, name = "eager" }

local load = {} -- reused between calls: no allocation per batch

function P.place(batch, out)
	local nd = batch.ndevices
	for d = 1, nd do
		load[d] = batch.queue[d]
	end
	for i = 1, batch.n do
		local feasible, best, bestq = batch.feasible[i], 0, math.huge
		for d = 1, nd do
			if feasible[d] and load[d] < bestq then
				best, bestq = d, load[d]
			end
		end
		out.device[i] = best -- 0 (no feasible device): the built-in decides
		if best > 0 then
			load[best] = load[best] + 1
		end
	end
end

return P
