/* The steps that put one process into a sandbox made by sandbox.h, shared
 * by the kernel-host's watchers (which then execve the process) and the
 * zygote's children (glovebox-zygote, which go on to run a kernel that was
 * already loaded before the fork). Everything here runs in a child between
 * fork and execve (or the kernel's first line): async-signal-safe calls
 * only, and a failing step is reported on a descriptor, then _exit. */
#ifndef GLOVEBOX_CONFINE_H
#define GLOVEBOX_CONFINE_H

#include <errno.h>
#include <linux/filter.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define CONFINE_NAMESPACES 7

/* What a child reports to the kernel-host, over a socket or a pipe. */
enum confine_report_kind { CONFINE_STARTED = 1, CONFINE_FAILED = 2 };

struct confine_report {
        int kind;
        int error; /* errno, for CONFINE_FAILED */
        int pid;   /* host pid, for a process's CONFINE_STARTED */
        int nspid; /* its pid in the sandbox, for the same */
        char step[64];
};

/* A sandbox as a process entering it sees it: borrowed descriptors. */
struct confine_sandbox {
        /* Its namespaces in the order user, mnt, pid, net, ipc, uts, cgroup. */
        const int *ns_fds;
        int run_fd;      /* its /run/kernel (O_PATH): connection files go here */
        bool privileged; /* the kernel-host is root: the sandbox has a root of its own */
        uint64_t disk_mb;
        uint32_t pids;
        int cap_last;                    /* /proc/sys/kernel/cap_last_cap */
        const struct sock_fprog *filter; /* seccomp, loaded last */
};

void confine_report_init(struct confine_report *r, int kind);
void confine_report_send(int fd, const struct confine_report *r);
/* Waits up to timeout_ms for a child's report on fd: 0, -ETIMEDOUT, or
 * -EPIPE when the child went without one. */
int confine_report_wait(int fd, struct confine_report *r, int timeout_ms);
/* A process forked into a sandbox is orphaned at once by the one that
 * forked it, and so becomes a child of the sandbox's init (sandbox.h).
 * Whoever waits for its start makes sv with confine_exec_socket, hands
 * sv[1] to it (and to whatever forks it) and closes its own copy; the
 * process says hello on sv[1] first (confine_hello), then fails through
 * confine_fail(sv[1]) or executes, which closes sv[1]. A step before the
 * process's own fails through confine_fail(sv[1]) too. The waiter reads
 * that from sv[0] with confine_wait_read, without blocking, whenever sv[0]
 * is readable: -EAGAIN while the outcome is not known yet; 0 once it is,
 * r being CONFINE_STARTED with the process's pid as the caller sees it
 * (the kernel's credentials say it, not the process) and in the sandbox,
 * or CONFINE_FAILED and the step; or -errno (-EPIPE: gone without a
 * word, -EPROTO: a report that is not one). w->hello says whether the
 * hello came (w->said has the pids): a process that has ended since
 * failed through a report, which is read first, or else executed. */
struct confine_wait {
        int fd; /* sv[0] */
        bool hello;
        struct confine_report said;
};
int confine_exec_socket(int sv[2]);
void confine_hello(int fd);
int confine_wait_read(struct confine_wait *w, struct confine_report *r);
/* What a wait came to (rc and r as confine_wait_read's, or -ETIMEDOUT):
 * 0, r being the process's hello; or -errno, and *step the step that
 * failed ("start process": the process went without a word, or its time
 * ran out). */
int confine_wait_outcome(int rc, const struct confine_report *r, const char **step);
/* Reports the failed step and its errno on fd, then _exit(127). */
__attribute__((noreturn)) void confine_fail(int fd, const char *step, int error);
void confine_close_fds_except(int keep);
/* Clears every capability set of the calling thread; -1 with errno. */
int confine_drop_capabilities(void);

/* Moves the caller into the cgroup directories dirs (host paths), then into
 * every namespace of sb (the pid namespace for its children: fork after
 * this), and becomes the sandbox's root. Writes a kernel's connection file
 * (conn_name non-NULL) into /run/kernel as that root. Fails through
 * confine_fail(report_fd). */
void confine_join(const struct confine_sandbox *sb, const char *const *dirs, size_t ndirs,
                  const char *conn_name, const char *conn_text, int report_fd);

/* The same join for a child started in its cgroup (confine_vfork_into)
 * instead of moved there: a move (a write to cgroup.procs) waits for an
 * RCU grace period, 6 to 18 ms, while one started there waits for none.
 * confine_join_to_start, when start_in_group (confine_can_start_in_group)
 * and dirs are one group on cgroup v2 (confine_open_start_group), joins
 * every namespace of sb but its cgroup namespace (a start into a group is
 * made from outside that namespace's root, as where cgroup2 is mounted
 * with nsdelegate) and returns the group's descriptor for
 * confine_vfork_into; otherwise it is confine_join, and returns -1. The
 * child then calls confine_join_started with that descriptor: it closes
 * it, then joins the cgroup namespace, becomes the sandbox's root and
 * writes the connection file (nothing at all for -1). Both fail through
 * confine_fail(report_fd). */
int confine_join_to_start(const struct confine_sandbox *sb, const char *const *dirs, size_t ndirs,
                          const char *conn_name, const char *conn_text, bool start_in_group,
                          int report_fd);
void confine_join_started(const struct confine_sandbox *sb, int group_fd, const char *conn_name,
                          const char *conn_text, int report_fd);

/* Whether the kernel starts a process in a group (clone3's
 * CLONE_INTO_CGROUP, Linux 5.7). Asked once a process (it may fork a
 * child that exits at once): ask before forking children that need it. */
bool confine_can_start_in_group(void);
/* The group a child of confine_vfork_into starts in: a descriptor (O_PATH)
 * of the one directory of dirs (host paths, "" for none) when it is on
 * cgroup v2; else -1, and the caller moves itself with confine_join. Call
 * it before joining a sandbox's namespaces, and close it before anything
 * of the sandbox's runs: it reaches the host's cgroup tree. (For
 * confine_join_to_start.) */
int confine_open_start_group(const char *const *dirs, size_t ndirs);

/* clone3 with the caller's return address held in a register across the
 * call, as glibc's vfork is written (confine.c): for confine_vfork_into,
 * nothing else. -errno on failure. */
long confine_clone3_vfork(void *args, size_t size) __attribute__((returns_twice));

/* struct clone_args of Linux 5.7 and its flag: <linux/sched.h>, which has
 * them, cannot be included beside glibc's <sched.h>. */
#ifndef CLONE_INTO_CGROUP
#define CLONE_INTO_CGROUP 0x200000000ULL
#endif
struct confine_clone_args {
        uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls, set_tid,
            set_tid_size, cgroup;
};

/* vfork() whose child starts in the cgroup v2 directory group_fd (from
 * confine_open_start_group). As vfork's, the child shares the caller's
 * memory and stack and the caller waits until it exits or executes; it
 * may call only what a vfork child may, and never returns from the
 * function that used this. A macro, so that no frame of its own lies
 * between them (a function calling one that returns twice is never
 * inlined). 0 in the child, its pid in the caller, or -1 with errno. */
#define confine_vfork_into(group_fd)                                                               \
        __extension__({                                                                            \
                struct confine_clone_args args_ = {.flags =                                        \
                                                       CLONE_VM | CLONE_VFORK | CLONE_INTO_CGROUP, \
                                                   .exit_signal = SIGCHLD,                         \
                                                   .cgroup = (uint64_t)(group_fd)};                \
                long rc_ = confine_clone3_vfork(&args_, sizeof(args_));                            \
                                                                                                   \
                if (rc_ < 0 && rc_ > -4096) {                                                      \
                        errno = (int)-rc_;                                                         \
                        rc_ = -1;                                                                  \
                }                                                                                  \
                (pid_t) rc_;                                                                       \
        })

/* The same connection file, written by a process that has joined already.
 * Fails through confine_fail(report_fd). */
void confine_connection_file(const struct confine_sandbox *sb, const char *name, const char *text,
                             int report_fd);
/* In the process itself, inside the sandbox: resets signals, makes a
 * session, sets stdio (-1: /dev/null) and, with tty (stdio is a terminal's
 * peer), makes it the session's controlling terminal, closes every other
 * descriptor but keep_fd, changes to cwd, sets rlimits, drops every
 * privilege for the sandbox's user, or with as_root (only in a sandbox
 * that maps a root: privileged) becomes the sandbox's root keeping the
 * file-ownership capabilities (CHOWN, DAC_OVERRIDE, DAC_READ_SEARCH,
 * FOWNER) and nothing else, sets no_new_privs and loads the seccomp
 * filter, last. Fails through confine_fail(keep_fd). */
void confine_process(const struct confine_sandbox *sb, const int stdio[3], const char *cwd,
                     bool tty, bool as_root, int keep_fd);
/* confine_process in two halves, for a process confined before it knows
 * its request (a zygote's kernel forked ahead, zygote.h). confine_ahead
 * does all that no request decides, for the sandbox's user: signals, a
 * session, stdio on /dev/null, every descriptor closed but keep_a and
 * keep_b, the limits every process has, the privileges, no_new_privs and
 * the seccomp filter; a failure ends the process (_exit(127)) without a
 * report. The file size and process count limits are left as they were,
 * to be lowered to the request's, which the sandbox's user may do:
 * confine_request sets stdio, changes to cwd as the sandbox's user and
 * lowers those limits to sb's. It closes nothing: what the process opened
 * since confine_ahead is its own (libzmq's descriptors, made while it
 * waited), and the caller closes what the request brought. Fails through
 * confine_fail(keep_fd). */
void confine_ahead(const struct confine_sandbox *sb, int keep_a, int keep_b);
void confine_request(const struct confine_sandbox *sb, const int stdio[3], const char *cwd,
                     int keep_fd);

#endif
