// clockshim: an LD_PRELOAD library that steps a process's wall clock, for
// the tests that step redis-server's clock (clock_test.go). The offset, in
// nanoseconds, is the first 8 bytes (a little-endian int64) of the file named
// by FENCEPROXY_CLOCK_OFFSET_FILE, mapped shared so that the test moves the
// clock of the running process by rewriting them. Only the wall clock moves
// (CLOCK_REALTIME and its variants, gettimeofday, time); CLOCK_MONOTONIC is
// left alone, as an NTP step leaves it. The real clocks are read by system
// call, never through the functions wrapped here.
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static volatile int64_t *offset;

static int64_t now_offset(void) {
	if (offset == NULL) {
		const char *path = getenv("FENCEPROXY_CLOCK_OFFSET_FILE");
		if (path == NULL) return 0;
		int fd = open(path, O_RDONLY);
		if (fd < 0) return 0;
		void *p = mmap(NULL, 8, PROT_READ, MAP_SHARED, fd, 0);
		close(fd);
		if (p == MAP_FAILED) return 0;
		offset = (volatile int64_t *)p;
	}
	return *offset;
}

static int realtime(clockid_t id) {
	return id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE;
}

int clock_gettime(clockid_t id, struct timespec *ts) {
	int r = syscall(SYS_clock_gettime, id, ts);
	if (r == 0 && realtime(id)) {
		int64_t ns = (int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec + now_offset();
		ts->tv_sec = ns / 1000000000;
		ts->tv_nsec = ns % 1000000000;
	}
	return r;
}

int gettimeofday(struct timeval *tv, void *tz) {
	struct timespec ts;
	int r = clock_gettime(CLOCK_REALTIME, &ts);
	if (r == 0 && tv != NULL) {
		tv->tv_sec = ts.tv_sec;
		tv->tv_usec = ts.tv_nsec / 1000;
	}
	(void)tz;
	return r;
}

time_t time(time_t *t) {
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	if (t != NULL) *t = ts.tv_sec;
	return ts.tv_sec;
}
