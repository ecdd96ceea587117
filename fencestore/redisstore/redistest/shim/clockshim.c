// clockshim: an LD_PRELOAD library that adds an offset to the wall clock
// (CLOCK_REALTIME and its coarse variant, gettimeofday, time) of the process
// it is loaded into, read on every call from the first 8 bytes of the file
// named by CLOCKSHIM_OFFSET_FILE: a signed offset in nanoseconds,
// little-endian, mapped shared so that a write to the file steps the running
// process's clock. The monotonic clocks are left alone (an NTP step leaves
// them too). It calls the kernel directly (no dlsym, no allocation), so that
// it cannot recurse through an allocator that reads the clock (libfaketime's
// own library does not survive redis-server's jemalloc). Built and driven by
// ../clockshim.go.
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static volatile int64_t *offset_ns;
static int state; /* 0 not tried, 1 mapped, 2 failed */

static int64_t offset(void) {
	if (__atomic_load_n(&state, __ATOMIC_ACQUIRE) == 0) {
		const char *path = getenv("CLOCKSHIM_OFFSET_FILE");
		if (path == NULL) {
			/* Called before the environment is set up (an allocator's
			 * constructor): try again on the next call. */
			return 0;
		}
		int fd = (int)syscall(SYS_openat, AT_FDCWD, path, O_RDONLY);
		void *p = (void *)-1L;
		if (fd >= 0) {
			p = (void *)syscall(SYS_mmap, NULL, 8, PROT_READ, MAP_SHARED, fd, 0);
			syscall(SYS_close, fd);
		}
		if ((unsigned long)p < (unsigned long)-4096L) { /* a raw mmap returns -errno on failure */
			offset_ns = p;
		}
		__atomic_store_n(&state, offset_ns ? 1 : 2, __ATOMIC_RELEASE);
	}
	return offset_ns ? *offset_ns : 0;
}

static int raw(clockid_t clk, struct timespec *ts) {
	return (int)syscall(SYS_clock_gettime, clk, ts);
}

int clock_gettime(clockid_t clk, struct timespec *ts) {
	int r = raw(clk, ts);
	if (r == 0 && (clk == CLOCK_REALTIME || clk == CLOCK_REALTIME_COARSE)) {
		int64_t ns = (int64_t)ts->tv_sec * 1000000000LL + ts->tv_nsec + offset();
		ts->tv_sec = ns / 1000000000LL;
		ts->tv_nsec = ns % 1000000000LL;
		if (ts->tv_nsec < 0) {
			ts->tv_nsec += 1000000000LL;
			ts->tv_sec--;
		}
	}
	return r;
}

int gettimeofday(struct timeval *tv, void *tz) {
	struct timespec ts;
	(void)tz;
	if (clock_gettime(CLOCK_REALTIME, &ts) != 0) {
		return -1;
	}
	tv->tv_sec = ts.tv_sec;
	tv->tv_usec = ts.tv_nsec / 1000;
	return 0;
}

time_t time(time_t *t) {
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	if (t) {
		*t = ts.tv_sec;
	}
	return ts.tv_sec;
}
