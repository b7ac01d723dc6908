/* SPDX-License-Identifier: Apache-2.0 */
/*
 * lanes.c - a lane's queue and completion thread (see lanes.h). Compiled into each backend
 * module that uses it, so that the backend ABI stays a header.
 */
#include <pthread.h>
#include <stdio.h>

#include "lanes.h"
#include "odx/backend.h"

void odx__lane_init(odx__lane *l)
{
	pthread_mutex_init(&l->lock, NULL);
	pthread_cond_init(&l->cond, NULL);
	l->head = l->tail = NULL;
	l->stop = false;
	l->started = false;
}

int odx__lane_start(odx__lane *l, void *(*main)(void *), void *arg, const char *thread_name,
		    const char *what, char *msg, size_t msg_size)
{
	if (pthread_create(&l->thread, NULL, main, arg) != 0) {
		snprintf(msg, msg_size, "cannot start the %s thread", what);
		return ODX_ENOMEM;
	}
	/* A name shows in debuggers and top; too long a name is refused, and only that. */
	if (thread_name)
		pthread_setname_np(l->thread, thread_name);
	l->started = true;
	return 0;
}

void odx__lane_stop(odx__lane *l)
{
	if (!l->started)
		return;
	pthread_mutex_lock(&l->lock);
	l->stop = true;
	pthread_cond_signal(&l->cond);
	pthread_mutex_unlock(&l->lock);
	pthread_join(l->thread, NULL);
	l->started = false;
}

void odx__lane_fini(odx__lane *l)
{
	pthread_mutex_destroy(&l->lock);
	pthread_cond_destroy(&l->cond);
}

void odx__lane_append(odx__lane *l, odx__lane_link *e)
{
	e->next = NULL;
	if (l->tail)
		l->tail->next = e;
	else
		l->head = e;
	l->tail = e;
}

void odx__lane_push(odx__lane *l, odx__lane_link *e)
{
	odx__lane_append(l, e);
	pthread_cond_signal(&l->cond);
}

void odx__lane_wake(odx__lane *l)
{
	pthread_cond_signal(&l->cond);
}

odx__lane_link *odx__lane_pop(odx__lane *l)
{
	odx__lane_link *e = l->head;

	if (e) {
		l->head = e->next;
		if (!l->head)
			l->tail = NULL;
		e->next = NULL;
	}
	return e;
}

odx__lane_link *odx__lane_wait(odx__lane *l)
{
	while (!l->head && !l->stop)
		pthread_cond_wait(&l->cond, &l->lock);
	return l->head;
}

void odx__lane_deadline(struct timespec *ts, uint64_t ns)
{
	clock_gettime(CLOCK_REALTIME, ts);
	ts->tv_sec += (time_t)(ns / 1000000000u);
	ts->tv_nsec += (long)(ns % 1000000000u);
	if (ts->tv_nsec >= 1000000000L) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000L;
	}
}
