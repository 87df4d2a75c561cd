/* The gateway's side of the kernel-host link (see protocol/hostmsg.h). */
#ifndef GLOVEBOX_HOST_H
#define GLOVEBOX_HOST_H

#include "protocol/hostmsg.h"

#include <sys/types.h>

struct host_events {
        void (*started)(const struct hostmsg_started *m);
        void (*start_failed)(const struct hostmsg_failed *m);
        void (*exited)(const struct hostmsg_exit *m);
        void (*lost)(void); /* the kernel-host died */
};

/* Forks and execs glovebox-kernel-host (found beside our own executable,
 * else in the libexec directory). Must run before any thread or ZMQ context
 * exists. Returns 0 or -errno. */
int host_spawn(const char *runtime_dir, const char *log_level);
/* Starts delivering the kernel-host's reports to events (needs the loop). */
int host_attach(const struct host_events *events);
int host_start(const struct hostmsg_start *req);
int host_signal(const char *kernel_id, int signal);
/* Kills everything of the kernel at once. */
int host_stop(const char *kernel_id);
/* Closes the link, which makes the kernel-host kill every kernel, clean up
 * and exit, and waits for it (at most timeout_ms, then SIGKILL). */
void host_close(int timeout_ms);

#endif
