-- round_robin: ready tasks go to the feasible devices in turn.
local P = { api = 1, name = "round_robin" }

local next_device = 1

function P.place(batch, out)
	local nd = batch.ndevices
	for i = 1, batch.n do
		local feasible = batch.feasible[i]
		out.device[i] = 0
		for k = 0, nd - 1 do
			local d = (next_device + k - 1) % nd + 1
			if feasible[d] then
				out.device[i] = d
				next_device = d % nd + 1
				break
			end
		end
	end
end

function P.selftest()
	return next_device == 1
end

return P
