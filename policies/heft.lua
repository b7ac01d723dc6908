-- heft: earliest finish time, as StarPU's dmda. For each ready task and feasible device:
--   finish = when the device's queue drains + work this batch already gave it
--            + the model's run-time estimate + the transfer time of the missing inputs.
-- A device with no estimate yet for the task counts it as free, so every device gets
-- calibrated; after that the models decide. Equal finish times (nothing measured yet) go to the
-- shorter queue, counting this batch's placements.
local P = { api = 1, name = "heft" }

local extra, load = {}, {}
local huge = math.huge

function P.place(batch, out)
	local nd, queue, free_at = batch.ndevices, batch.queue, batch.free_at
	local feasible_of, estimate_of, transfer_of, device = batch.feasible, batch.estimate,
		batch.transfer, out.device
	for d = 1, nd do
		extra[d] = free_at[d] -- when d is free, with this batch's work so far
		load[d] = queue[d]
	end
	for i = 1, batch.n do
		local feasible, est, xfer = feasible_of[i], estimate_of[i], transfer_of[i]
		local best, bestf, bestrun, bestq = 0, huge, 0, huge
		for d = 1, nd do
			if feasible[d] then
				local run = est[d]
				if run < 0 then
					run = 0 -- uncalibrated: try it
				end
				local f = extra[d] + run + xfer[d]
				if f < bestf or (f == bestf and load[d] < bestq) then
					best, bestf, bestrun, bestq = d, f, run, load[d]
				end
			end
		end
		device[i] = best
		if best > 0 then
			extra[best] = bestf
			load[best] = load[best] + 1
		end
	end
end

return P
