/* An LD_PRELOAD shim for tests/persistence.rs: a power loss, as far as the AOF is concerned.
 * For files opened for writing in the directory ECHOMQ_POWER_LOSS_DIR names (relative to the
 * process's working directory at open, as the server's AOF paths are), write, pwrite, writev,
 * lseek and ftruncate act on a copy kept in this process's memory; only fsync or fdatasync
 * applies them to the real file. So `kill -9` drops every byte not fsynced, as a power cut
 * drops what sat in the page cache; a file closed with bytes not fsynced loses them too (a cut
 * right after the close). Renames and directory entries are left to the kernel, as are files
 * written elsewhere (the server writes a new base file outside that directory and fsyncs it
 * before renaming it in). Build: cc -shared -fPIC -O2 -o shim.so aof-power-loss-shim.c -ldl */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

/* One change not yet fsynced: `len` bytes at `off`, or (data == NULL) a truncation to `off`. */
struct op {
    struct op *next;
    off_t off;
    size_t len;
    char *data;
};

/* A tracked file descriptor: its own position and size, as the process sees them. */
struct file {
    int append;
    off_t pos, size;
    struct op *head, *tail;
};

#define MAX_FD 65536
static struct file *files[MAX_FD];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

/* The next definition of `name` (libc's), looked up once. */
#define REAL(name)                                                                           \
    ({                                                                                       \
        static __typeof__(&name) next_##name;                                                \
        if (!next_##name) next_##name = (__typeof__(&name))dlsym(RTLD_NEXT, #name);          \
        next_##name;                                                                         \
    })

static int tracked_path(const char *path) {
    const char *dir = getenv("ECHOMQ_POWER_LOSS_DIR");
    char want[PATH_MAX], parent[PATH_MAX], got[PATH_MAX];
    if (!dir || !*dir || !path || strlen(path) >= PATH_MAX) return 0;
    if (!realpath(dir, want)) return 0;
    strcpy(parent, path);
    char *slash = strrchr(parent, '/');
    if (!slash) strcpy(parent, ".");
    else if (slash == parent) parent[1] = 0;
    else *slash = 0;
    if (!realpath(parent, got)) return 0;
    return strcmp(want, got) == 0;
}

static int track(int fd, const char *path, int flags, int dirfd) {
    if (fd < 0 || fd >= MAX_FD || !(flags & (O_WRONLY | O_RDWR))) return fd;
    if (dirfd != AT_FDCWD && path[0] != '/') return fd;
    if (!tracked_path(path)) return fd;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return fd;
    struct file *f = calloc(1, sizeof *f);
    if (!f) return fd;
    f->append = (flags & O_APPEND) != 0;
    f->size = st.st_size;
    pthread_mutex_lock(&lock);
    __atomic_store_n(&files[fd], f, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&lock);
    return fd;
}

static void drop_ops(struct file *f) {
    struct op *o = f->head;
    while (o) {
        struct op *next = o->next;
        free(o->data);
        free(o);
        o = next;
    }
    f->head = f->tail = NULL;
}

/* Records a write of `len` bytes at `off` (the lock held). */
static ssize_t record(struct file *f, const void *buf, size_t len, off_t off) {
    struct op *o = malloc(sizeof *o);
    char *data = malloc(len ? len : 1);
    if (!o || !data) {
        free(o);
        free(data);
        errno = ENOSPC;
        return -1;
    }
    memcpy(data, buf, len);
    *o = (struct op){NULL, off, len, data};
    if (f->tail) f->tail->next = o;
    else f->head = o;
    f->tail = o;
    if (off + (off_t)len > f->size) f->size = off + (off_t)len;
    return (ssize_t)len;
}

static struct file *lookup(int fd) {
    return fd >= 0 && fd < MAX_FD ? files[fd] : NULL;
}

/* Whether fd may be tracked, without the lock: an fd is tracked only between its open and its
 * close, so no other thread writes to that number while its entry changes. */
static int maybe_tracked(int fd) {
    return fd >= 0 && fd < MAX_FD && __atomic_load_n(&files[fd], __ATOMIC_ACQUIRE) != NULL;
}

static int open_mode(int flags, va_list ap) {
    return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE ? va_arg(ap, int) : 0;
}

int open(const char *path, int flags, ...) {
    va_list ap;
    va_start(ap, flags);
    int mode = open_mode(flags, ap);
    va_end(ap);
    return track(REAL(open)(path, flags, mode), path, flags, AT_FDCWD);
}

int open64(const char *path, int flags, ...) {
    va_list ap;
    va_start(ap, flags);
    int mode = open_mode(flags, ap);
    va_end(ap);
    return track(REAL(open64)(path, flags, mode), path, flags, AT_FDCWD);
}

int openat(int dirfd, const char *path, int flags, ...) {
    va_list ap;
    va_start(ap, flags);
    int mode = open_mode(flags, ap);
    va_end(ap);
    return track(REAL(openat)(dirfd, path, flags, mode), path, flags, dirfd);
}

int openat64(int dirfd, const char *path, int flags, ...) {
    va_list ap;
    va_start(ap, flags);
    int mode = open_mode(flags, ap);
    va_end(ap);
    return track(REAL(openat64)(dirfd, path, flags, mode), path, flags, dirfd);
}

int creat(const char *path, mode_t mode) {
    return open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);
}

int creat64(const char *path, mode_t mode) {
    return open64(path, O_WRONLY | O_CREAT | O_TRUNC, mode);
}

ssize_t write(int fd, const void *buf, size_t len) {
    if (!maybe_tracked(fd)) return REAL(write)(fd, buf, len);
    pthread_mutex_lock(&lock);
    struct file *f = lookup(fd);
    if (!f) {
        pthread_mutex_unlock(&lock);
        return REAL(write)(fd, buf, len);
    }
    off_t off = f->append ? f->size : f->pos;
    ssize_t n = record(f, buf, len, off);
    if (n >= 0) f->pos = off + n;
    pthread_mutex_unlock(&lock);
    return n;
}

ssize_t pwrite(int fd, const void *buf, size_t len, off_t off) {
    if (!maybe_tracked(fd)) return REAL(pwrite)(fd, buf, len, off);
    pthread_mutex_lock(&lock);
    struct file *f = lookup(fd);
    if (!f) {
        pthread_mutex_unlock(&lock);
        return REAL(pwrite)(fd, buf, len, off);
    }
    ssize_t n = record(f, buf, len, f->append ? f->size : off); /* Linux appends, whatever off */
    pthread_mutex_unlock(&lock);
    return n;
}

ssize_t pwrite64(int fd, const void *buf, size_t len, off_t off) {
    if (!maybe_tracked(fd)) return REAL(pwrite64)(fd, buf, len, off);
    pthread_mutex_lock(&lock);
    struct file *f = lookup(fd);
    if (!f) {
        pthread_mutex_unlock(&lock);
        return REAL(pwrite64)(fd, buf, len, off);
    }
    ssize_t n = record(f, buf, len, f->append ? f->size : off); /* Linux appends, whatever off */
    pthread_mutex_unlock(&lock);
    return n;
}

ssize_t writev(int fd, const struct iovec *iov, int count) {
    if (!maybe_tracked(fd)) return REAL(writev)(fd, iov, count);
    size_t total = 0;
    for (int i = 0; i < count; i++) total += iov[i].iov_len;
    char *buf = malloc(total ? total : 1), *p = buf;
    if (!buf) {
        errno = ENOSPC;
        return -1;
    }
    for (int i = 0; i < count; i++) {
        memcpy(p, iov[i].iov_base, iov[i].iov_len);
        p += iov[i].iov_len;
    }
    ssize_t n = write(fd, buf, total);
    free(buf);
    return n;
}

static off_t seek(int fd, off_t off, int whence, off_t (*real)(int, off_t, int)) {
    if (!maybe_tracked(fd)) return real(fd, off, whence);
    pthread_mutex_lock(&lock);
    struct file *f = lookup(fd);
    if (!f) {
        pthread_mutex_unlock(&lock);
        return real(fd, off, whence);
    }
    off_t base = whence == SEEK_SET ? 0 : whence == SEEK_CUR ? f->pos : f->size;
    off_t r = -1;
    if ((whence == SEEK_SET || whence == SEEK_CUR || whence == SEEK_END) && base + off >= 0)
        r = f->pos = base + off;
    else
        errno = EINVAL;
    pthread_mutex_unlock(&lock);
    return r;
}

off_t lseek(int fd, off_t off, int whence) { return seek(fd, off, whence, REAL(lseek)); }
off_t lseek64(int fd, off_t off, int whence) { return seek(fd, off, whence, REAL(lseek64)); }

static int truncate_to(int fd, off_t len, int (*real)(int, off_t)) {
    if (!maybe_tracked(fd)) return real(fd, len);
    pthread_mutex_lock(&lock);
    struct file *f = lookup(fd);
    if (!f) {
        pthread_mutex_unlock(&lock);
        return real(fd, len);
    }
    struct op *o = malloc(sizeof *o);
    if (!o) {
        pthread_mutex_unlock(&lock);
        errno = ENOSPC;
        return -1;
    }
    *o = (struct op){NULL, len, 0, NULL};
    if (f->tail) f->tail->next = o;
    else f->head = o;
    f->tail = o;
    f->size = len;
    pthread_mutex_unlock(&lock);
    return 0;
}

int ftruncate(int fd, off_t len) { return truncate_to(fd, len, REAL(ftruncate)); }
int ftruncate64(int fd, off_t len) { return truncate_to(fd, len, REAL(ftruncate64)); }

/* Applies the changes not yet fsynced to the real file, in order (the lock held). */
static int apply(int fd, struct file *f) {
    for (struct op *o = f->head; o; o = o->next) {
        if (!o->data) {
            if (REAL(ftruncate)(fd, o->off) != 0) return -1;
            continue;
        }
        size_t done = 0;
        while (done < o->len) {
            ssize_t n = f->append ? REAL(write)(fd, o->data + done, o->len - done)
                                  : REAL(pwrite)(fd, o->data + done, o->len - done,
                                                 o->off + (off_t)done);
            if (n < 0) return -1;
            done += (size_t)n;
        }
    }
    drop_ops(f);
    return 0;
}

static int sync_fd(int fd, int (*real)(int)) {
    int r = 0;
    if (maybe_tracked(fd)) {
        pthread_mutex_lock(&lock);
        struct file *f = lookup(fd);
        if (f) r = apply(fd, f);
        pthread_mutex_unlock(&lock);
    }
    return r == 0 ? real(fd) : r;
}

int fsync(int fd) { return sync_fd(fd, REAL(fsync)); }
int fdatasync(int fd) { return sync_fd(fd, REAL(fdatasync)); }

int close(int fd) {
    if (maybe_tracked(fd)) {
        pthread_mutex_lock(&lock);
        struct file *f = lookup(fd);
        if (f) {
            drop_ops(f);
            free(f);
            __atomic_store_n(&files[fd], NULL, __ATOMIC_RELEASE);
        }
        pthread_mutex_unlock(&lock);
    }
    return REAL(close)(fd);
}
