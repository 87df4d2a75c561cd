/* Forks of a kernel (kernels.h's kernel_fork): its sandbox is checkpointed
 * in place, the kernel running on with its id, and each copy is restored
 * beside it as a kernel of its own (kernel_restore's copy: a sandbox with
 * its own host ids, cgroup and files, the kernel under an id derived from
 * its sandbox's); a Python copy gets a key of its own and fresh random
 * seeds there (kernel_rekey, below), so that no two copies share a key or
 * draw the same numbers. */
#include "autoconf.h"

#include "gateway/kernels/kernels.h"
#include "gateway/kernels/kernel_private.h"
#include "gateway/kernels/run_env.h"
#include "gateway/kernels/specs.h"
#include "protocol/log.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Run silently in a fork, in a namespace of its own (nothing is left in
 * the user's): Python's and numpy's global generators seeded anew from
 * the system's entropy, the session's key, the connection file's, and the
 * copy's own variables (env, which travels as hex JSON). */
static const char REKEY_CODE[] = "exec(%s, {'get_ipython': get_ipython, 'key': %s, 'env': '%s'})\n";
static const char REKEY_BODY[] =
    "'import json, os, random, sys\\n"
    "os.environ.update(json.loads(bytes.fromhex(env)) if env else {})\\n"
    "random.seed()\\n"
    "np = sys.modules.get(\"numpy\")\\n"
    "if np is not None:\\n"
    "    try:\\n"
    "        np.random.seed()\\n"
    "    except Exception:\\n"
    "        pass\\n"
    "get_ipython().kernel.session.key = key\\n"
    "try:\\n"
    "    from ipykernel.kernelapp import IPKernelApp\\n"
    "    path = IPKernelApp.instance().abs_connection_file\\n"
    "    with open(path) as f:\\n"
    "        info = json.load(f)\\n"
    "    info[\"key\"] = key.decode()\\n"
    "    with open(path, \"w\") as f:\\n"
    "        json.dump(info, f)\\n"
    "except Exception:\\n"
    "    pass\\n'";

int kernel_rekey(struct kernel *k, json_t *env)
{
        char key[65], literal[80], msg_id[JP_UUID_SIZE + 8];
        struct jp_signer *signer = NULL;
        char *hex = NULL, *code = NULL;
        int rc;

        if (!specs_speaks(k->spec, "python"))
                return -EOPNOTSUPP;
        rc = jp_random_hex(key, 32);
        if (rc == 0)
                rc = jp_signer_new(key, strlen(key), &signer);
        if (rc < 0)
                return rc;
        snprintf(literal, sizeof(literal), "b'%s'", key);
        hex = run_env_json_hex(env);
        if (!hex || asprintf(&code, REKEY_CODE, REKEY_BODY, literal, hex) < 0)
                code = NULL;
        free(hex);
        /* Under the key it has now; it answers under the new one. */
        rc = code ? kernel_send_silent(k, code, NULL, msg_id) : -ENOMEM;
        free(code);
        if (rc < 0) {
                jp_signer_destroy(&signer);
                return rc;
        }
        jp_signer_destroy(&k->old_signer);
        k->old_signer = k->signer;
        k->signer = signer;
        snprintf(k->key, sizeof(k->key), "%s", key);
        return 0;
}

struct fork_copy {
        struct waiter w;
        struct fork_job *job;
        struct kernel_fork_result result;
        char error[HOSTMSG_ERROR_SIZE];
};

struct fork_job {
        char name[JP_UUID_SIZE]; /* the checkpoint */
        struct kept_copy kept;   /* the source, as its copies take it over */
        struct hostmsg_limits limits;
        unsigned count, pending;
        kernel_forked_fn done;
        void *ctx;
        struct fork_copy copies[];
};

static void job_free(struct fork_job *job)
{
        kept_copy_clear(&job->kept);
        free(job);
}

static void job_end(struct fork_job *job)
{
        struct kernel_fork_result results[KERNEL_FORK_MAX];

        kernel_checkpoint_forget(job->name);
        for (unsigned i = 0; i < job->count; i++)
                results[i] = job->copies[i].result;
        job->done(job->ctx, 0, NULL, results, job->count);
        job_free(job);
}

static void on_copy(struct waiter *w, void *subject, int status, const char *message)
{
        struct fork_copy *c = lws_container_of(w, struct fork_copy, w);
        struct kernel *k = subject;

        w->on = NULL;
        if (status || !k) {
                snprintf(c->error, sizeof(c->error), "%s", message ? message : "it did not start");
                c->result.error = c->error;
                if (k)
                        kernel_shutdown(k, NULL);
        } else {
                c->result.kernel = k;
        }
        if (--c->job->pending == 0)
                job_end(c->job);
}

static void on_checkpointed(void *ctx, int status, const char *message, uint64_t bytes)
{
        struct fork_job *job = ctx;
        const struct kernel_kept kept = kept_view(&job->kept);

        (void)bytes; /* the copies are what count, not the checkpoint */
        if (status) {
                job->done(job->ctx, status, message, NULL, 0);
                kernel_checkpoint_forget(job->name);
                job_free(job);
                return;
        }
        job->pending = job->count;
        for (unsigned i = 0; i < job->count; i++) {
                struct fork_copy *c = &job->copies[i];
                int rc;

                c->job = job;
                c->w.done = on_copy;
                rc = kernel_restore(&kept, &job->limits, job->name, true, &c->w);
                if (rc < 0) {
                        snprintf(c->error, sizeof(c->error), "cannot restore it: %s",
                                 strerror(-rc));
                        c->result.error = c->error;
                        if (--job->pending == 0)
                                job_end(job);
                }
        }
}

int kernel_fork(struct kernel *k, unsigned count, kernel_forked_fn done, void *ctx)
{
        const char *ipc = kernel_reported_ipc(k);
        struct fork_job *job;
        int rc;

        if (count < 1 || count > KERNEL_FORK_MAX)
                return -EINVAL;
        if (kernel_checkpoint_refusal(k) || !ipc)
                return -EOPNOTSUPP;
        job = calloc(1, sizeof(*job) + count * sizeof(job->copies[0]));
        if (!job)
                return -ENOMEM;
        job->count = count;
        job->done = done;
        job->ctx = ctx;
        job->limits = k->limits;
        {
                const struct kernel_kept source = {.id = k->id,
                                                   .kernelspec = k->spec->name,
                                                   .owner = k->owner,
                                                   .key = k->key,
                                                   .env = k->env,
                                                   .pid = 0,
                                                   .ipc = ipc};

                rc = -ENOMEM;
                if (kept_copy(&source, &job->kept) < 0 || jp_uuid4(job->name) < 0)
                        goto fail;
        }
        rc = kernels_checkpoint(k->sandbox, k->owner, k->id, job->name, false, on_checkpointed,
                                job);
        if (rc == 0)
                return 0;
fail:
        job_free(job);
        return rc;
}
