/* faultshim: an LD_PRELOAD library that counts, fails or kills at the write-side system calls of
 * one process (tests/pipeline/test_faults.py builds it with gcc and drives it).
 *
 * It interposes the libc entry points that Python file objects, libhdf5 and liblmdb write
 * through: write, pwrite, pwrite64, writev, pwritev, fsync, fdatasync, msync, ftruncate,
 * rename, renameat, renameat2. A call "counts" when its file descriptor (resolved through
 * /proc/self/fd/N) or its path lies under $FAULTSHIM_PREFIX (the folder holding DST). Calls on
 * other files (stdout, the source, /tmp of a library) pass untouched and are not counted.
 *
 * Environment:
 *   FAULTSHIM_PREFIX  absolute folder; only calls on it or under it count (unset: shim off)
 *   FAULTSHIM_MODE    count (default) | fail | kill
 *   FAULTSHIM_N       fail / kill: the 1-based number of the counted call to act on
 *   FAULTSHIM_ERRNO   fail: the errno to fail with (default EIO); the call fails once
 *   FAULTSHIM_LOG     a file that gets one line per counted call: "<n> <call> <path>"
 *                     (appended as it happens, so a killed process leaves its log too)
 * In fail mode the N-th counted call does nothing and returns -1 with errno set; in kill mode
 * the process sends itself SIGKILL before the N-th counted call runs.
 *
 * sync() and syncfs() (which flush every file, and cannot report a failure) are logged while the
 * shim is on, as "0 sync <prefix>" lines: never counted, failed or killed, so the injection points
 * stay those above; the log then shows when the whole file system was flushed.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

enum { MODE_COUNT, MODE_FAIL, MODE_KILL };

static int configured;
static const char *prefix;
static size_t prefix_len;
static int mode = MODE_COUNT;
static long target = -1;
static int fail_errno = EIO;
static int log_fd = -1;
static long counter;
static __thread int busy; /* the shim's own calls (readlink, the log) are not counted */

static void configure(void) {
    if (__atomic_load_n(&configured, __ATOMIC_ACQUIRE))
        return;
    const char *p = getenv("FAULTSHIM_PREFIX");
    if (p && *p) {
        prefix = p;
        prefix_len = strlen(p);
        while (prefix_len > 1 && prefix[prefix_len - 1] == '/')
            prefix_len--;
    }
    const char *m = getenv("FAULTSHIM_MODE");
    if (m && strcmp(m, "fail") == 0)
        mode = MODE_FAIL;
    else if (m && strcmp(m, "kill") == 0)
        mode = MODE_KILL;
    const char *n = getenv("FAULTSHIM_N");
    if (n)
        target = atol(n);
    const char *e = getenv("FAULTSHIM_ERRNO");
    if (e)
        fail_errno = atoi(e);
    const char *l = getenv("FAULTSHIM_LOG");
    if (l && *l)
        log_fd = (int)syscall(SYS_openat, AT_FDCWD, l, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    __atomic_store_n(&configured, 1, __ATOMIC_RELEASE);
}

static int under_prefix(const char *path) {
    if (!prefix || !path || strncmp(path, prefix, prefix_len) != 0)
        return 0;
    return path[prefix_len] == '\0' || path[prefix_len] == '/';
}

/* The absolute path of a path argument relative to dirfd (AT_FDCWD: the working folder). */
static void absolute(int dirfd, const char *path, char *out, size_t size) {
    /* base and path each fit in half of out: longer paths are cut (and do not count) */
    out[0] = '\0';
    if (!path)
        return;
    if (path[0] == '/') {
        snprintf(out, size, "%s", path);
        return;
    }
    char base[PATH_MAX / 2];
    if (dirfd == AT_FDCWD) {
        if (!getcwd(base, sizeof base))
            return;
    } else {
        char link[64];
        snprintf(link, sizeof link, "/proc/self/fd/%d", dirfd);
        ssize_t k = readlink(link, base, sizeof base - 1);
        if (k < 0)
            return;
        base[k] = '\0';
    }
    snprintf(out, size, "%s/%s", base, path);
}

static void fd_path(int fd, char *out, size_t size) {
    char link[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t k = readlink(link, out, size - 1);
    out[k < 0 ? 0 : k] = '\0';
}

/* Decide for one call: 0 = run it, -1 = fail it (errno set). Kills the process in kill mode. */
static int decide(const char *call, const char *path) {
    configure();
    if (!under_prefix(path))
        return 0;
    long n = __atomic_add_fetch(&counter, 1, __ATOMIC_SEQ_CST);
    if (log_fd >= 0) {
        char line[PATH_MAX + 64];
        int len = snprintf(line, sizeof line, "%ld %s %s\n", n, call, path);
        if (len > 0)
            syscall(SYS_write, log_fd, line, (size_t)(len < (int)sizeof line ? len : (int)sizeof line - 1));
    }
    if (n != target)
        return 0;
    if (mode == MODE_KILL) {
        syscall(SYS_kill, getpid(), SIGKILL);
        for (;;)
            pause();
    }
    if (mode == MODE_FAIL) {
        errno = fail_errno;
        return -1;
    }
    return 0;
}

static int decide_fd(const char *call, int fd) {
    if (busy)
        return 0;
    configure();
    if (!prefix)
        return 0;
    busy = 1;
    char path[PATH_MAX];
    fd_path(fd, path, sizeof path);
    int r = decide(call, path);
    busy = 0;
    return r;
}

static int decide_path(const char *call, int dirfd, const char *p) {
    if (busy)
        return 0;
    configure();
    if (!prefix)
        return 0;
    busy = 1;
    char path[PATH_MAX];
    absolute(dirfd, p, path, sizeof path);
    int r = decide(call, path);
    busy = 0;
    return r;
}

#define REAL(name) static __typeof__(name) *real_##name; \
    if (!real_##name) real_##name = (__typeof__(name) *)dlsym(RTLD_NEXT, #name)

ssize_t write(int fd, const void *buf, size_t count) {
    REAL(write);
    if (decide_fd("write", fd))
        return -1;
    return real_write(fd, buf, count);
}

ssize_t pwrite(int fd, const void *buf, size_t count, off_t offset) {
    REAL(pwrite);
    if (decide_fd("pwrite", fd))
        return -1;
    return real_pwrite(fd, buf, count, offset);
}

ssize_t pwrite64(int fd, const void *buf, size_t count, off64_t offset) {
    REAL(pwrite64);
    if (decide_fd("pwrite64", fd))
        return -1;
    return real_pwrite64(fd, buf, count, offset);
}

ssize_t writev(int fd, const struct iovec *iov, int iovcnt) {
    REAL(writev);
    if (decide_fd("writev", fd))
        return -1;
    return real_writev(fd, iov, iovcnt);
}

ssize_t pwritev(int fd, const struct iovec *iov, int iovcnt, off_t offset) {
    REAL(pwritev);
    if (decide_fd("pwritev", fd))
        return -1;
    return real_pwritev(fd, iov, iovcnt, offset);
}

int fsync(int fd) {
    REAL(fsync);
    if (decide_fd("fsync", fd))
        return -1;
    return real_fsync(fd);
}

int fdatasync(int fd) {
    REAL(fdatasync);
    if (decide_fd("fdatasync", fd))
        return -1;
    return real_fdatasync(fd);
}

int ftruncate(int fd, off_t length) {
    REAL(ftruncate);
    if (decide_fd("ftruncate", fd))
        return -1;
    return real_ftruncate(fd, length);
}

int msync(void *addr, size_t length, int flags) {
    REAL(msync);
    configure();
    if (!busy && prefix) {
        /* the mapping's file: /proc/self/map_files would need privileges; count it under the prefix
         * only when the shim is on (lmdb with writemap is the one user, and maps only DST files) */
        if (decide("msync", prefix))
            return -1;
    }
    return real_msync(addr, length, flags);
}

int rename(const char *oldpath, const char *newpath) {
    REAL(rename);
    if (decide_path("rename", AT_FDCWD, newpath))
        return -1;
    return real_rename(oldpath, newpath);
}

int renameat(int olddirfd, const char *oldpath, int newdirfd, const char *newpath) {
    REAL(renameat);
    if (decide_path("renameat", newdirfd, newpath))
        return -1;
    return real_renameat(olddirfd, oldpath, newdirfd, newpath);
}

int renameat2(int olddirfd, const char *oldpath, int newdirfd, const char *newpath, unsigned int flags) {
    REAL(renameat2);
    if (decide_path("renameat2", newdirfd, newpath))
        return -1;
    return real_renameat2(olddirfd, oldpath, newdirfd, newpath, flags);
}

/* Log a whole-file-system flush (not an injection point: the line's number is 0). */
static void log_flush(const char *call) {
    configure();
    if (busy || !prefix || log_fd < 0)
        return;
    char line[PATH_MAX + 64];
    int len = snprintf(line, sizeof line, "0 %s %s\n", call, prefix);
    if (len > 0)
        syscall(SYS_write, log_fd, line, (size_t)(len < (int)sizeof line ? len : (int)sizeof line - 1));
}

void sync(void) {
    REAL(sync);
    log_flush("sync");
    real_sync();
}

int syncfs(int fd) {
    REAL(syncfs);
    log_flush("syncfs");
    return real_syncfs(fd);
}

/* Reconfigure in a process that is already running (a forked child of a fork server): the same
 * settings as the environment variables, and the call counter back to zero. */
void faultshim_setup(const char *new_prefix, const char *new_mode, long n, int err, const char *log) {
    configure();
    static char prefix_buf[PATH_MAX];
    snprintf(prefix_buf, sizeof prefix_buf, "%s", new_prefix ? new_prefix : "");
    prefix = prefix_buf[0] ? prefix_buf : NULL;
    prefix_len = strlen(prefix_buf);
    while (prefix_len > 1 && prefix_buf[prefix_len - 1] == '/')
        prefix_len--;
    mode = strcmp(new_mode, "fail") == 0 ? MODE_FAIL : strcmp(new_mode, "kill") == 0 ? MODE_KILL : MODE_COUNT;
    target = n;
    fail_errno = err;
    if (log_fd >= 0)
        syscall(SYS_close, log_fd);
    log_fd = log && *log ? (int)syscall(SYS_openat, AT_FDCWD, log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644) : -1;
    __atomic_store_n(&counter, 0, __ATOMIC_SEQ_CST);
}
