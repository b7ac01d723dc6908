-- Test of heft.lua, run by tests/policy/test_policy_harness (docs/policies.md).
local t = ...

assert(t.open{ devices = { "host", { kind = "cuda", name = "fast" } } })
-- Uncalibrated: both look free, the first wins; calibration then learns the real costs.
assert(t.place({ { kernel = "gemm", bytes = 4096 } })[1] == 1, "uncalibrated: first device")
for _ = 1, 20 do
	t.complete("gemm", 1, 4096, 100.0)
	t.complete("gemm", 2, 4096, 10.0)
end
-- A late outlier is rejected by the model (5 sigma).
t.complete("gemm", 2, 4096, 100000.0)
local out = t.place({ { kernel = "gemm", bytes = 4096 } })
assert(out[1] == 2, "calibrated: the faster device, got " .. out[1])
-- Ten at once: the fast device takes most, but not all once its queue is long enough.
local batch = {}
for i = 1, 30 do
	batch[i] = { kernel = "gemm", bytes = 4096 }
end
out = t.place(batch)
local on = { 0, 0 }
for i = 1, 30 do
	on[out[i]] = on[out[i]] + 1
end
assert(on[2] > on[1] and on[1] > 0, string.format("split %d/%d", on[1], on[2]))
-- Missing inputs on the fast device cost a transfer (1 GB at 10 GB/s = 100 ms).
out = t.place({ { kernel = "gemm", bytes = 4096, missing = { 0, 1000000000 } } })
assert(out[1] == 1, "the transfer outweighs the speed-up")
assert(t.failures() == 0, "no call failed")

-- Nothing measured for a new kernel and equal queues: ties go to the shorter queue, so a batch
-- of equal tasks spreads instead of piling onto device 1.
out = t.place({ { kernel = "fresh" }, { kernel = "fresh" }, { kernel = "fresh" } }, { 0, 0 })
assert(out[1] == 1 and out[2] == 2 and out[3] == 1, "ties spread: " .. table.concat(out, ","))
assert(t.failures() == 0, "no call failed")
