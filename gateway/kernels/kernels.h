/* The kernel registry and each kernel's life: start through the
 * kernel-host, the kernel_info handshake that makes it ready, iopub
 * fan-out to client sessions, interrupt, restart (asked for, or automatic
 * after a death), shutdown. */
#ifndef GLOVEBOX_KERNELS_H
#define GLOVEBOX_KERNELS_H

#include "gateway/core/config.h"
#include "gateway/core/waiter.h"
#include "gateway/kernels/relay.h"
#include "gateway/kernels/sandboxes.h"
#include "gateway/core/tenants.h"
#include "gateway/kernels/zio.h"
#include "protocol/hostmsg.h"
#include "protocol/ids.h"
#include "protocol/kernelspec.h"
#include "protocol/log.h"
#include "protocol/sign.h"

#include <jansson.h>
#include <libwebsockets.h>
#include <stdbool.h>
#include <time.h>

enum kernel_phase {
        KERNEL_STARTING,   /* asked the kernel-host to start it */
        KERNEL_CONNECTING, /* running; waiting for kernel_info and iopub */
        KERNEL_READY,
        KERNEL_RESTARTING, /* waiting for the old process to exit */
        KERNEL_DEAD,       /* exited and will not be restarted */
        KERNEL_STOPPING,   /* deleted; waiting for the process to exit */
};

struct kernel;
struct kernel_output;
struct session;

#define RATE_BUCKETS 32 /* the rate window is split into this many buckets */
#define KERNEL_EVICTED_IDS 256 /* evicted session ids remembered per kernel */

struct kernel {
        struct kernel *next;
        char id[JP_UUID_SIZE];
        /* The tenant that started it (or took it from the pool); "" while
         * pooled: nobody's, reached by admins only. */
        char owner[KEYS_NAME_MAX];
        const struct jp_kernelspec *spec;
        enum kernel_phase phase;
        char execution_state[16]; /* as clients see it: starting, idle, busy, ... */
        struct timespec last_activity;
        char reason[HOSTMSG_ERROR_SIZE];     /* why the current start failed or it died */
        char last_death[HOSTMSG_ERROR_SIZE]; /* shown as "reason" in the model */
        bool oom;                            /* the last exit was an out-of-memory kill */
        int connections;

        char key[65];
        struct jp_signer *signer;
        /* A fork's key before kernel_rekey, still accepted from the kernel
         * until it answers under the new one; NULL else. */
        struct jp_signer *old_signer;
        char **env; /* "NAME=value" for every (re)start */
        struct hostmsg_limits limits;
        char ipc_prefix[PATH_MAX]; /* where its sockets are, as the gateway reaches them */
        char ipc_separator;        /* between prefix and port: '-' (jupyter_client) or ':' */
        int ipc_root_fd;           /* a sandbox root that ipc_prefix goes through, or -1 */
        char ipc_sandbox[JP_UUID_SIZE]; /* the sandbox of ipc_root_fd */
        int pid;
        struct kernel_output *output; /* what the current process prints */
        bool running; /* the kernel-host was asked to start it and it has not ended */
        struct sandbox *sandbox;
        bool owns_sandbox; /* made for this kernel alone (not an E2B sandbox's) */
        struct sandbox_waiter sandbox_wait;
        int restarts;     /* automatic ones since the last requested start */
        bool pooled;      /* in the warm pool: invisible, never given to anyone yet */
        bool warm;        /* pooled, ready and pre-imported: may be handed out */
        bool adapting;    /* taken from the pool, not yet given the request's env and limits */
        char *adapt_code; /* the request's env, sent with the startup code (kernel_adapt) */
        char warmup_id[JP_UUID_SIZE + 8]; /* the pre-import's execute_request */
        bool ever_ready;  /* false until the first start succeeds */
        bool adopting;    /* kept across a restart, not yet answering the new gateway */
        char *startup_code; /* run silently at every ready (start, restart), or NULL */
        bool startup_expression; /* startup_code is a user expression, not a cell */
        char startup_id[JP_UUID_SIZE + 8]; /* its execute_request while it runs */

        /* the gateway's own sockets */
        struct zio *iopub;
        struct zio *shell;
        struct zio *control;
        char probe_id[JP_UUID_SIZE + 8];
        bool probe_replied, probe_iopub;
        double probe_quick_ms; /* the next quick probe's delay */
        lws_sorted_usec_list_t probe_timer;
        lws_sorted_usec_list_t deadline_timer;
        lws_sorted_usec_list_t grace_timer;
        lws_sorted_usec_list_t adapt_timer;

        double active_at; /* monotonic seconds of the last activity, for culling */
        /* iopub rate accounting (--iopub-*-rate-limit) */
        struct {
                uint64_t msgs[RATE_BUCKETS], bytes[RATE_BUCKETS];
                int64_t tick; /* bucket index of the newest bucket */
                bool exceeded;
        } rate;

        struct session *sessions;
        /* The sockets of its next new session, connected ahead while it
         * waits in the pool (session.h: session_ahead_open), and their
         * identity; closed unused SESSION_PARK_SECONDS after a claim. */
        struct zio *ahead[3];
        char ahead_identity[ZIO_IDENTITY_SIZE];
        lws_sorted_usec_list_t ahead_timer;
        /* Hashes of the ids of the sessions last evicted for
         * --max-lingering-sessions (a ring), so that a client that comes
         * back is told. */
        uint64_t evicted_sessions[KERNEL_EVICTED_IDS];
        unsigned evicted_next;
        struct waiter *waiters;
        /* told once the request's env is on its way (kernel_when_adapted) */
        struct waiter *adapt_waiters;
        struct waiter *resolving; /* being told, in waiters_resolve */
        uint64_t bad_signatures;
        /* iopub messages dropped from the socket's queue (--iopub-queue-bytes)
         * since clients were last told, and the parent of the first */
        uint64_t iopub_dropped;
        char *iopub_dropped_parent;
        /* Warnings that the kernel or its clients can repeat at will, at
         * most --log-rate-limit lines a second each (protocol/log.h). */
        struct log_limit log_bad_message, log_bad_frame, log_refused, log_send_failed,
            log_slow_client, log_evicted, log_iopub_dropped;
};

int kernels_init(const struct config *cfg, const struct jp_kernelspec_list *specs);
const struct jp_kernelspec_list *kernels_specs(void);

/* A kernel the caller may reach (tenants.h: its own, or any for an admin
 * or the gateway itself); deleted and pooled ones are invisible. NULL if
 * none: another tenant's kernel is not found, as if it did not exist. */
struct kernel *kernel_find(const char *id);
/* The same whoever the caller is: for the gateway's own bookkeeping
 * (sessions whose kernel is gone), never for an id a client sent. */
struct kernel *kernel_find_any(const char *id);

/* What a tenant holds: its live kernels and the sum of their limits (a
 * sandbox several kernels share counted once). */
struct tenant_usage {
        int64_t kernels;
        int64_t memory_mb;
        int64_t cpu_millicores;
};
void kernels_usage(const char *owner, struct tenant_usage *out);
/* What a family holds for owner besides kernels, added to its usage for
 * its quotas (terminals' sandboxes): registered at start, at most four. */
typedef void (*kernels_usage_fn)(const char *owner, int64_t *memory_mb, int64_t *cpu_millicores);
int kernels_usage_register(kernels_usage_fn fn);
/* Whether the caller's key may start one more kernel with limits (in the
 * shared sandbox, if given, whose limits it may already hold): 0, or
 * -EDQUOT with *why (new, the caller's) set to a 429 body:
 * {"message", "reason": "quota", "quota": {...}, "holding": {...}}. */
int kernels_quota_check(const struct hostmsg_limits *limits, const struct sandbox *shared,
                        json_t **why);
/* The same for n more kernels with limits each, in sandboxes of their own
 * (a fork's copies). */
int kernels_quota_check_many(const struct hostmsg_limits *limits, unsigned n, json_t **why);
/* The same for a sandbox of its own that runs no kernel (a terminal's):
 * its memory and CPU count, the number of kernels does not. */
int kernels_quota_check_sandbox(const struct hostmsg_limits *limits, json_t **why);
/* The kernels the caller may reach, per owner: {"name": count} (for the
 * metrics' tenant labels; "" is shown as "(pool)"). */
json_t *kernels_owners(void);
/* Starts a kernel of spec with extra environment env (validated: names of
 * [A-Za-z_][A-Za-z0-9_]*, NULL-terminated, copied), in sandbox (shared,
 * with its limits) or in a new sandbox of its own with limits, owned by
 * the caller (tenants.h). w, if given, hears when it is ready or failed.
 * Returns 0, -EAGAIN at --max-kernels, -EDQUOT past the caller's quota
 * (kernels_quota_check says which), or -errno. */
int kernel_start(const struct jp_kernelspec *spec, char *const *env,
                 const struct hostmsg_limits *limits, struct sandbox *sandbox,
                 struct waiter *w, struct kernel **out);
/* The same in a new sandbox of its own, under id (a paused kernel
 * resumed, kernel_pause.h); -EBUSY while a kernel of that id exists. */
int kernel_start_as(const struct jp_kernelspec *spec, char *const *env,
                    const struct hostmsg_limits *limits, const char *id, struct waiter *w,
                    struct kernel **out);
/* Starts a kernel for the warm pool: its own sandbox, default limits,
 * invisible (kernel_find, the list) until kernel_pool_claim. */
int kernel_start_pooled(const struct jp_kernelspec *spec, char *const *env,
                        struct waiter *w, struct kernel **out);
/* Runs code in a ready kernel without a trace in its history, and then
 * expression (or NULL) as its user expression; w hears when both have
 * been run (500 if either failed or the kernel died). */
int kernel_warm_up(struct kernel *k, const char *code, const char *expression, struct waiter *w);
/* Sets code (copied; NULL for none) to run silently, without a trace in the
 * kernel's history, each time k becomes ready: after its start and after
 * every restart. Waiters (kernel_when_ready) hear that k is ready only once
 * it has run, so nothing a client sends overtakes it. Run now too if k is
 * ready (with kernel_adapt's code if k is being adapted). With expression,
 * code is one expression, sent as the request's user expression (an empty
 * cell's): IPython evaluates it as it is, where a cell's source goes
 * through its input transforms first (about 0.5 ms per KiB). 0 or
 * -ENOMEM. */
int kernel_set_startup_code(struct kernel *k, const char *code, bool expression);
/* Pooled kernels of spec (starting ones too); *warm gets those ready to go. */
size_t kernels_pooled(const struct jp_kernelspec *spec, size_t *warm);
/* Hands a warm pooled kernel of spec over to the caller (visible from now
 * on, the caller's alone: its owner from now on), or NULL. */
struct kernel *kernel_pool_claim(const struct jp_kernelspec *spec);
/* Gives k, ready and just claimed, what a request asked for: env (copied)
 * for its restarts; code (copied), run silently in it (the request's own
 * environment set in the running kernel), or NULL; limits for its
 * sandbox's cgroup when they are not the ones it has (its disk's size must
 * be). The code runs once the limits hold, at the earliest on the loop's
 * next turn, with the startup code (kernel_set_startup_code) set until
 * then: a startup expression in the same execution. Waiters
 * (kernel_when_ready) hear that it is ready once all of that holds, those
 * of kernel_when_adapted once it is sent; if the kernel-host refuses the
 * limits, they hear 503 and k is shut down. 0, or
 * -errno with nothing changed (the caller shuts k down). */
int kernel_adapt(struct kernel *k, char *const *env, const char *code,
                 const struct hostmsg_limits *limits);
/* Drops what kernel_adapt left to send (k died, or is going). */
void kernel_adapt_end(struct kernel *k);
/* A pooled kernel of spec to shut down when the pool shrinks, or NULL. */
struct kernel *kernel_pool_spare(const struct jp_kernelspec *spec);
/* The limits of a kernel whose request names none. */
void kernels_default_limits(struct hostmsg_limits *out);
/* Appends obj's "NAME": "value" pairs to the NULL-terminated *env (*n
 * entries) after checking names and sizes; -EINVAL with err filled. */
int kernel_env_append(json_t *obj, char ***env, size_t *n, char *err, size_t errlen);

/* w hears when k is ready: now if it is, else when it gets there (or
 * dies, or is deleted). */
void kernel_when_ready(struct kernel *k, struct waiter *w);
/* As kernel_when_ready, but for a kernel just given a request's env and
 * limits (kernel_adapt): w hears once the limits hold and the env's
 * execution is sent, not once it has run. Whoever then executes through
 * kernel_when_ready still waits for it to have run. */
void kernel_when_adapted(struct kernel *k, struct waiter *w);
/* Interrupts a ready kernel's cell; -EAGAIN (and nothing sent) while it is
 * starting or restarting. */
int kernel_interrupt(struct kernel *k);
/* Restarts k; w hears when it is ready again. */
void kernel_restart(struct kernel *k, struct waiter *w);
/* Deletes k: invisible at once, gone when its process has exited (w hears). */
void kernel_shutdown(struct kernel *k, struct waiter *w);
/* Whether a kernel of spec with env (kernel_env_append's) is within the
 * bounds of a process's command line and environment (protocol/hostmsg.h),
 * as every kernel start checks: 0, or -E2BIG with why (when not NULL)
 * saying which bound, for the client. */
int kernel_exec_check(const struct jp_kernelspec *spec, char *const *env, char *why, size_t size);

json_t *kernel_model(const struct kernel *k);
json_t *kernels_model(void);
size_t kernels_count(void);
/* Marks activity now (client or kernel traffic). */
void kernel_touch(struct kernel *k);
/* Sends a gateway-made status message (starting, restarting, dead) to
 * every client session of k. */
void kernel_broadcast_status(struct kernel *k, const char *state);
/* Signs msg and sends it on the gateway's own socket of channel. */
int kernel_send(struct kernel *k, struct zio *z, struct jp_msg *msg);
/* Decodes a message from k's kernel into msg, checking its signature
 * under k's key (or, after kernel_rekey, the key before until the kernel
 * answers under the new one). jp_wire_decode's 0, -EBADMSG or -EACCES. */
int kernel_decode(struct kernel *k, const struct jp_bytes *frames, size_t nframes,
                  struct jp_msg *msg);
/* Builds a message the gateway itself sends (kernel_info_request, ...). */
int kernel_send_request(struct kernel *k, struct zio *z, const char *msg_type,
                        const char *content, char msg_id_out[JP_UUID_SIZE + 8]);

/* Deletes every kernel and calls done() when all have exited, or after
 * timeout_ms. */
void kernels_shutdown_all(double timeout_ms, void (*done)(void));
/* Frees what is left (at exit, after the loop stopped). */
void kernels_free_all(void);

/* What a restart that keeps kernels (gateway/kernels/keep.h) records of a kernel. */
struct kernel_kept {
        const char *id, *kernelspec, *owner, *key;
        char *const *env; /* NULL-terminated */
        int pid;
        const char *ipc; /* the sockets' path as the kernel-host reported it */
        /* In a sandbox it shares (an E2B sandbox's): the kernel takes a
         * reference of its own, not the caller's. */
        bool shared;
};
/* The record of every kernel that can be kept (ready, not pooled, in a
 * sandbox of its own without egress), marking their sandboxes kept
 * (sandbox_keep); the caller owns the array. NULL when out of memory. */
json_t *kernels_keep_record(void);
/* Takes over a kept kernel in its adopted sandbox sb (the kernel takes the
 * caller's reference on success): same id and key; it reconnects and
 * probes with kernel_info, and is killed if it does not answer within
 * --keep-grace. 0, -ENOENT (no such kernelspec now), -EEXIST or -errno. */
int kernel_adopt(const struct kernel_kept *kept, struct sandbox *sb, struct kernel **out);
/* The path of k's sockets as the kernel-host reported it (relative to its
 * sandbox's root), for a record; NULL when it has none. */
const char *kernel_reported_ipc(const struct kernel *k);

/* Memory checkpoints of a kernel in a sandbox of its own
 * (kernel_checkpoint.c, over host.h's). NULL when k can be checkpointed,
 * else why not, in words for its client. */
const char *kernel_checkpoint_refusal(const struct kernel *k);
/* status 0 once the checkpoint called name is whole on disk (the kernel
 * is stopped then, and is to be shut down), with what it took there as
 * dumped (bytes: the figure its quota counts, though the kernel-host may
 * compress its pages later), or -errno with why (the kernel runs on,
 * reconnected). */
typedef void (*kernel_checkpointed_fn)(void *ctx, int status, const char *message,
                                       uint64_t bytes);
/* Ends every connection to k (CRIU takes none whose peer is outside the
 * sandbox) and has the kernel-host checkpoint its sandbox as name; done
 * hears once (-EFBIG: it took more than its room, nothing kept). The
 * checkpoint counts against k's owner's --pause-quota-mb, and its room
 * (also at most the sandbox's memory and disk limits) is checked before
 * anything is written: -EDQUOT when the owner has no room left, -EFBIG
 * when the sandbox's memory and files in use would not fit. 0, or -errno
 * and nothing is heard. */
int kernel_checkpoint(struct kernel *k, const char *name, kernel_checkpointed_fn done, void *ctx);
/* The same for a sandbox shared by several kernels (an E2B sandbox's):
 * whether all of them can be checkpointed with it (NULL, or why not), and
 * the checkpoint of it with every kernel in it. */
const char *kernels_checkpoint_refusal(const struct sandbox *sb);
int kernels_checkpoint(struct sandbox *sb, const char *owner, const char *id, const char *name,
                       bool stop, kernel_checkpointed_fn done, void *ctx);
/* Why kernels_checkpoint refused rc, in words for a client: -EFBIG and
 * -EDQUOT name --pause-quota-mb, anything else its errno's text. */
const char *kernels_checkpoint_why(int rc);
/* Forks k (kernel_fork.c): its sandbox is checkpointed in place, k running
 * on, and count copies (1 to KERNEL_FORK_MAX) are restored beside it, each
 * a kernel of its own with its own id, sandbox, host ids, cgroup and files;
 * a Python one also gets its own key and fresh random seeds (kernel_rekey).
 * done hears once: a status and why when the checkpoint failed (nothing
 * made), else every copy's result in order, the kernel or why it failed.
 * 0, or -errno and nothing is heard (-EOPNOTSUPP: no checkpoint can take
 * k, -EDQUOT or -EFBIG: no room for one, as for a pause). */
#define KERNEL_FORK_MAX 32
struct kernel_fork_result {
        struct kernel *kernel; /* ready; NULL when this copy failed */
        const char *error;     /* why, when it did */
};
typedef void (*kernel_forked_fn)(void *ctx, int status, const char *message,
                                 const struct kernel_fork_result *results, unsigned count);
int kernel_fork(struct kernel *k, unsigned count, kernel_forked_fn done, void *ctx);
/* A new key for a Python kernel forked from another, and fresh random
 * seeds, and env's names and values (an object, or NULL) set in its
 * os.environ, in one silent execution: sent under the key it has, then
 * ours switches (kernel_decode takes the old one until the kernel answers
 * under the new). 0, or -EOPNOTSUPP for another language, or -errno. */
int kernel_rekey(struct kernel *k, json_t *env);
/* Has checkpoint name removed from disk (it was restored, or its paused
 * kernel or sandbox is gone). */
void kernel_checkpoint_forget(const char *name);
/* Makes a kernel again from checkpoint: a sandbox restored with limits,
 * and in it the kernel kept describes, taken over as after a restart
 * (kernel_adopt) and probed. w hears when it is ready (subject the
 * kernel), or has failed (subject NULL or the kernel). copy: a fork's or
 * a snapshot's, beside the kernel it was taken from, under the id
 * jp_uuid_derive(its sandbox's id, kept->id), rekeyed (kernel_rekey). 0,
 * or -errno and nothing is heard. */
int kernel_restore(const struct kernel_kept *kept, const struct hostmsg_limits *limits,
                   const char *checkpoint, bool copy, struct waiter *w);

#endif
