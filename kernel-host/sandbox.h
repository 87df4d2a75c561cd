/* Sandboxes (DESIGN §4). A sandbox is made by clone into new user, pid,
 * mount, network, IPC and UTS namespaces (and a cgroup namespace once the
 * child sits in its cgroup); its first process applies the root filesystem
 * (rootfs.h), pivots into it and executes glovebox-init (init_main.c),
 * the sandbox's pid 1: it reaps and reports, and when it dies everything
 * in the sandbox dies.
 *
 * Processes (kernels, commands) are started in a sandbox the way
 * `nsenter` does: a child of the kernel-host joins the sandbox's cgroup and
 * namespaces; there a child of its forks the process and exits at once,
 * so that the process, orphaned, becomes a child of init (a sandbox is one
 * tree of processes under its init, as a checkpoint takes it whole). The
 * process drops every privilege and loads the seccomp filter just before
 * execve. init reaps it and reports its wait status to the kernel-host. */
#ifndef GLOVEBOX_SANDBOX_H
#define GLOVEBOX_SANDBOX_H

#include "kernel-host/cgroup.h"
#include "kernel-host/confine.h"
#include "kernel-host/rootfs.h"
#include "protocol/hostmsg.h"

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

struct sandbox_ids {
        uid_t setup_uid; /* host uid of the sandbox's root (setup, init) */
        uid_t user_uid;  /* host uid of "user", who runs every process */
        gid_t setup_gid, user_gid;
        bool privileged; /* we are root: two mapped ids, else only our own */
};

#define SANDBOX_NAMESPACES CONFINE_NAMESPACES
#define SANDBOX_NS_NET     3 /* its index in ns_fds */

struct sandbox {
        pid_t init_pid;                 /* host pid of the sandbox's init */
        int ns_fds[SANDBOX_NAMESPACES]; /* its namespaces, to start processes in */
        int root_fd;   /* its root directory (O_PATH), for the gateway's file access */
        int run_fd;    /* its ROOTFS_RUN_DIR (O_PATH): connection files are written here */
        int report_fd; /* the pipe its init reports on (sandbox_exit_next) */
        int top_fd;    /* its tmpfs top (O_PATH): layers, /tmp, home (checkpoint.h) */
        struct kernel_cgroup cgroup;
        struct sandbox_ids ids;
        struct hostmsg_limits limits;
};

/* One process to start in a sandbox. */
struct sandbox_exec {
        char *const *argv;
        char *const *envp;
        const char *cwd;                    /* inside the sandbox */
        int stdio[3];                       /* descriptors for 0, 1, 2; -1 for /dev/null */
        const struct kernel_cgroup *cgroup; /* the process's own group, in the sandbox's */
        /* A kernel's connection file, written into ROOTFS_RUN_DIR as name
         * (NULL: none) by the sandbox's root, owned by its user. */
        const char *conn_name;
        const char *conn_text;
        /* stdio is a terminal's peer (sandbox_open_pty): it becomes the
         * process's controlling terminal */
        bool tty;
        /* Runs as the sandbox's own root (uid 0 inside, ids.setup_uid on
         * the host) with the file-ownership capabilities only (confine.h);
         * false: as "user". */
        bool as_root;
};

/* A process started in a sandbox: a child of its init, which reports its
 * end (sandbox_exit_next). */
struct sandbox_process {
        pid_t pid;   /* the process itself (host pid), leader of its group */
        pid_t nspid; /* the same in the sandbox's pid namespace */
};

/* Prepares what every sandbox shares (the seccomp program). 0 or -errno. */
int sandbox_init(void);
/* The memory holding our argv strings: each sandbox's init overwrites its
 * copy, so that its /proc/1/cmdline names no host path. */
void sandbox_set_title_area(char *start, size_t len);

/* How a process entering sb sees it (confine.h); borrows sb's descriptors
 * and the seccomp filter. */
void sandbox_confine_view(const struct sandbox *sb, struct confine_sandbox *view);

/* Makes a sandbox whose root is mounted on root_dir, in a new cgroup named
 * cgroup_name; its root is template_root's tree under an overlay when that
 * is not NULL or "" (overlay.h). given's detached mounts (overlay.h; they
 * stay the caller's, its lower unused): /home/user (homedisk.h; -1: on the
 * sandbox's tmpfs), a built template's layers and a build's new layer
 * (layers.h; idmapped here through the sandbox's user namespace).
 * Its init dies with the calling process.
 * On failure nothing is left and fail says which step failed, with which
 * errno. */
int sandbox_create(const char *root_dir, const char *cgroup_name,
                   const struct hostmsg_limits *limits, char *const *ro_paths,
                   const char *template_root, const char *resolv_conf,
                   const struct overlay_fds *given, const struct sandbox_ids *ids,
                   struct sandbox *sb, struct hostmsg_failed *fail);
/* A sandbox CRIU restored (checkpoint.h): init_pid, a child of ours, with
 * its report pipe's read end, its top and its group, taken as sb (the
 * descriptors are sb's once this succeeds). 0 or -errno. */
int sandbox_adopt(pid_t init_pid, int report_fd, int top_fd, const struct sandbox_ids *ids,
                  const struct hostmsg_limits *limits, const struct kernel_cgroup *cgroup,
                  struct sandbox *sb);
/* One byte and one descriptor on a socket (SCM_RIGHTS): sent, 0 or
 * -errno; received, the descriptor (close-on-exec), or -1 when none came
 * (the sender is gone). */
int sandbox_send_fd(int sock, int fd);
int sandbox_recv_fd(int sock);
/* Writes the uid and gid maps of ids for pid's user namespace. 0 or -errno. */
int sandbox_write_id_maps(pid_t pid, const struct sandbox_ids *ids);
/* Replaces the text of /etc/resolv.conf beneath root_fd (a sandbox's
 * root), resolved in it without following any link, a regular file only:
 * its resolver's new address after a restore. 0 or -errno. */
int sandbox_write_resolv(int root_fd, const char *text);
/* Allocates a pseudo-terminal in sb's own devpts instance (NULL: the
 * host's /dev/ptmx, for a plain box), rows by cols (0: 24 by 80), owned by
 * the sandbox's user: *master for the gateway, *peer for the process's
 * stdio, both new close-on-exec descriptors the caller closes. 0 or
 * -errno. */
int sandbox_open_pty(const struct sandbox *sb, unsigned rows, unsigned cols, int *master,
                     int *peer);
struct winsize;
/* Makes a terminal of *master, a multiplexer just opened: unlocks it,
 * sizes it (size NULL: left as it is), opens its peer from it (*peer,
 * close-on-exec) and gives the peer to ids's user where ids is privileged
 * (NULL: to no one). On failure both are closed and -1. 0 or -errno;
 * sandbox_open_pty's and a restore's new terminals (checkpoint_streams.c). */
int sandbox_pty_of(int *master, const struct sandbox_ids *ids, const struct winsize *size,
                   int *peer);
/* Starts a process in sb (sandbox_exec.c) without waiting for it: *fd is
 * the socket its start is read from (confine.h's confine_wait_read, the
 * caller closes it), *starter the child that makes it, which exits once
 * the process is forked (the caller's to reap, and to kill if it is
 * still there when the wait gives up). 0, or -errno with fail filled. */
int sandbox_exec_begin(const struct sandbox *sb, const struct sandbox_exec *ex, int *fd,
                       pid_t *starter, struct hostmsg_failed *fail);
/* How long a sandbox's init, or a process started in a sandbox, has to say
 * it has started. */
#define SANDBOX_SETUP_TIMEOUT_MS 30000
/* Fills fail for a failed step of a sandbox's making or a start in it. */
void sandbox_fail_set(struct hostmsg_failed *fail, const char *step, int error);
/* Every sandbox's init reports the children it reaps on a pipe of its own
 * (init_report.h); sandbox_exits_fd is readable when one has. sandbox_exit_next takes
 * the next report: the host pid of the init that sent it, the pid it
 * reaped (in that sandbox's namespace) and its wait status. 0, or -EAGAIN
 * when none is waiting. */
int sandbox_exits_fd(void);
int sandbox_exit_next(pid_t *init_pid, pid_t *pid, int *status);
/* Kills the sandbox's init, and so every process in it. */
void sandbox_kill(const struct sandbox *sb);
/* Whether the sandbox's init is dead or on its way out (its pid namespace
 * then kills every process in it): true while it has not been reaped. */
bool sandbox_dying(const struct sandbox *sb);
/* How many processes the memory limit has killed so far. */
uint64_t sandbox_oom_kills(const struct sandbox *sb);
/* After init was reaped: removes the cgroup. */
void sandbox_destroy(struct sandbox *sb);

#endif
