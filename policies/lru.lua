-- lru: eviction by least recent use. Among the candidates C offers (idle replicas on the memory
-- node that needs room), buffers no queued task wants go before wanted ones, clean copies before
-- dirty ones (a dirty copy is written back first), and the least recently used first; it names
-- just enough of them to free `need` bytes (all of them if that is not enough). Placement is
-- eager's: the feasible device with the shortest queue.
local P = { api = 1, name = "lru" }

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
		out.device[i] = best
		if best > 0 then
			load[best] = load[best] + 1
		end
	end
end

local idx = {}
local cand -- the candidates of the running call, for `before`

-- A total order (ties end on the index), so the same candidates always give the same answer.
local function before(a, b)
	local pa, pb = cand.priority[a], cand.priority[b]
	if pa ~= pb then
		return pa < pb -- wanted by fewer or less urgent tasks first
	end
	local da, db = cand.dirty[a], cand.dirty[b]
	if da ~= db then
		return db -- clean first: no write-back
	end
	local aa, ab = cand.age_us[a], cand.age_us[b]
	if aa ~= ab then
		return aa > ab -- least recently used first
	end
	return a < b
end

function P.evict(need, candidates, out)
	local n = candidates.n
	for i = 1, n do
		idx[i] = i
	end
	for i = #idx, n + 1, -1 do
		idx[i] = nil
	end
	cand = candidates
	table.sort(idx, before)
	cand = nil
	local freed, k = 0, 0
	while k < n and freed < need do
		k = k + 1
		out.order[k] = idx[k]
		freed = freed + candidates.bytes[idx[k]]
	end
	return k
end

return P
