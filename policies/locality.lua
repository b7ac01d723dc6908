-- locality: each ready task goes to the feasible device that already holds most of its input
-- bytes, so fewer bytes move; ties (no input anywhere, or equal shares) go to the shortest queue.
-- Across ranks (place_rank) the same rule: the rank owning most of the task's buffer bytes, ties
-- to the rank given fewest tasks of this batch, then the lowest rank.
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

-- place_rank must give the same answer on every rank: arrays only (no `pairs`), no random.
local rank_bytes, rank_load = {}, {}

function P.place_rank(batch, out)
	local nr = batch.nranks
	for r = 1, nr do
		rank_load[r] = 0
	end
	for i = 1, batch.n do
		for r = 1, nr do
			rank_bytes[r] = 0
		end
		local owner, bytes = batch.owner[i], batch.buffer_bytes[i]
		for k = 1, batch.nbufs[i] do
			local r = owner[k]
			rank_bytes[r] = rank_bytes[r] + bytes[k]
		end
		local best = 1
		for r = 2, nr do
			local b, bb = rank_bytes[r], rank_bytes[best]
			if b > bb or (b == bb and rank_load[r] < rank_load[best]) then
				best = r
			end
		end
		out.rank[i] = best
		rank_load[best] = rank_load[best] + 1
	end
	return batch.n
end

return P
