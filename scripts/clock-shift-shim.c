/* An LD_PRELOAD shim that moves a process's wall clock, for the clock faults of
 * tests/clock_jump.rs and `make chaos`: clock_gettime (CLOCK_REALTIME and its coarse and
 * alarm kinds), gettimeofday and time answer the real time plus an offset in milliseconds,
 * read from the file ECHOMQ_CLOCK_FILE names (a signed integer; missing or empty: 0) and read
 * again at most every 20 ms of real time. The monotonic clocks are left alone, as a stepped
 * wall clock leaves them. The real time is read with the raw system call and the file with raw
 * calls too: no dlsym and no allocation, so the shim can run while the allocator starts (where
 * a shim that looks its symbols up with dlsym deadlocks a jemalloc-linked server).
 * Build: cc -shared -fPIC -O2 -o clock-shift-shim.so clock-shift-shim.c */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define REREAD_NS 20000000LL

static _Atomic long long offset_ms;
static _Atomic long long read_at_ns = -1;

static long long ns_of(const struct timespec *ts) {
    return (long long)ts->tv_sec * 1000000000LL + ts->tv_nsec;
}

/* The offset the file says now: a signed decimal, anything after it ignored. */
static long long read_offset(void) {
    const char *path = getenv("ECHOMQ_CLOCK_FILE");
    if (path == NULL) return 0;
    int fd = (int)syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    char buf[32];
    long n = syscall(SYS_read, fd, buf, sizeof buf - 1);
    syscall(SYS_close, fd);
    if (n <= 0) return 0;
    buf[n] = 0;
    long long value = 0;
    int i = 0, negative = 0;
    if (buf[0] == '-' || buf[0] == '+') {
        negative = buf[0] == '-';
        i = 1;
    }
    for (; i < n && buf[i] >= '0' && buf[i] <= '9'; i++) value = value * 10 + (buf[i] - '0');
    return negative ? -value : value;
}

/* The offset, read again once REREAD_NS of monotonic time has passed since the last read. */
static long long current_offset_ms(void) {
    struct timespec now;
    if (syscall(SYS_clock_gettime, CLOCK_MONOTONIC, &now) != 0) return atomic_load(&offset_ms);
    long long at = ns_of(&now), last = atomic_load(&read_at_ns);
    if (last < 0 || at - last >= REREAD_NS) {
        atomic_store(&offset_ms, read_offset());
        atomic_store(&read_at_ns, at);
    }
    return atomic_load(&offset_ms);
}

static void shift(struct timespec *ts, long long ms) {
    long long ns = ns_of(ts) + ms * 1000000LL;
    ts->tv_sec = (time_t)(ns / 1000000000LL);
    ts->tv_nsec = (long)(ns % 1000000000LL);
    if (ts->tv_nsec < 0) {
        ts->tv_nsec += 1000000000L;
        ts->tv_sec -= 1;
    }
}

static int wall(clockid_t id) {
    return id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE || id == CLOCK_REALTIME_ALARM;
}

int clock_gettime(clockid_t id, struct timespec *ts) {
    int rc = (int)syscall(SYS_clock_gettime, id, ts);
    if (rc == 0 && wall(id)) shift(ts, current_offset_ms());
    return rc;
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
    (void)tz;
    struct timespec ts;
    int rc = clock_gettime(CLOCK_REALTIME, &ts);
    if (rc == 0) {
        tv->tv_sec = ts.tv_sec;
        tv->tv_usec = ts.tv_nsec / 1000;
    }
    return rc;
}

time_t time(time_t *out) {
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0) return (time_t)-1;
    if (out != NULL) *out = ts.tv_sec;
    return ts.tv_sec;
}
