#include "autoconf.h"

#include "gateway/kernels/kernels.h"
#include "gateway/kernels/kernel_private.h"
#include "gateway/core/loop.h"
#include "gateway/kernels/host.h"
#include "gateway/core/config.h"
#include "gateway/kernels/pause.h"
#include "gateway/kernels/session.h"
#include "gateway/kernels/usage.h"
#include "protocol/log.h"
#include "protocol/tree.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- memory checkpoints (kernel-host/checkpoint.h) ------------------------------ */

/* CRIU cannot take a socket whose peer is outside the sandbox: our
 * connections to its kernels end first, and the kernel-host's dump waits
 * until the kernels have closed their ends (checkpoint_await_unix_peers).
 * Asked at once, after this turn of the loop has closed them. */
#define CHECKPOINT_DROP_MS 0.0
/* What CRIU writes beside the pages and the files: its images of every
 * process, file and mount, and tar's headers. */
#define CHECKPOINT_SLACK (16ull << 20)

/* Whether every kernel of sb may be checkpointed with it: NULL, or why
 * not. */
const char *kernels_checkpoint_refusal(const struct sandbox *sb)
{
        const char *why;

        if (!host_checkpoints(&why))
                return why;
        for (struct kernel *k = kernels_head; k; k = k->next) {
                if (k->sandbox == sb && k->phase != KERNEL_READY)
                        return "a kernel of the sandbox is starting or stopping";
        }
        return NULL;
}

const char *kernel_checkpoint_refusal(const struct kernel *k)
{
        if (!k->sandbox || !k->owns_sandbox)
                return !k->sandbox ? "the kernel has no sandbox (--sandbox none)"
                                   : "the kernel's sandbox is shared";
        if (k->phase != KERNEL_READY)
                return "the kernel is not running";
        return kernels_checkpoint_refusal(k->sandbox);
}

struct checkpoint_job {
        struct sandbox *sandbox; /* a reference, while the job runs */
        char name[JP_UUID_SIZE];
        kernel_checkpointed_fn done;
        void *ctx;
        uint64_t room_mb;
        bool stop; /* a pause: the sandbox is killed once saved; else it runs on */
        lws_sorted_usec_list_t timer;
};

/* Every ready kernel of sb connects again (a checkpoint failed). */
static void reconnect(struct sandbox *sb)
{
        for (struct kernel *k = kernels_head; k; k = k->next) {
                if (k->sandbox != sb || k->phase != KERNEL_READY)
                        continue;
                if (kernel_open_sockets(k) < 0)
                        klog_warn(k->id, "cannot reconnect to the kernel after a failed "
                                         "checkpoint");
                session_connect_all(k);
        }
}

static void job_end(struct checkpoint_job *job, int status, const char *message, uint64_t bytes)
{
        if ((status || !job->stop) && job->sandbox->phase == SANDBOX_READY)
                reconnect(job->sandbox);
        job->done(job->ctx, status, message, bytes);
        sandbox_unref(&job->sandbox);
        free(job);
}

/* What checkpoint name takes on disk now, in bytes (0 when unknown): for
 * a kernel-host that does not say what its dump took (one started before
 * an upgrade that kept it, SIGUSR2). */
static uint64_t bytes_on_disk(const char *name)
{
        char path[PATH_MAX];
        uint64_t total;
        int fd;

        snprintf(path, sizeof(path), "%s/checkpoints/%s", config_get()->state_dir, name);
        fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return 0;
        total = tree_file_bytes_at(fd);
        close(fd);
        return total == UINT64_MAX ? 0 : total;
}

/* The kernel-host's figure is taken as it dumped: by the time we could
 * read the directory, its pages may be being compressed. */
static void on_checkpointed(void *ctx, int error, const char *message, uint64_t bytes)
{
        struct checkpoint_job *job = ctx;

        if (!error && !bytes)
                bytes = bytes_on_disk(job->name);
        job_end(job, error ? -error : 0, message, error ? 0 : bytes);
}

static void on_dropped(lws_sorted_usec_list_t *sul)
{
        struct checkpoint_job *job = lws_container_of(sul, struct checkpoint_job, timer);
        int rc;

        if (job->sandbox->phase != SANDBOX_READY) {
                job_end(job, -ESRCH, "the sandbox ended before its checkpoint", 0);
                return;
        }
        rc = host_checkpoint(job->sandbox->id, job->name, job->stop, job->room_mb, on_checkpointed,
                             job);
        if (rc < 0)
                job_end(job, rc, "cannot ask the kernel-host for a checkpoint", 0);
}

/* The room sb's checkpoint may take, in MiB: at most its memory and disk
 * limits, within what owner's other paused sandboxes and kernels (but
 * id's) leave of --pause-quota-mb; the memory and files it uses now must
 * fit before anything is written. 0, -EDQUOT (no room left) or -EFBIG. */
static int checkpoint_room(struct sandbox *sb, const char *owner, const char *id, uint64_t *room_mb)
{
        uint64_t quota = (uint64_t)config_get()->pause_quota_mb << 20;
        uint64_t used = pause_owner_bytes(owner, id), room, cap, estimate;
        struct sandbox_usage u;

        if (used + PAUSE_MIN_ROOM > quota)
                return -EDQUOT;
        room = quota - used;
        /* Its pages cannot pass its memory limit, nor its files its disk
         * (a sparse file's holes are archived as holes). */
        cap = sb->limits.memory_mb ? sb->limits.memory_mb : usage_meminfo_bytes("MemTotal") >> 20;
        cap = ((cap + sb->limits.disk_mb + sb->limits.disk_mb / 8) << 20) + CHECKPOINT_SLACK;
        if (cap < room)
                room = cap;
        if (usage_sample(sb, &u) == 0) {
                estimate = u.mem_used + u.mem_cache + u.disk_used + CHECKPOINT_SLACK;
                log_info("checkpoint of %s: about %llu MiB in use, %llu MiB of room", id,
                         (unsigned long long)(estimate >> 20), (unsigned long long)(room >> 20));
                if (estimate > room)
                        return -EFBIG;
        }
        *room_mb = room >> 20;
        return 0;
}

const char *kernels_checkpoint_why(int rc)
{
        return rc == -EFBIG    ? "its memory and files in use would not fit in what this key has "
                                 "left of --pause-quota-mb"
               : rc == -EDQUOT ? "this key's paused kernels, sandboxes and snapshots hold all "
                                 "they may (--pause-quota-mb)"
                               : strerror(-rc);
}

int kernels_checkpoint(struct sandbox *sb, const char *owner, const char *id, const char *name,
                       bool stop, kernel_checkpointed_fn done, void *ctx)
{
        struct checkpoint_job *job;
        uint64_t room_mb = 0;
        int rc;

        if (kernels_checkpoint_refusal(sb))
                return -EOPNOTSUPP;
        rc = checkpoint_room(sb, owner, id, &room_mb);
        if (rc < 0)
                return rc;
        job = calloc(1, sizeof(*job));
        if (!job)
                return -ENOMEM;
        job->room_mb = room_mb;
        job->stop = stop;
        job->sandbox = sandbox_ref(sb);
        snprintf(job->name, sizeof(job->name), "%s", name);
        job->done = done;
        job->ctx = ctx;
        /* Every connection of ours to its kernels ends, their clients'
         * too: their peers are in our network namespace, not the
         * sandbox's. */
        for (struct kernel *k = kernels_head; k; k = k->next) {
                if (k->sandbox != sb)
                        continue;
                session_disconnect_all(k);
                kernel_close_sockets(k);
                if (stop)
                        kernel_set_state(k, "pausing");
        }
        loop_timer_start(&job->timer, on_dropped, CHECKPOINT_DROP_MS);
        return 0;
}

int kernel_checkpoint(struct kernel *k, const char *name, kernel_checkpointed_fn done, void *ctx)
{
        if (kernel_checkpoint_refusal(k))
                return -EOPNOTSUPP;
        return kernels_checkpoint(k->sandbox, k->owner, k->id, name, true, done, ctx);
}

void kernel_checkpoint_forget(const char *name)
{
        if (host_checkpoint_delete(name) < 0)
                log_warn("cannot ask for checkpoint %.8s to be removed", name);
}

/* ---- restore ------------------------------------------------------------------- */

int kept_copy(const struct kernel_kept *from, struct kept_copy *c)
{
        c->id = strdup(from->id);
        c->kernelspec = strdup(from->kernelspec);
        c->owner = strdup(from->owner);
        c->key = strdup(from->key);
        c->ipc = strdup(from->ipc);
        c->env = NULL;
        if (c->id && c->kernelspec && c->owner && c->key && c->ipc &&
            jp_strv_dup(from->env, &c->env) == 0)
                return 0;
        kept_copy_clear(c);
        return -ENOMEM;
}

void kept_copy_clear(struct kept_copy *c)
{
        free(c->id);
        free(c->kernelspec);
        free(c->owner);
        free(c->key);
        free(c->ipc);
        jp_strv_free(c->env);
        memset(c, 0, sizeof(*c));
}

struct kernel_kept kept_view(const struct kept_copy *c)
{
        return (struct kernel_kept){.id = c->id,
                                    .kernelspec = c->kernelspec,
                                    .owner = c->owner,
                                    .key = c->key,
                                    .env = c->env,
                                    .pid = 0,
                                    .ipc = c->ipc};
}

struct restore_job {
        struct sandbox_waiter sandbox_wait;
        struct sandbox *sandbox;
        struct waiter *w;
        struct kept_copy kept;
        bool copy; /* a fork's: the kernel's id is derived from its sandbox's */
};

static void restore_job_free(struct restore_job *job)
{
        kept_copy_clear(&job->kept);
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
        struct kernel_kept kept = kept_view(&job->kept);
        struct waiter *w = job->w;
        char derived[JP_UUID_SIZE];
        struct kernel *k;
        int rc;

        if (error) {
                restore_fail(job, 500, error);
                return;
        }
        /* As the kernel-host named the copy's process. */
        if (job->copy) {
                jp_uuid_derive(sb->id, job->kept.id, derived);
                kept.id = derived;
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
        /* A copy's own key and seeds, not its source's (kernel_fork.c). */
        if (job->copy) {
                rc = kernel_rekey(k, NULL);
                if (rc < 0 && rc != -EOPNOTSUPP)
                        klog_warn(k->id, "the copy keeps its source's key: %s", strerror(-rc));
        }
        restore_job_free(job);
        kernel_when_ready(k, w);
}

int kernel_restore(const struct kernel_kept *kept, const struct hostmsg_limits *limits,
                   const char *checkpoint, bool copy, struct waiter *w)
{
        struct restore_job *job = calloc(1, sizeof(*job));
        int rc = -ENOMEM;

        if (!job)
                return -ENOMEM;
        job->w = w;
        if (kept_copy(kept, &job->kept) < 0)
                goto fail;
        job->copy = copy;
        rc = sandbox_new_restored(limits, checkpoint, copy, &job->sandbox);
        if (rc < 0)
                goto fail;
        job->sandbox_wait.ready = on_restored;
        sandbox_when_ready(job->sandbox, &job->sandbox_wait);
        return 0;
fail:
        restore_job_free(job);
        return rc;
}
