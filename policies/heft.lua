-- heft: earliest finish time, as StarPU's dmda. For each ready task and feasible device:
--   finish = when the device's queue drains + work this batch already gave it
--            + the model's run-time estimate + the transfer time of the missing inputs.
-- A device with no estimate yet for the task counts it as free, so every device gets
-- calibrated; after that the models decide.
local P = { api = 1, name = "heft" }

local extra = {}

function P.place(batch, out)
	local nd = batch.ndevices
	for d = 1, nd do
		extra[d] = 0
	end
	for i = 1, batch.n do
		local feasible, est, xfer = batch.feasible[i], batch.estimate[i], batch.transfer[i]
		local best, bestf, bestrun = 0, math.huge, 0
		for d = 1, nd do
			if feasible[d] then
				local run = est[d]
				if run < 0 then
					run = 0 -- uncalibrated: try it
				end
				local f = batch.free_at[d] + extra[d] + run + xfer[d]
				if f < bestf then
					best, bestf, bestrun = d, f, run
				end
			end
		end
		out.device[i] = best
		if best > 0 then
			extra[best] = extra[best] + bestrun + xfer[best]
		end
	end
end

return P
