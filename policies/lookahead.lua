-- lookahead: placement and prefetch that look at what the devices will do next.
--
-- place: earliest finish time, as heft, except that a task's missing inputs are fetched while
--   its device drains its queue, so start = max(when the device is free, when the inputs are
--   there) and finish = start + the model's run-time estimate. Ties (e.g. nothing measured yet)
--   go to the shortest queue, counting this batch's placements.
-- prefetch: each waiting task's expected start is when its device gets to it (the queue drains,
--   then the window's tasks on that device in priority order, each taking the device's mean task
--   time, 1 us while unmeasured); its deadline is that start minus the time its inputs take to
--   arrive. Inputs are fetched by earliest deadline, then higher priority, then window order.
--   Tasks with nothing missing are left out.
local P = { api = 1, name = "lookahead" }

local busy, load = {}, {}

function P.place(batch, out)
	local nd = batch.ndevices
	for d = 1, nd do
		busy[d] = batch.free_at[d]
		load[d] = batch.queue[d]
	end
	for i = 1, batch.n do
		local feasible, est, xfer = batch.feasible[i], batch.estimate[i], batch.transfer[i]
		local best, bestf, bestq = 0, math.huge, math.huge
		for d = 1, nd do
			if feasible[d] then
				local run = est[d]
				if run < 0 then
					run = 0 -- uncalibrated: try it
				end
				local start = busy[d]
				if xfer[d] > start then
					start = xfer[d]
				end
				local f = start + run
				if f < bestf or (f == bestf and load[d] < bestq) then
					best, bestf, bestq = d, f, load[d]
				end
			end
		end
		out.device[i] = best
		if best > 0 then
			busy[best] = bestf
			load[best] = load[best] + 1
		end
	end
end

local idx, deadline = {}, {}
local win -- the window of the running call, for the comparisons

local function by_device_turn(a, b)
	local da, db = win.device[a], win.device[b]
	if da ~= db then
		return da < db
	end
	local pa, pb = win.priority[a], win.priority[b]
	if pa ~= pb then
		return pa > pb -- a device runs higher priorities first
	end
	return a < b
end

local function by_deadline(a, b)
	local ta, tb = deadline[a], deadline[b]
	if ta ~= tb then
		return ta < tb
	end
	local pa, pb = win.priority[a], win.priority[b]
	if pa ~= pb then
		return pa > pb
	end
	return a < b
end

function P.prefetch(window, out)
	local n, k = window.n, 0
	for i = 1, n do
		if window.missing[i] > 0 then
			k = k + 1
			idx[k] = i
		end
	end
	for i = #idx, k + 1, -1 do
		idx[i] = nil
	end
	win = window
	table.sort(idx, by_device_turn)
	local cur, ahead = 0, 0
	for j = 1, k do
		local i = idx[j]
		local d = window.device[i]
		if d ~= cur then
			cur, ahead = d, 0
		end
		local per = window.task_us[d]
		if per <= 0 then
			per = 1
		end
		deadline[i] = window.free_at[d] + ahead * per - window.transfer[i]
		ahead = ahead + 1
	end
	table.sort(idx, by_deadline)
	win = nil
	for j = 1, k do
		out.order[j] = idx[j]
	end
	return k
end

return P
