/* Sandboxes and the processes in them, as the kernel-host keeps them. */
#ifndef GLOVEBOX_SPAWN_H
#define GLOVEBOX_SPAWN_H

#include "protocol/hostmsg.h"

#include <jansson.h>
#include <poll.h>
#include <stdbool.h>
#include <sys/types.h>

/* Prepares what every sandbox shares; runtime_dir holds their directories.
 * 0 or -errno (logged). */
int spawn_init(const char *runtime_dir);

/* Makes a sandbox (or, without one, a plain directory). *root_fd is a new
 * descriptor of its root directory for the gateway (the caller closes it).
 * On failure fills fail, leaves nothing behind and returns -errno. */
int spawn_sandbox_create(const struct hostmsg_sandbox *req, struct hostmsg_sandbox_ready *ready,
                         int *root_fd, struct hostmsg_failed *fail);
/* Whether a sandbox of that id has been made and not yet forgotten. */
bool spawn_sandbox_made(const char *id);
/* Kills everything in the sandbox; it is reported gone once reaped. */
int spawn_sandbox_destroy(const char *id);

/* What a start comes to, in sandbox_id: started, with the descriptors
 * for the gateway (a command's stdin's write end and its stdout's and
 * stderr's read ends; a kernel's output; a terminal's master), or fail
 * (started NULL). The callee sends them on; they are closed after. */
typedef void spawn_answer_fn(const char *sandbox_id, const struct hostmsg_started *started,
                             const int *fds, size_t nfds, const struct hostmsg_failed *fail);
/* Starts a process in its sandbox, answered through answer: at once, or
 * when its process has said how its start went (spawn_starting_read).
 * Starts in sandboxes are under way side by side, SPAWN_STARTING_MAX at
 * most: past that, the oldest is waited for first. */
#define SPAWN_STARTING_MAX 64
void spawn_start(const struct hostmsg_start *req, spawn_answer_fn *answer);
/* The starts under way, for the kernel-host's poll: their sockets (at most
 * max into fds, POLLIN; how many), and the time to the first one's end in
 * ms (-1: none under way). */
size_t spawn_starting_fds(struct pollfd *fds, size_t max);
int spawn_starting_due_ms(void);
/* Reads what the starts under way have said, without blocking, and gives
 * up on those out of time: each whose outcome is known is answered. */
void spawn_starting_read(void);
/* Waits for every start under way of process or sandbox id (NULL: all)
 * to be answered: before a request about it, which then finds it
 * started or failed, as the gateway, told first, does. */
void spawn_starting_settle(const char *id);
/* Delivers sig to the process's group; -ESRCH if unknown. */
int spawn_signal(const char *id, int sig);
/* Kills the process's group at once. */
int spawn_stop(const char *id);

/* The user and network namespaces of a sandbox (descriptors that stay
 * the kernel-host's: do not close them). -ESRCH for an unknown sandbox or
 * one whose init is gone, -EPERM for a plain directory (--sandbox=none),
 * which has no namespace of its own to reach. */
int spawn_sandbox_netns(const char *id, int *userns_fd, int *netns_fd);

/* Reports what ended with pid: an exited process (EXITED) and/or a sandbox
 * whose last process is gone (SANDBOX_GONE), through report. */
/* A sandbox's CPU weight: the least (background) or the usual. 0,
 * -ESRCH, or -errno of the cgroup's file. */
int spawn_sandbox_priority(const char *id, bool background);
/* Gives a sandbox new limits (cgroup_relimit), its disk's size the same:
 * 0, -ESRCH, -EINVAL for another disk size, -EBUSY, or -errno; err says
 * why. */
int spawn_sandbox_relimit(const char *id, const struct hostmsg_limits *limits, char *err,
                          size_t errlen);
void spawn_reap(pid_t pid, int status, void (*report)(enum hostmsg_type, json_t *));
/* Takes the ends that sandboxes' inits reported (sandbox_exit_next) and
 * reports each process's exit through report. */
void spawn_init_reports(void (*report)(enum hostmsg_type, json_t *));
/* Kills everything and waits for it (at exit). */
void spawn_stop_all(void (*report)(enum hostmsg_type, json_t *));

#endif
