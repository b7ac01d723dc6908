#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Where a task's time goes, from a perf profile of bench/task_overhead: the CPU time of each
thread (the submitting thread, the workers) per task, by step of the task's life (submit, ready,
take, run, complete), grouped from the symbols perf sampled. docs/performance.md ("Where each
0.1 us goes") was made with it.

    perf record -e cpu-clock -c 20000 -o prof.data build/bench/task_overhead -n 1000000 -v 0buf -r 3
    bench/overhead_steps.py prof.data 3010000 20000

The arguments: the profile, the tasks it ran (n x r plus the 10,000 of the warm-up), and the
sampling period in ns (-c): CPU time = samples x period, which stays right on a loaded machine,
where a thread's wall time counts the time others took its core. Functions perf did not see
inlined into another are counted where they are; kernel samples go together ("kernel").
"""
import re, subprocess, sys, collections
# usage: fine-steps.py PERF.DATA TASKS PERIOD_NS: CPU time per task = samples x period / tasks
data, ntasks, period_ns = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
out = subprocess.run(["perf", "report", "-n", "-i", data, "--no-children", "--sort", "comm,dso,sym",
                      "--stdio", "-g", "none"], capture_output=True, text=True).stdout
steps = [
  ("submit: API checks, copy args", r"^(odx_submit|check_args|check_launch|forced_device|feasible_somewhere|odx__buffer_partitioned|run_tasks|__memcpy.*|memcpy.*)$"),
  ("submit: task from the pool, reset", r"^(odx__task_new|pool_grow)$"),
  ("submit: admit, dependencies", r"^(odx__task_submit|admit|has_room|track_access|add_edge|odx__task_dep_access|readers_make_room|note_after|drop_ref)$"),
  ("ready: placement", r"^(odx__task_ready|odx__sched_push|place_least_loaded|odx__device_can_run|missing_bytes|place_eager|place_round_robin)$"),
  ("ready: queue push, wake decisions", r"^(odx__sched_queue|queue_push|level_for|odx__sched_wake_thief|wake_one_sleeper|inbox_push)$"),
  ("worker: take (queue, poll, steal)", r"^(worker_loop|odx__inbox_drain|odx__inbox_pending|odx__inbox_ring_pending|odx__inbox_take_unlocked|odx__inbox_note_empty|inbox_take|next_task|odx__sched_next|queue_pop|level_taken|queue_peek|odx__sched_steal|queue_take|odx__queue_peek_n|odx__sched_stealable|steal_peer|poll_for_work)$"),
  ("run: stage, launch, kernel", r"^(run|run_kernel|load_module|odx__stage|stages_arg|working_set_get|host_run|host_launch|empty_kernel|finish_trace|odx__task_memnode|odx__now_ns|.*host.*)$"),
  ("complete: unstage, successors, counters", r"^(odx__task_finish|odx__unstage|odx__task_complete|odx__prefetch_pump|wake_for_completion|odx__wake_waiters|odx__mem_done|odx__tier_changed|odx__tier_progress|cancel_from)$"),
  ("complete: task back to the pool", r"^(odx__task_put.*|task_reset|odx__task_return_flush)$"),
  ("locks (user side: lock, unlock, cond signal)", r"^(pthread_mutex_lock.*|__GI___pthread_mutex_unlock_usercnt|pthread_mutex_unlock.*|pthread_cond_signal.*|__GI___lll_lock_wait|__GI___lll_lock_wake|__pthread_mutex_lock.*|lll_.*|pthread_cond_wait.*|__pthread_cond_wait.*|pthread_mutex_trylock.*)$"),
]
tot = collections.Counter(); per = collections.defaultdict(collections.Counter); other = collections.Counter()
for line in out.splitlines():
    m = re.match(r"\s+([\d.]+)%\s+(\d+)\s+(\S+)\s+(\S+)\s+\[(.)\]\s+(.*)$", line)
    if not m: continue
    pct, comm, dso, kind, sym = int(m.group(2)), m.group(3), m.group(4), m.group(5), m.group(6).strip()
    role = "submitter" if comm == "task_overhead" else ("workers" if comm.startswith("odx-dev") else "other")
    tot[role] += pct
    if kind == "k":
        per[role]["kernel (futex, scheduler, page faults)"] += pct; continue
    for name, rx in steps:
        if re.match(rx, sym):
            per[role][name] += pct; break
    else:
        per[role]["other: " + sym] += pct
scale = period_ns / 1e3 / ntasks
print("samples: submitter %d, workers %d, other %d" % (tot["submitter"], tot["workers"], tot["other"]))
for role in ("submitter", "workers"):
    print("\n%s (CPU us per task):" % role)
    items = sorted(per[role].items(), key=lambda kv: -kv[1])
    shown = 0
    for name, pct in items:
        if pct * scale < 0.005: continue
        print("  %-48s %.3f" % (name[:48], pct * scale))
    print("  %-48s %.3f" % ("sum", tot[role] * scale))
