#include "autoconf.h"

#include "gateway/kernels/kernels.h"
#include "gateway/kernels/kernel_private.h"
#include "gateway/core/loop.h"
#include "gateway/kernels/host.h"
#include "gateway/kernels/session.h"
#include "protocol/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- memory checkpoints (kernel-host/checkpoint.h) ------------------------------ */

/* How long the kernel is given to see our connections end before the
 * dump: CRIU cannot take a socket whose peer is outside the sandbox. */
#define CHECKPOINT_DROP_MS 20.0

const char *kernel_checkpoint_refusal(const struct kernel *k)
{
        const char *why;

        if (!host_checkpoints(&why))
                return why;
        if (!k->sandbox || !k->owns_sandbox)
                return !k->sandbox ? "the kernel has no sandbox (--sandbox none)"
                                   : "the kernel's sandbox is shared";
        if (k->sandbox->network.enabled)
                return "the kernel's sandbox has egress, which a checkpoint does not keep yet";
        if (k->sandbox->volumes)
                return "the kernel's sandbox mounts volumes, which a checkpoint does not keep yet";
        if (k->phase != KERNEL_READY)
                return "the kernel is not running";
        return NULL;
}

struct checkpoint_job {
        char kernel_id[JP_UUID_SIZE];
        char sandbox_id[JP_UUID_SIZE];
        char name[JP_UUID_SIZE];
        kernel_checkpointed_fn done;
        void *ctx;
        lws_sorted_usec_list_t timer;
};

static void reconnect(struct kernel *k)
{
        if (kernel_open_sockets(k) < 0)
                klog_warn(k->id, "cannot reconnect to the kernel after a failed checkpoint");
        session_connect_all(k);
}

static void on_checkpointed(void *ctx, int error, const char *message)
{
        struct checkpoint_job *job = ctx;
        struct kernel *k = kernel_by_id(job->kernel_id);

        if (error && k && k->phase == KERNEL_READY)
                reconnect(k);
        job->done(job->ctx, error ? -error : 0, message);
        free(job);
}

static void on_dropped(lws_sorted_usec_list_t *sul)
{
        struct checkpoint_job *job = lws_container_of(sul, struct checkpoint_job, timer);
        struct kernel *k = kernel_by_id(job->kernel_id);
        int rc;

        if (!k || k->phase != KERNEL_READY || !k->sandbox ||
            strcmp(k->sandbox->id, job->sandbox_id) != 0) {
                job->done(job->ctx, -ESRCH, "the kernel ended before its checkpoint");
                free(job);
                return;
        }
        rc = host_checkpoint(job->sandbox_id, job->name, true, on_checkpointed, job);
        if (rc < 0) {
                reconnect(k);
                job->done(job->ctx, rc, "cannot ask the kernel-host for a checkpoint");
                free(job);
        }
}

int kernel_checkpoint(struct kernel *k, const char *name, kernel_checkpointed_fn done, void *ctx)
{
        struct checkpoint_job *job;

        if (kernel_checkpoint_refusal(k))
                return -EOPNOTSUPP;
        job = calloc(1, sizeof(*job));
        if (!job)
                return -ENOMEM;
        snprintf(job->kernel_id, sizeof(job->kernel_id), "%s", k->id);
        snprintf(job->sandbox_id, sizeof(job->sandbox_id), "%s", k->sandbox->id);
        snprintf(job->name, sizeof(job->name), "%s", name);
        job->done = done;
        job->ctx = ctx;
        /* Every connection of ours to the kernel ends, its clients' too:
         * their peers are in our network namespace, not the sandbox's. */
        session_disconnect_all(k);
        kernel_close_sockets(k);
        kernel_set_state(k, "pausing");
        loop_timer_start(&job->timer, on_dropped, CHECKPOINT_DROP_MS);
        return 0;
}

/* ---- restore ------------------------------------------------------------------- */

struct restore_job {
        struct sandbox_waiter sandbox_wait;
        struct sandbox *sandbox;
        struct waiter *w;
        char *id, *kernelspec, *owner, *key, *ipc;
        char **env;
};

static void restore_job_free(struct restore_job *job)
{
        free(job->id);
        free(job->kernelspec);
        free(job->owner);
        free(job->key);
        free(job->ipc);
        jp_strv_free(job->env);
        free(job);
}

static void restore_fail(struct restore_job *job, int status, const char *message)
{
        struct waiter *w = job->w;

        sandbox_unref(&job->sandbox);
        restore_job_free(job);
        w->on = NULL;
        w->done(w, NULL, status, message);
}

static void on_restored(struct sandbox_waiter *sw, struct sandbox *sb, const char *error)
{
        struct restore_job *job = lws_container_of(sw, struct restore_job, sandbox_wait);
        struct kernel_kept kept = {.id = job->id,
                                   .kernelspec = job->kernelspec,
                                   .owner = job->owner,
                                   .key = job->key,
                                   .env = job->env,
                                   .pid = 0,
                                   .ipc = job->ipc};
        struct waiter *w = job->w;
        struct kernel *k;
        int rc;

        (void)sb;
        if (error) {
                restore_fail(job, 500, error);
                return;
        }
        rc = kernel_adopt(&kept, job->sandbox, &k);
        if (rc < 0) {
                restore_fail(job, 500,
                             rc == -EEXIST ? "a kernel of that id runs"
                                           : "the restored kernel cannot be taken");
                return;
        }
        /* The kernel holds the sandbox's reference now. */
        job->sandbox = NULL;
        restore_job_free(job);
        kernel_when_ready(k, w);
}

int kernel_restore(const struct kernel_kept *kept, const struct hostmsg_limits *limits,
                   const char *checkpoint, struct waiter *w)
{
        struct restore_job *job = calloc(1, sizeof(*job));
        int rc = -ENOMEM;

        if (!job)
                return -ENOMEM;
        job->w = w;
        job->id = strdup(kept->id);
        job->kernelspec = strdup(kept->kernelspec);
        job->owner = strdup(kept->owner);
        job->key = strdup(kept->key);
        job->ipc = strdup(kept->ipc);
        if (!job->id || !job->kernelspec || !job->owner || !job->key || !job->ipc ||
            jp_strv_dup(kept->env, &job->env) < 0)
                goto fail;
        rc = sandbox_new_restored(limits, checkpoint, &job->sandbox);
        if (rc < 0)
                goto fail;
        job->sandbox_wait.ready = on_restored;
        sandbox_when_ready(job->sandbox, &job->sandbox_wait);
        return 0;
fail:
        restore_job_free(job);
        return rc;
}
