/* The gateway's side of the kernel-host link (see protocol/hostmsg.h):
 * requests go out, and each report comes back to the object that asked,
 * found by its id. */
#ifndef GLOVEBOX_HOST_H
#define GLOVEBOX_HOST_H

#include "protocol/hostmsg.h"

#include <stdbool.h>
#include <stddef.h>

struct host_sandbox_ops {
        /* root_fd: the sandbox's root directory, now the callee's */
        void (*ready)(void *ctx, const struct hostmsg_sandbox_ready *m, int root_fd);
        void (*failed)(void *ctx, const struct hostmsg_failed *m);
        void (*gone)(void *ctx, const struct hostmsg_exit *m); /* last report */
};

struct host_process_ops {
        /* A command's stdin, stdout and stderr come in fds (now the
         * callee's); a kernel's nfds is 0. */
        void (*started)(void *ctx, const struct hostmsg_started *m, int *fds, size_t nfds);
        void (*failed)(void *ctx, const struct hostmsg_failed *m); /* last report */
        void (*exited)(void *ctx, const struct hostmsg_exit *m);   /* last report */
};

/* Forks and execs glovebox-kernel-host (found beside our own executable,
 * else in the libexec directory). Runs before any thread or ZMQ context
 * exists, so that the kernel-host inherits none. If it dies, a new one is
 * started, at most max_restarts times. Waits for its hello (which limits
 * it can enforce). zygotes: the --zygote entries, passed on (borrowed: they
 * must outlive the kernel-host's replacements). home_dir: where sandboxes'
 * /home/user images go (--home-storage disk), NULL for a tmpfs home.
 * Returns 0 or -errno. */
int host_spawn(const char *runtime_dir, const char *log_level, char *const *zygotes,
               int max_restarts, const char *home_dir);
/* Takes over the kernel-host a previous image of this process started and
 * kept across execve (a restart that keeps kernels): its link fd, pid and
 * controllers as recorded. 0, or -ESRCH when fd or pid is not it. */
int host_adopt(int fd, int pid, unsigned controllers, const char *runtime_dir,
               const char *log_level, char *const *zygotes, int max_restarts, const char *home_dir);
/* The --zygote entries a replacement kernel-host is given (borrowed), for a
 * gateway that adopted its kernel-host before it knew its defaults. */
void host_set_zygotes(char *const *zygotes);
/* True when name is a file beside the kernel-host's program (in the build
 * tree, or in the libexec directory) that access(2) allows for mode. */
bool host_has_file(const char *name, int mode);
/* Makes the link survive execve and says what it is, for the record. */
int host_keep_link(int *fd, int *pid);
/* Routes reports for id (a kept sandbox or process) to ops and ctx
 * without asking the kernel-host for anything. 0 or -EEXIST. */
int host_listen(const char *id, const struct host_sandbox_ops *sandbox,
                const struct host_process_ops *process, void *ctx);
/* Stops routing reports for id to ctx (host_listen's, or a request's). */
void host_unlisten(const char *id, void *ctx);
/* Starts delivering reports (needs the loop). If the kernel-host dies,
 * every object waiting for a report hears that it is gone ("host-lost"),
 * after a new kernel-host has started; lost() runs when none could be. */
int host_attach(void (*lost)(void));

/* The controllers of the limits the kernel-host can enforce (enum
 * hostmsg_controller bits), as it said when it started. */
unsigned host_controllers(void);

/* Whether a kernel-host is there to ask (false once it died for good). */
bool host_running(void);
/* The running kernel-host's pid, or -1. */
int host_process_id(void);

int host_sandbox_create(const struct hostmsg_sandbox *req, const struct host_sandbox_ops *ops,
                        void *ctx);
/* Where the kernel-host keeps template layers (kernel-host/layers.h),
 * passed to every kernel-host started after this; NULL or "": no builds. */
void host_set_layers_dir(const char *dir);
/* A build's layer was sealed (error 0) or could not be (an errno): heard
 * once per build sandbox, after its SANDBOX_GONE. */
typedef void (*host_layer_sealed_fn)(const char *layer_id, int error);
void host_on_layer_sealed(host_layer_sealed_fn fn);
/* Removes a layer's image (a deleted template, a failed build). */
int host_layer_delete(const char *layer_id);
int host_sandbox_destroy(const char *sandbox_id);
/* A pooled sandbox runs in the background (the least CPU weight) until
 * it is handed out (hostmsg.h's SANDBOX_PRIORITY). 0 or -errno. */
int host_sandbox_priority(const char *sandbox_id, bool background);
/* Asks for req to start; ops hears how it went, once started, failed or
 * exited. 0, or -errno and nothing is heard: -E2BIG or -EINVAL for a
 * request outside hostmsg_start_check's rules (callers check first, to
 * tell their clients which), -EMSGSIZE, -EPIPE, -EEXIST. */
int host_start(const struct hostmsg_start *req, const struct host_process_ops *ops, void *ctx);
int host_signal(const char *id, int signal);
/* The answer to host_connect: error 0 and the connected socket fd (now
 * the callee's, non-blocking), or an errno and -1. */
typedef void (*host_connected_fn)(void *ctx, int error, int fd);
/* Asks for a TCP connection to 127.0.0.1:req->port inside the sandbox's
 * network namespace; done hears once (EPIPE if the kernel-host dies). */
int host_connect(const struct hostmsg_connect *req, host_connected_fn done, void *ctx);
/* Forgets a connect request: done is not called, and a socket that still
 * comes is closed. */
void host_connect_cancel(const char *id);
/* Where the kernel-host keeps volumes' images (kernel-host/volumes.h),
 * passed to every kernel-host started after this; NULL or "": none. */
void host_set_volumes_dir(const char *dir);
/* Asks for volume req->volume_id's root directory (made first, of
 * req->size_mb MiB, when that is not 0); done hears once, like
 * host_connect's (host_connect_cancel forgets it), with the root as an
 * O_PATH descriptor. */
int host_volume_open(const struct hostmsg_volume *req, host_connected_fn done, void *ctx);
/* Removes a volume's image. */
int host_volume_delete(const char *volume_id);
/* Memory checkpoints (kernel-host/checkpoint.h). Whether the kernel-host
 * can make them; else *why says why (borrowed), for clients and the log. */
bool host_checkpoints(const char **why);
/* What a kernel-host kept across a restart said (the record has it). */
void host_set_checkpoints(bool on, const char *why);
/* Where the kernel-host keeps checkpoints, which CRIU it runs, and how
 * many seconds after a dump it compresses a checkpoint's pages (-1:
 * never), for every kernel-host started after this; "" or NULL: none,
 * the default. */
void host_set_checkpoints_dir(const char *dir, const char *criu, int compress_after);
/* How many sandboxes the kernel-host keeps made ahead (--sandbox-stock). */
void host_set_sandbox_stock(int n);
/* error 0 once the checkpoint is whole on disk, with what it took there
 * as dumped (bytes; 0 when the kernel-host did not say), else an errno
 * and why. */
typedef void (*host_checkpointed_fn)(void *ctx, int error, const char *message, uint64_t bytes);
/* Checkpoints the sandbox as name (a UUID): its processes are stopped
 * while CRIU dumps them, then killed when stop (a pause), else run on.
 * done hears once (EPIPE if the kernel-host dies). 0, -EBUSY while one
 * of that sandbox is being made, or -errno and nothing is heard. At most
 * room_mb MiB on disk (0: no bound), else done hears EFBIG. */
int host_checkpoint(const char *sandbox_id, const char *name, bool stop, uint64_t room_mb,
                    host_checkpointed_fn done, void *ctx);
/* Forgets a checkpoint's done: it is not called. */
void host_checkpoint_cancel(const char *sandbox_id);
/* Gives the sandbox's cgroup new limits (its disk_mb must be the one it
 * has): done hears error 0 once they hold; EBUSY when it already uses more
 * memory or processes than they allow, EINVAL for another disk size, EPIPE
 * if the kernel-host dies (the old limits stay, but for EPIPE). 0, -EBUSY
 * while one is asked for that sandbox, or -errno and nothing is heard. */
int host_sandbox_relimit(const char *sandbox_id, const struct hostmsg_limits *limits,
                         host_checkpointed_fn done, void *ctx);
/* Makes sandbox sandbox_id from checkpoint name: ops hears as for
 * host_sandbox_create, its processes registered under their old ids; or,
 * a copy, beside the sandbox it was taken from (a fork), with host ids of
 * its own and each process's id jp_uuid_derive(sandbox_id, old id). */
int host_sandbox_restore(const char *sandbox_id, const char *name, bool copy,
                         const struct host_sandbox_ops *ops, void *ctx);
/* Removes checkpoint name from disk. */
int host_checkpoint_delete(const char *name);
/* Kills the process at once. */
int host_stop(const char *id);
/* Closes the link, which makes the kernel-host kill everything, clean up
 * and exit, and waits for it (at most timeout_ms, then SIGKILL). */
void host_close(int timeout_ms);

#endif
