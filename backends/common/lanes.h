/* SPDX-License-Identifier: Apache-2.0 */
/*
 * lanes.h - the completion-thread machinery every vendor backend needs, written once.
 *
 * A lane is a FIFO of queued work, a lock, a condition variable and one thread that takes the
 * work in order and reports it (done callbacks run on that thread, never inside the call that
 * queued the work). What the thread does with an entry is the backend's; starting it, waking it,
 * stopping it once the queue is drained and joining it are here. Entries embed an odx__lane_link
 * and are found back with ODX__LANE_ENTRY.
 *
 * Not part of the backend ABI: lanes.c is compiled into each module that uses it (hidden symbols,
 * one copy per module), so include/odx/backend.h stays headers-only.
 */
#ifndef ODX_BACKENDS_COMMON_LANES_H
#define ODX_BACKENDS_COMMON_LANES_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

/* The link an entry embeds to sit in a lane's queue. */
typedef struct odx__lane_link {
	struct odx__lane_link *next;
} odx__lane_link;

/* The entry of type `type` whose member `member` is the link `link` (NULL stays NULL). `link` is
 * evaluated twice: pass a variable, never a call. */
#define ODX__LANE_ENTRY(link, type, member)                                                         \
	((link) ? (type *)(void *)((char *)(link) - offsetof(type, member)) : (type *)NULL)

typedef struct odx__lane {
	pthread_mutex_t lock;        /* the queue and `stop`; backends guard their lane state too */
	pthread_cond_t cond;         /* the thread waits here: work queued, or stop */
	odx__lane_link *head, *tail; /* queued, oldest first */
	bool stop;                   /* the thread exits once the queue is drained */
	bool started;                /* the thread runs (odx__lane_stop joins it) */
	pthread_t thread;
} odx__lane;

/* Initialises the lock and the condition variable; the queue is empty, no thread runs. */
void odx__lane_init(odx__lane *l);
/*
 * Starts the lane's thread running main(arg), named `thread_name` when not NULL (at most 15
 * characters show). On failure writes "cannot start the <what> thread" into msg and returns
 * ODX_ENOMEM; odx__lane_stop and odx__lane_fini are still to be called.
 */
int odx__lane_start(odx__lane *l, void *(*main)(void *), void *arg, const char *thread_name,
		    const char *what, char *msg, size_t msg_size);
/* Asks the thread to exit once its queue is drained and joins it. No lock held. */
void odx__lane_stop(odx__lane *l);
/* Destroys the lock and the condition variable (after odx__lane_stop). */
void odx__lane_fini(odx__lane *l);

/* Lock held: appends `e` to the queue, without waking the thread (odx__lane_wake does). */
void odx__lane_append(odx__lane *l, odx__lane_link *e);
/* Lock held: appends `e` and wakes the thread. */
void odx__lane_push(odx__lane *l, odx__lane_link *e);
/* Lock held: wakes the lane's thread. */
void odx__lane_wake(odx__lane *l);
/* Lock held: unlinks and returns the oldest entry, NULL if none. */
odx__lane_link *odx__lane_pop(odx__lane *l);
/* Lock held: waits until an entry is queued or the lane stops; returns the oldest entry (still
 * queued), or NULL once the lane stops with nothing queued. */
odx__lane_link *odx__lane_wait(odx__lane *l);

/* `ts` = now + ns on the clock of the lanes' condition variables (CLOCK_REALTIME). */
void odx__lane_deadline(struct timespec *ts, uint64_t ns);

#endif /* ODX_BACKENDS_COMMON_LANES_H */
