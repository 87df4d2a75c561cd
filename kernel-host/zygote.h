/* Zygotes (issue 12): per kernelspec, one process that has imported
 * ipykernel and the operator's modules once (the Python of that kernelspec
 * running the extension module glovebox-zygote.so) and forks a child per
 * kernel instead of a cold execve. The kernel-host starts each zygote as
 * root in a mount namespace of its own (a private /tmp and /home/user for
 * its imports) and talks to it over a SOCK_SEQPACKET socket: one request
 * per kernel, which carries only descriptors (the sandbox's namespaces and
 * /run/kernel, the kernel's output pipe, a report socket, and a sealed
 * memfd with the kernel's cgroups, connection file, argv and environment).
 * The zygote never reads the memfd; only the kernel does, after the fork,
 * so no request's key or environment is ever in the zygote's memory, and
 * no child can find another's there.
 *
 * One page-table copy per kernel: the zygote vfork()s the request's child
 * (host pid namespace, still root), which reads the request's cgroups
 * only, joins them, then the sandbox's namespaces, and vfork()s a middle
 * child in the sandbox's pid namespace, which forks the kernel and exits;
 * the zygote resumes when both are gone. The kernel says hello on the
 * report socket (the kernel-host reads its host pid from the credentials),
 * reads the request, writes the connection file as the sandbox's root and
 * confines itself exactly as an exec'd kernel does (confine.h: session,
 * rlimits, no capabilities, the sandbox's user, no_new_privs, seccomp),
 * closes the socket, reseeds its random state, takes its environment and
 * runs the kernelspec's "-m module" in the already loaded interpreter.
 * Orphaned in the sandbox's pid namespace, the kernel is a child of the
 * sandbox's init, which reaps and reports it like any other (sandbox.h). */
#ifndef GLOVEBOX_ZYGOTE_H
#define GLOVEBOX_ZYGOTE_H

#include "kernel-host/confine.h"

#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define ZYGOTE_MODULE         "glovebox-zygote.so" /* beside the kernel-host */
#define ZYGOTE_NAME           "glovebox-zygote"    /* its process's name */
#define ZYGOTE_FD             3                    /* the zygote's end of its socket */
#define ZYGOTE_MODULE_FD      4                    /* the module, for the interpreter to load */
#define ZYGOTE_MAX_NAME       64
#define ZYGOTE_MAX            8          /* zygotes of one kernel-host */
#define ZYGOTE_MAX_SPEC       (4u << 20) /* bytes of one request's memfd */
#define ZYGOTE_MAX_DIRS       16         /* cgroup directories of one request */
#define ZYGOTE_MAX_DIRS_BYTES (ZYGOTE_MAX_DIRS * 4096u)

/* The descriptors of one request, in this order. A request to fork ahead
 * (tag 'A', zygote_ahead) has the same: its memfd holds only the header
 * and the cgroup directories, its report socket is the process's link, on
 * which the rest comes (tag 'S': the memfd, report socket and output pipe
 * of the request it serves), and its output is the link again. */
enum zygote_fd {
        ZYGOTE_FD_SPEC = 0, /* sealed memfd: struct zygote_spec, then strings */
        ZYGOTE_FD_REPORT,   /* the kernel's end of confine_exec_socket */
        ZYGOTE_FD_OUTPUT,   /* the kernel's stdout and stderr */
        ZYGOTE_FD_RUN,      /* the sandbox's /run/kernel (O_PATH) */
        ZYGOTE_FD_NS,       /* then CONFINE_NAMESPACES namespaces */
        ZYGOTE_NFDS = ZYGOTE_FD_NS + CONFINE_NAMESPACES
};

#define ZYGOTE_SPEC_MAGIC 0x7a796731u

/* The memfd's header; NUL-terminated strings follow: ndirs cgroup
 * directories, the connection file's name and text, the cwd, nargv
 * arguments, nenv "NAME=value" entries. */
struct zygote_spec {
        uint32_t magic;
        uint32_t privileged;
        uint64_t disk_mb;
        uint32_t pids;
        uint32_t ndirs;
        uint32_t nargv;
        uint32_t nenv;
        uint32_t dirs_bytes; /* of the cgroup directories' strings, NULs included */
        uint32_t reserved;
};

struct sandbox;
struct sandbox_exec;
struct sandbox_process;
struct hostmsg_failed;

/* Starts the zygote described by spec, "NAME:MODULE,MODULE,..." (the
 * modules may be empty). Needs root. 0 or -errno (logged). */
int zygote_start(const char *spec);
/* Whether a kernel with this argv and environment can come from zygote
 * name: the kernelspec runs "-m MODULE" with the zygote's own Python, and
 * its environment sets nothing the interpreter or the preloaded modules
 * read only as they start. */
bool zygote_fits(const char *name, char *const *argv, char *const *envp);
/* Starts ex in sb through zygote name without waiting for it: *fd is the
 * socket the kernel's start is read from (confine.h's confine_wait_read;
 * the caller closes it). -ENOENT when that zygote is gone (start cold
 * instead); other failures fill fail. zygote_exec_end takes the wait's
 * outcome (rc and r as confine_wait_read's, or -ETIMEDOUT; ahead: the
 * start was zygote_exec_ahead's) to proc, the kernel itself, a child of
 * the sandbox's init as every process there (sandbox.h): 0, -ENOENT when
 * the zygote or the process forked ahead died with the request (nothing
 * runs: start cold), or another failure, filling fail. */
int zygote_exec(const char *name, const struct sandbox *sb, const struct sandbox_exec *ex, int *fd,
                struct hostmsg_failed *fail);
int zygote_exec_end(const char *name, bool ahead, int rc, const struct confine_report *r,
                    const struct sandbox_exec *ex, struct sandbox_process *proc,
                    struct hostmsg_failed *fail);
/* A kernel's process forked ahead into a sandbox made ahead (stock.h,
 * docs/performance.md#sandboxes-made-ahead): the page-table copy and
 * Python's after-fork work of a start, done while the kernel-host is
 * quiet, the copies of the pages a kernel's start writes, once a kernel
 * of the zygote has said which, and of those its first requests write,
 * which the zygote's rehearsal listed (zygote_pages.h), and the part of a first
 * cell every kernel does alike (zygote_kernel.py's warm_up, the zygote's
 * own code on no input). Then it confines itself but for what a request
 * decides (confine_ahead) and makes its ZeroMQ context and sockets
 * (zygote_kernel.py's sockets_ahead), whose threads are then as confined as
 * it is. The process waits in the sandbox's namespaces and in a group of
 * its own in the sandbox's (ZYGOTE_AHEAD_GROUP), running nothing of
 * anyone's, for the rest of a request on its link: the request's memfd,
 * report socket and output pipe, which only the request brings. From
 * there on it starts as any kernel of the zygote, confine_request setting
 * what the request decides. */
#define ZYGOTE_AHEAD_GROUP "p-ahead"
#define ZYGOTE_AHEAD_TITLE "glovebox-kernel-ahead" /* its command line meanwhile */
/* The command line of a zygote's rehearsal (zygote_pages.h) while it runs. */
#define ZYGOTE_REHEARSAL_TITLE "glovebox-zygote-rehearsal"

struct zygote_ahead;

/* Forks a process of zygote name ahead into sb (its group made there).
 * 0, or -errno (the zygote is gone or not ready yet: -ENOENT). */
int zygote_ahead(const char *name, const struct sandbox *sb, struct zygote_ahead **out);
/* Starts ex in sb (whose group has a's) through a, as zygote_exec would
 * through zygote name: ex->cgroup is the group a's process is in, by then
 * named as the caller wants. -ENOENT when a cannot serve ex (another
 * zygote's, a zygote gone since, a process that died waiting): nothing
 * was started, and the caller starts ex otherwise. a stays the caller's,
 * to free once the start's outcome is known (zygote_ahead_free). */
int zygote_exec_ahead(struct zygote_ahead *a, const char *name, const struct sandbox *sb,
                      const struct sandbox_exec *ex, int *fd, struct hostmsg_failed *fail);
/* Closes a's link (its process, if it still waits, ends) and frees it.
 * Its group is the caller's to remove. NULL: nothing. */
void zygote_ahead_free(struct zygote_ahead *a);

/* Whether pid was a zygote (now gone: its kernels start cold). */
bool zygote_reaped(pid_t pid, int status);
/* The zygotes' stdout and stderr (one pipe each), for the kernel-host's
 * poll: at most max into fds, POLLIN; how many. */
size_t zygote_output_fds(struct pollfd *fds, size_t max);
/* Logs what the zygotes printed, a log line per line (warn, "zygote NAME:
 * ..."), and closes the pipe of one that is gone. */
void zygote_read_output(void);
/* Closes every zygote's socket: they exit. */
void zygote_stop_all(void);

#endif
