#include "autoconf.h"

#include "kernel-host/confine.h"
#include "kernel-host/rootfs.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <limits.h>
#include <linux/magic.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef SECBIT_NOROOT
#define SECBIT_NOROOT                      (1 << 0)
#define SECBIT_NOROOT_LOCKED               (1 << 1)
#define SECBIT_NO_SETUID_FIXUP             (1 << 2)
#define SECBIT_NO_SETUID_FIXUP_LOCKED      (1 << 3)
#define SECBIT_KEEP_CAPS_LOCKED            (1 << 5)
#define SECBIT_NO_CAP_AMBIENT_RAISE        (1 << 6)
#define SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED (1 << 7)
#endif

void confine_report_send(int fd, const struct confine_report *r)
{
        ssize_t n;

        /* write(), not send(): fd is a socket or a pipe. */
        do {
                n = write(fd, r, sizeof(*r));
        } while (n < 0 && errno == EINTR);
}

int confine_report_wait(int fd, struct confine_report *r, int timeout_ms)
{
        struct pollfd pfd = {fd, POLLIN, 0};
        ssize_t n;
        int rc;

        do {
                rc = poll(&pfd, 1, timeout_ms);
        } while (rc < 0 && errno == EINTR);
        if (rc == 0)
                return -ETIMEDOUT;
        if (rc < 0)
                return -errno;
        do {
                n = read(fd, r, sizeof(*r));
        } while (n < 0 && errno == EINTR);
        if (n != (ssize_t)sizeof(*r))
                return -EPIPE;
        r->step[sizeof(r->step) - 1] = '\0';
        return 0;
}

int confine_exec_socket(int sv[2])
{
        const int one = 1;

        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
                return -errno;
        if (setsockopt(sv[0], SOL_SOCKET, SO_PASSCRED, &one, sizeof(one)) < 0) {
                int rc = -errno;

                close(sv[0]);
                close(sv[1]);
                return rc;
        }
        return 0;
}

void confine_hello(int fd)
{
        struct confine_report r;

        confine_report_init(&r, CONFINE_STARTED);
        r.nspid = (int)getpid();
        confine_report_send(fd, &r);
}

int confine_wait_read(struct confine_wait *w, struct confine_report *r)
{
        char space[CMSG_SPACE(sizeof(struct ucred))];
        struct iovec iov = {r, sizeof(*r)};
        struct msghdr msg = {.msg_iov = &iov,
                             .msg_iovlen = 1,
                             .msg_control = space,
                             .msg_controllen = sizeof(space)};
        struct ucred cred;
        struct cmsghdr *c;
        ssize_t n;

        for (;;) {
                do {
                        n = recvmsg(w->fd, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
                } while (n < 0 && errno == EINTR);
                if (n < 0)
                        return -errno; /* -EAGAIN: nothing yet */
                /* Its execve closed the socket after its hello. */
                if (n == 0 && w->hello) {
                        *r = w->said;
                        return 0;
                }
                if (n != (ssize_t)sizeof(*r))
                        return -EPIPE;
                r->step[sizeof(r->step) - 1] = '\0';
                if (r->kind != CONFINE_STARTED)
                        return 0;
                c = CMSG_FIRSTHDR(&msg);
                if (w->hello || !c || c->cmsg_type != SCM_CREDENTIALS ||
                    c->cmsg_len != CMSG_LEN(sizeof(cred)))
                        return -EPROTO;
                memcpy(&cred, CMSG_DATA(c), sizeof(cred));
                w->said = *r;
                w->said.pid = (int)cred.pid;
                w->hello = true;
                msg.msg_controllen = sizeof(space);
        }
}

int confine_wait_outcome(int rc, const struct confine_report *r, const char **step)
{
        *step = "start process";
        if (rc == 0 && r->kind != CONFINE_STARTED) {
                *step = r->step;
                rc = -(r->error ? r->error : EIO);
        }
        return rc;
}

void confine_report_init(struct confine_report *r, int kind)
{
        memset(r, 0, sizeof(*r));
        r->kind = kind;
}

void confine_fail(int fd, const char *step, int error)
{
        struct confine_report r;
        size_t len = 0;

        confine_report_init(&r, CONFINE_FAILED);
        r.error = error;
        while (step[len] && len < sizeof(r.step) - 1) {
                r.step[len] = step[len];
                len++;
        }
        confine_report_send(fd, &r);
        _exit(127);
}

/* close_range() closes every descriptor, however high, in one call
 * (Linux 5.9); the loop is for older kernels, where a forked kernel paid
 * 4,000 system calls for it. keep is in ascending order. */
static void close_fds_except(const int *keep, size_t nkeep)
{
        unsigned int first = 3;

        for (size_t i = 0; i < nkeep; i++) {
                if (keep[i] < (int)first)
                        continue;
                if (keep[i] > (int)first &&
                    syscall(SYS_close_range, first, (unsigned int)keep[i] - 1, 0u) < 0)
                        goto loop;
                first = (unsigned int)keep[i] + 1;
        }
        if (syscall(SYS_close_range, first, ~0u, 0u) == 0)
                return;
loop:
        for (int fd = 3; fd < 4096; fd++) {
                bool kept = false;

                for (size_t i = 0; i < nkeep; i++)
                        kept = kept || fd == keep[i];
                if (!kept)
                        close(fd);
        }
}

void confine_close_fds_except(int keep)
{
        close_fds_except(&keep, 1);
}

/* What the sandbox's root may do beyond "user": own, read and write every
 * file of the sandbox whatever its owner and mode. Nothing else: with
 * CAP_SYS_ADMIN it could remount the read-only binds of host directories
 * writable (mounts made in the sandbox's own mount namespace are not
 * locked); with CAP_SETUID/CAP_SETGID it could take ids its namespace maps
 * only for setup; with CAP_SYS_PTRACE reach init; CAP_NET_* would matter
 * for a sandbox with egress. CAP_FSETID and CAP_MKNOD stay out too. */
#define ROOT_CAPS                                                                                  \
        ((1ull << CAP_CHOWN) | (1ull << CAP_DAC_OVERRIDE) | (1ull << CAP_DAC_READ_SEARCH) |        \
         (1ull << CAP_FOWNER))

/* Sets the permitted and effective sets to caps (inheritable empty). */
static int keep_capabilities(unsigned long long caps)
{
        struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
        struct __user_cap_data_struct data[2];

        memset(data, 0, sizeof(data));
        for (int i = 0; i < 2; i++) {
                data[i].permitted = (uint32_t)(caps >> (32 * i));
                data[i].effective = data[i].permitted;
        }
        return (int)syscall(SYS_capset, &hdr, data);
}

int confine_drop_capabilities(void)
{
        return keep_capabilities(0);
}

/* As the sandbox's root: writes a kernel's connection file into the
 * sandbox's /run/kernel, owned by its user, readable by nobody else. The
 * host's root writes nothing there: the directory is the sandbox user's,
 * so a name in it may have been made to point anywhere, and even a
 * sandbox's root only ever reaches the sandbox's own files. By descriptor,
 * never following a name: what was at the name (a stale file, a planted
 * symlink) is removed first, the file is created exclusively and given
 * away through its own descriptor. -1 with errno on failure. */
static int write_connection_file(int dir_fd, const char *name, const char *text)
{
        size_t len = strlen(text), done = 0;
        int fd, saved;

        if (unlinkat(dir_fd, name, 0) < 0 && errno != ENOENT)
                return -1;
        fd = openat(dir_fd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0)
                return -1;
        if (fchown(fd, ROOTFS_USER_UID, ROOTFS_USER_UID) < 0)
                goto fail;
        while (done < len) {
                ssize_t n = write(fd, text + done, len - done);

                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        goto fail;
                done += (size_t)n;
        }
        if (close(fd) < 0) {
                fd = -1;
                goto fail;
        }
        return 0;
fail:
        saved = errno ? errno : EIO;
        if (fd >= 0)
                close(fd);
        unlinkat(dir_fd, name, 0); /* nothing half-written */
        errno = saved;
        return -1;
}

void confine_connection_file(const struct confine_sandbox *sb, const char *name, const char *text,
                             int report_fd)
{
        if (write_connection_file(sb->run_fd, name, text) < 0)
                confine_fail(report_fd, "connection-file", errno);
}

/* In the order of confine_sandbox.ns_fds. */
static const int ns_types[CONFINE_NAMESPACES] = {CLONE_NEWUSER,  CLONE_NEWNS,  CLONE_NEWPID,
                                                 CLONE_NEWNET,   CLONE_NEWIPC, CLONE_NEWUTS,
                                                 CLONE_NEWCGROUP};
#define CGROUP_NS (CONFINE_NAMESPACES - 1)

/* The user namespace first: joining it gives the capabilities that
 * joining the others needs. */
static void join_namespaces(const struct confine_sandbox *sb, bool cgroup_ns, int report_fd)
{
        for (int i = 0; i < CONFINE_NAMESPACES; i++) {
                if (i == CGROUP_NS && !cgroup_ns)
                        continue;
                if (setns(sb->ns_fds[i], ns_types[i]) < 0)
                        confine_fail(report_fd, "setns", errno);
        }
}

static void become_root(const struct confine_sandbox *sb, int report_fd)
{
        if (sb->privileged && (setresgid(0, 0, 0) < 0 || setresuid(0, 0, 0) < 0))
                confine_fail(report_fd, "become sandbox root", errno);
}

void confine_join(const struct confine_sandbox *sb, const char *const *dirs, size_t ndirs,
                  const char *conn_name, const char *conn_text, int report_fd)
{
        /* The process's own group first, while we still are root on the
         * host; the process inherits it, and so does all it starts. */
        for (size_t i = 0; i < ndirs; i++) {
                char path[PATH_MAX + 16];
                size_t len = strlen(dirs[i]);
                int fd;

                if (!len)
                        continue;
                if (len >= PATH_MAX)
                        confine_fail(report_fd, "join cgroup", ENAMETOOLONG);
                memcpy(path, dirs[i], len);
                memcpy(path + len, "/cgroup.procs", 14);
                fd = open(path, O_WRONLY | O_CLOEXEC);
                if (fd < 0 || write(fd, "0", 1) != 1)
                        confine_fail(report_fd, "join cgroup", errno);
                close(fd);
        }
        join_namespaces(sb, true, report_fd);
        become_root(sb, report_fd);
        if (conn_name)
                confine_connection_file(sb, conn_name, conn_text, report_fd);
}

int confine_join_to_start(const struct confine_sandbox *sb, const char *const *dirs, size_t ndirs,
                          const char *conn_name, const char *conn_text, bool start_in_group,
                          int report_fd)
{
        int group_fd = start_in_group ? confine_open_start_group(dirs, ndirs) : -1;

        if (group_fd < 0)
                confine_join(sb, dirs, ndirs, conn_name, conn_text, report_fd);
        else
                join_namespaces(sb, false, report_fd);
        return group_fd;
}

void confine_join_started(const struct confine_sandbox *sb, int group_fd, const char *conn_name,
                          const char *conn_text, int report_fd)
{
        if (group_fd < 0)
                return;
        close(group_fd);
        if (setns(sb->ns_fds[CGROUP_NS], CLONE_NEWCGROUP) < 0)
                confine_fail(report_fd, "setns", errno);
        become_root(sb, report_fd);
        if (conn_name)
                confine_connection_file(sb, conn_name, conn_text, report_fd);
}

int confine_open_start_group(const char *const *dirs, size_t ndirs)
{
        const char *dir = NULL;
        struct statfs st;
        int fd;

        for (size_t i = 0; i < ndirs; i++) {
                if (!dirs[i][0])
                        continue;
                if (dir)
                        return -1; /* cgroup v1: a group per hierarchy */
                dir = dirs[i];
        }
        if (!dir)
                return -1;
        /* O_PATH is enough for clone3, and opens no directory for reading. */
        fd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
                return -1;
        if (fstatfs(fd, &st) < 0 || st.f_type != CGROUP2_SUPER_MAGIC) {
                close(fd);
                return -1;
        }
        return fd;
}

/* Whether the calling thread has a shadow stack (x86's CET, Linux 6.6):
 * confine_clone3_vfork's child returns on the caller's shadow stack as
 * well as its stack, and the caller's own return would then fault. */
static bool shadow_stack_on(void)
{
        char text[4096];
        ssize_t n;
        int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
        char *line, *end;

        if (fd < 0)
                return false;
        n = read(fd, text, sizeof(text) - 1);
        close(fd);
        text[n > 0 ? n : 0] = '\0';
        line = strstr(text, "x86_Thread_features:");
        if (!line)
                return false;
        end = strchr(line, '\n');
        if (end)
                *end = '\0';
        return strstr(line, "shstk") != NULL;
}

bool confine_can_start_in_group(void)
{
        /* The flag checked with a descriptor no process has open: a kernel
         * that knows it refuses the descriptor (EBADF) before making a
         * child; an older one refuses the flag (EINVAL) or clone3 itself
         * (ENOSYS, also under a seccomp policy such as Docker's). A kernel
         * without cgroups ignores the flag and forks: that child leaves at
         * once, and the answer is no. Asked once a process: its children
         * inherit the answer. */
        static int answer = -1;
        struct confine_clone_args args = {
            .flags = CLONE_INTO_CGROUP, .exit_signal = SIGCHLD, .cgroup = INT_MAX};
        long rc;

        if (answer >= 0)
                return answer;
        if (shadow_stack_on()) {
                answer = 0;
                return false;
        }
        rc = confine_clone3_vfork(&args, sizeof(args));
        if (rc == 0)
                _exit(0);
        if (rc > 0)
                waitpid((pid_t)rc, NULL, 0);
        answer = rc == -EBADF;
        return answer;
}

#if defined(__x86_64__)
#define STRING(x) #x
#define EXPAND(x) STRING(x)
/* clone3 written as glibc writes vfork: the child returns first, on the
 * stack of the caller, which waits; the return address is popped into a
 * register the system call keeps (rdx) and pushed back by each of them,
 * so the child's own calls cannot overwrite the caller's. Arguments are
 * already where the system call takes them (rdi, rsi). */
/* clang-format off */
__asm__(".text\n"
        ".globl confine_clone3_vfork\n"
        ".hidden confine_clone3_vfork\n"
        ".type confine_clone3_vfork, @function\n"
        "confine_clone3_vfork:\n"
        "\tpopq %rdx\n"
        "\tmovl $" EXPAND(SYS_clone3) ", %eax\n"
        "\tsyscall\n"
        "\tpushq %rdx\n"
        "\tret\n"
        ".size confine_clone3_vfork, .-confine_clone3_vfork\n");
/* clang-format on */
#else
long confine_clone3_vfork(void *args, size_t size)
{
        (void)args;
        (void)size;
        return -ENOSYS;
}
#endif

/* Sets stdio: each descriptor given, or /dev/null. */
static int set_stdio(const int stdio[3])
{
        int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);

        if (null_fd < 0)
                return -1;
        for (int i = 0; i < 3; i++) {
                if (dup2(stdio[i] >= 0 ? stdio[i] : null_fd, i) < 0)
                        return -1;
        }
        return 0;
}

/* Signals as an execve leaves them, a session of its own, stdio. */
static void reset_process(const int stdio[3], bool tty, int keep_fd)
{
        sigset_t none;

        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        for (int sig = 1; sig < NSIG; sig++)
                signal(sig, SIG_DFL);
        /* Its own process group: interrupts go to it and its children. */
        if (setsid() < 0)
                confine_fail(keep_fd, "setsid", errno);
        if (set_stdio(stdio) < 0)
                confine_fail(keep_fd, "stdio", errno);
        /* A terminal of the sandbox's devpts, made the controlling terminal
         * of the new session: job control and ^C work as in any shell, and
         * its hangup reaches the session when the gateway lets go. */
        if (tty && ioctl(0, TIOCSCTTY, 0) < 0)
                confine_fail(keep_fd, "controlling terminal", errno);
}

/* The limits every process has alike. */
static void set_fixed_limits(int keep_fd)
{
        const struct rlimit core = {0, 0}, nofile = {4096, 4096};

        if (setrlimit(RLIMIT_CORE, &core) < 0 || setrlimit(RLIMIT_NOFILE, &nofile) < 0)
                confine_fail(keep_fd, "setrlimit", errno);
}

/* The limits of sb's request: lowered only, so the sandbox's user may set
 * them too (confine_request). */
static void set_request_limits(const struct confine_sandbox *sb, int keep_fd)
{
        /* A backstop for files on mounts without their own size limit; a
         * little over the disk limit so that a full disk says ENOSPC. */
        const struct rlimit fsize = {(rlim_t)(sb->disk_mb + 1) * 1024 * 1024,
                                     (rlim_t)(sb->disk_mb + 1) * 1024 * 1024};
        /* Counted per host uid: exact when each sandbox has its own. */
        const struct rlimit nproc = {sb->pids, sb->pids};

        if (setrlimit(RLIMIT_FSIZE, &fsize) < 0 ||
            (sb->privileged && setrlimit(RLIMIT_NPROC, &nproc) < 0))
                confine_fail(keep_fd, "setrlimit", errno);
}

/* Every privilege dropped for the sandbox's user, or with as_root for its
 * root with ROOT_CAPS; no_new_privs; the seccomp filter, last. */
static void drop_privileges(const struct confine_sandbox *sb, bool as_root, int keep_fd)
{
        /* spawn_start.c starts root only in a sandbox that maps one. */
        const uid_t id = as_root ? 0 : ROOTFS_USER_UID;

        /* Empty the bounding set (needs CAP_SETPCAP, so before setuid) and
         * lock the securebits: no path back to any capability, not even
         * through a root-owned or file-capability binary. The sandbox's
         * root keeps file-ownership capabilities only (ROOT_CAPS). */
        for (int cap = 0; cap <= sb->cap_last; cap++) {
                if (as_root && (ROOT_CAPS & (1ull << cap)))
                        continue;
                if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 && errno != EINVAL)
                        confine_fail(keep_fd, "drop bounding set", errno);
        }
        /* Root's exec must grant it root's capabilities (at most the
         * bounding set), so its NOROOT and NO_SETUID_FIXUP bits stay off,
         * locked off: a setuid() away from 0 then drops them all. */
        if (prctl(PR_SET_SECUREBITS,
                  (as_root ? 0 : SECBIT_NOROOT | SECBIT_NO_SETUID_FIXUP) | SECBIT_NOROOT_LOCKED |
                      SECBIT_NO_SETUID_FIXUP_LOCKED | SECBIT_KEEP_CAPS_LOCKED |
                      SECBIT_NO_CAP_AMBIENT_RAISE | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED,
                  0, 0, 0) < 0)
                confine_fail(keep_fd, "securebits", errno);
        if (sb->privileged && setgroups(0, NULL) < 0)
                confine_fail(keep_fd, "setgroups", errno);
        if (setresgid(id, id, id) < 0)
                confine_fail(keep_fd, "setresgid", errno);
        if (setresuid(id, id, id) < 0)
                confine_fail(keep_fd, "setresuid", errno);
        /* With NO_SETUID_FIXUP the switch kept capabilities: clear them.
         * Root keeps ROOT_CAPS permitted: no_new_privs (below) caps what
         * its exec grants at what it holds now. */
        if (keep_capabilities(as_root ? ROOT_CAPS : 0) < 0)
                confine_fail(keep_fd, "capset", errno);
        if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL)
                confine_fail(keep_fd, "clear ambient capabilities", errno);
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
                confine_fail(keep_fd, "no_new_privs", errno);
        /* Last, so the calls above were not subject to it. */
        if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, sb->filter) < 0)
                confine_fail(keep_fd, "seccomp", errno);
}

void confine_process(const struct confine_sandbox *sb, const int stdio[3], const char *cwd,
                     bool tty, bool as_root, int keep_fd)
{
        reset_process(stdio, tty, keep_fd);
        confine_close_fds_except(keep_fd);
        if (chdir(cwd) < 0)
                confine_fail(keep_fd, "chdir", errno);
        set_fixed_limits(keep_fd);
        set_request_limits(sb, keep_fd);
        drop_privileges(sb, as_root, keep_fd);
}

void confine_ahead(const struct confine_sandbox *sb, int keep_a, int keep_b)
{
        const int none[3] = {-1, -1, -1};
        const int keep[2] = {keep_a < keep_b ? keep_a : keep_b, keep_a < keep_b ? keep_b : keep_a};

        reset_process(none, false, -1);
        close_fds_except(keep, 2);
        set_fixed_limits(-1);
        drop_privileges(sb, false, -1);
}

void confine_request(const struct confine_sandbox *sb, const int stdio[3], const char *cwd,
                     int keep_fd)
{
        if (set_stdio(stdio) < 0)
                confine_fail(keep_fd, "stdio", errno);
        if (chdir(cwd) < 0)
                confine_fail(keep_fd, "chdir", errno);
        set_request_limits(sb, keep_fd);
}
