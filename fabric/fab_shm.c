/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fab_shm.c - names for shm endpoints that no other process can hold, and removal of the
 * segments that dead ODX processes left in /dev/shm.
 *
 * libfabric 1.17's shm provider names an endpoint's segment after the process id ("PID:UID:N")
 * and refuses to enable an endpoint whose segment exists and whose recorded pid is a live process
 * (fi_enable: EBUSY). A rank killed with SIGKILL leaves its segment behind; once the pid is reused
 * (pid_max is 32768 on many machines, and a job of 130 ranks on a test machine reuses pids
 * quickly), the new process with that pid finds "its" name taken by a live process: itself. So
 * ODX names its shm endpoints itself, with the pid and the process's start time (unique for the
 * life of the boot), and removes at open the ODX segments whose process is gone.
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fab_internal.h"

#define SHM_DIR "/dev/shm"
#define SHM_PREFIX "odx-"

/* Start time of process `pid` in clock ticks since boot (field 22 of /proc/PID/stat), 0 if there
 * is no such process. The command name (field 2) may hold spaces and parentheses: fields are
 * counted from its closing parenthesis, the last one in the line. */
static unsigned long long start_time(long pid)
{
	char path[64], line[1024];
	unsigned long long t = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
	f = fopen(path, "re");
	if (!f)
		return 0;
	if (fgets(line, sizeof(line), f)) {
		char *p = strrchr(line, ')');
		int field = 2;

		/* after ")": " S ppid pgrp ..." with field 3 first */
		while (p && *p && field < 22) {
			p = strchr(p + 1, ' ');
			field++;
		}
		if (p)
			t = strtoull(p + 1, NULL, 10);
	}
	fclose(f);
	return t;
}

void fab_shm_name(char *buf, size_t n)
{
	static _Atomic unsigned seq;
	static unsigned long long mine;

	if (!mine)
		mine = start_time((long)getpid());
	snprintf(buf, n, SHM_PREFIX "%ld-%llu-%u", (long)getpid(), mine, atomic_fetch_add(&seq, 1));
}

int fab_shm_sweep(void)
{
	struct dirent *e;
	DIR *d = opendir(SHM_DIR);
	int removed = 0;

	if (!d)
		return 0;
	while ((e = readdir(d)) != NULL) {
		unsigned long long t;
		char *end;
		long pid;

		if (strncmp(e->d_name, SHM_PREFIX, strlen(SHM_PREFIX)) != 0)
			continue;
		pid = strtol(e->d_name + strlen(SHM_PREFIX), &end, 10);
		if (pid <= 0 || *end != '-')
			continue;
		t = strtoull(end + 1, &end, 10);
		if (*end != '-')
			continue;
		/* Alive and the same process: keep. A pid now held by another process (start
		 * time differs) or by none: the owner is dead. Another user's segments cannot be
		 * removed (sticky /dev/shm): shm_unlink fails and they stay. */
		if (start_time(pid) == t)
			continue;
		if (shm_unlink(e->d_name) == 0)
			removed++;
	}
	closedir(d);
	return removed;
}
