/* What the kernels' registry and each kernel's life share among their
 * files: kernels.c (the registry, starting, restarting, stopping, the
 * kernel-host's reports), kernel_io.c (a kernel's own sockets, the ready
 * handshake, iopub), kernel_model.c (models, environments), kernel_keep.c
 * (restart and keep), kernel_pool.c (the pool's kernels) and quota.c.
 * Nothing else includes this. */
#ifndef GLOVEBOX_KERNEL_PRIVATE_H
#define GLOVEBOX_KERNEL_PRIVATE_H

#include "gateway/kernels/host.h"
#include "gateway/kernels/kernels.h"
#include "gateway/kernels/zio.h"
#include "protocol/ids.h"

#include <libwebsockets.h>

/* How often a starting kernel is asked for kernel_info until it answers. */
#define KERNEL_PROBE_INTERVAL_MS 500.0
/* A kernel that answered while none of its IOPub messages reached us yet:
 * our subscription had not reached its PUB socket when it published
 * (ZeroMQ's slow joiner), not a slow kernel. It is asked again after this,
 * then twice as long each time, up to KERNEL_PROBE_INTERVAL_MS. */
#define KERNEL_PROBE_QUICK_MS 5.0
/* A kernel from a zygote answers our IOPub subscription with an
 * iopub_welcome (JEP 65) from the loop that serves its shell: that
 * welcome makes it ready, and it is asked for kernel_info only when none
 * has come after this long (one that fell back to ipykernel's
 * application sends none). */
#define KERNEL_WELCOME_WAIT_MS 100.0

/* Every kernel, pooled and stopping ones too. */
extern struct kernel *kernels_head;
/* The session id of the gateway's own messages to kernels. */
extern char kernel_gateway_session[JP_UUID_SIZE];
/* How the kernel-host's reports of a kernel's process reach it. */
extern const struct host_process_ops kernel_process_ops;

/* Any kernel by id, pooled and stopping ones too. */
struct kernel *kernel_by_id(const char *id);
void kernel_set_state(struct kernel *k, const char *state);
/* Tells every waiter of k, each detached before its done() runs. */
void kernel_waiters_resolve(struct kernel *k, int status, const char *message);
/* Tells those of kernel_when_adapted that the env is sent. */
void kernel_adapt_waiters_resolve(struct kernel *k);
/* The kernel's reported ipc prefix, checked and kept: 0 or -EINVAL. */
int kernel_set_ipc_prefix(struct kernel *k, const char *reported);
/* A kernel that did not become ready in time. */
void kernel_on_deadline(lws_sorted_usec_list_t *sul);

/* kernel_io.c */
int kernel_open_sockets(struct kernel *k);
void kernel_close_sockets(struct kernel *k);
int kernel_send_startup(struct kernel *k);
int kernel_send_silent(struct kernel *k, const char *code, const char *expression,
                       char msg_id_out[JP_UUID_SIZE + 8]);
void kernel_fail_all_pending(struct kernel *k, const char *ename, const char *evalue);
void kernel_on_probe_timer(lws_sorted_usec_list_t *sul);
/* Starts asking k, just connected, for kernel_info until it is ready. */
void kernel_probe_start(struct kernel *k);
void kernel_on_own_reply(void *arg, struct zio *z, const struct jp_bytes *frames, size_t nframes);
void kernel_on_iopub(void *arg, struct zio *z, const struct jp_bytes *frames, size_t nframes);
void kernel_on_iopub_dropped(void *arg, const struct jp_bytes *frames, size_t nframes);

/* What a restore or a fork keeps of a kernel while it waits, owned: a
 * struct kernel_kept's strings (kernel_checkpoint.c). kept_copy: 0, or
 * -ENOMEM and nothing held; kept_view points into c. */
struct kept_copy {
        char *id, *kernelspec, *owner, *key, *ipc;
        char **env;
};
int kept_copy(const struct kernel_kept *from, struct kept_copy *c);
void kept_copy_clear(struct kept_copy *c);
struct kernel_kept kept_view(const struct kept_copy *c);

#endif
