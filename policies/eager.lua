-- eager: every ready task goes to the feasible device with the shortest queue, counting what
-- this batch already gave each device; ties go to the lowest device number.
local P = { api = 1, name = "eager" }

local load = {} -- reused between calls: no allocation per batch
local huge = math.huge

function P.place(batch, out)
	local nd, queue, feasible_of, device = batch.ndevices, batch.queue, batch.feasible, out.device
	for d = 1, nd do
		load[d] = queue[d]
	end
	for i = 1, batch.n do
		local feasible, best, bestq = feasible_of[i], 0, huge
		for d = 1, nd do
			if feasible[d] and load[d] < bestq then
				best, bestq = d, load[d]
			end
		end
		device[i] = best -- 0 (no feasible device): the built-in decides
		if best > 0 then
			load[best] = load[best] + 1
		end
	end
end

return P
