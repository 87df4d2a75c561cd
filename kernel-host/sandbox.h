/* Building a kernel's sandbox (DESIGN §4): clone into new user, pid,
 * mount, net, ipc and uts namespaces (and a cgroup namespace once placed in
 * the kernel's cgroup), then in the child a fresh tmpfs root with read-only
 * binds of what kernels need, pivot_root, and a kernel process that drops
 * every privilege and loads the seccomp filter just before execve.
 *
 * The child that clone makes is the sandbox's init (pid 1): it reaps
 * orphans, forwards signals to the kernel's process group and reports the
 * kernel's exit status to the kernel-host. */
#ifndef GLOVEBOX_SANDBOX_H
#define GLOVEBOX_SANDBOX_H

#include "kernel-host/cgroup.h"
#include "protocol/hostmsg.h"

#include <linux/filter.h>
#include <stdbool.h>
#include <sys/types.h>

#define SANDBOX_USER_UID 1000 /* "user" inside every sandbox */
#define SANDBOX_RUN_DIR  "/run/kernel"
#define SANDBOX_HOME     "/home/user"

struct sandbox_ids {
        uid_t setup_uid; /* host uid of the sandbox's root (setup, init) */
        uid_t user_uid;  /* host uid of "user", who runs the kernel */
        gid_t setup_gid, user_gid;
        bool privileged; /* we are root: two mapped ids, else one */
};

/* What a sandboxed kernel needs from the caller. */
struct sandbox_request {
        const struct hostmsg_start *start;
        const char *run_dir;  /* host: <runtime>/<kernel id> */
        const char *ipc_dir;  /* host: run_dir/ipc, mounted at SANDBOX_RUN_DIR */
        char *const *argv;    /* already expanded for paths inside */
        char *const *envp;
        struct sandbox_ids ids;
        const struct sock_fprog *seccomp;
        bool quiet;           /* kernel stdout/stderr to /dev/null */
};

/* A started sandbox. */
struct sandbox {
        pid_t init_pid;      /* host pid of the sandbox's init */
        int report_fd;       /* init reports the kernel's exit here */
        struct kernel_cgroup cgroup;
};

/* The memory holding our argv strings: each sandbox's init overwrites its
 * copy, so that its /proc/1/cmdline names no host path. */
void sandbox_set_title_area(char *start, size_t len);
/* Builds and starts the sandbox. On failure nothing is left running and
 * fail says which step failed and with which errno. */
int sandbox_start(const struct sandbox_request *req, struct sandbox *sb,
                  struct hostmsg_failed *fail);
/* Delivers sig to the kernel's process group (through init). */
int sandbox_signal(const struct sandbox *sb, int sig);
/* Kills every process of the sandbox at once. */
void sandbox_kill(const struct sandbox *sb);
/* After init was reaped with init_status: the kernel's own wait status if
 * init reported it, else init_status; *oom when the memory limit killed. */
int sandbox_finish(struct sandbox *sb, int init_status, bool *oom);

#endif
