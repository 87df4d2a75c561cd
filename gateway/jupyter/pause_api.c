#include "autoconf.h"

#include "gateway/jupyter/pause_api.h"
#include "gateway/kernels/kernels.h"
#include "gateway/core/loop.h"
#include "gateway/kernels/limits.h"
#include "gateway/kernels/pause.h"
#include "gateway/core/tenants.h"
#include "protocol/fleetid.h"
#include "protocol/ids.h"
#include "protocol/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum paused_phase { PAUSED_SAVING, PAUSED_STOPPING, PAUSED, PAUSED_RESUMING };

struct paused_kernel {
        struct paused_kernel *next;
        char id[JP_UUID_SIZE];
        char owner[KEYS_NAME_MAX];
        char spec_name[256];
        json_t *env; /* ["NAME=value", ...] */
        struct hostmsg_limits limits;
        char last_activity[JP_TIMESTAMP_SIZE];
        enum paused_phase phase;
        struct http_request *pending; /* answered when the phase ends */
        struct waiter waiter;         /* the kernel's end (pause) or ready (resume) */
        double started;
        /* The memory was checkpointed (kernel_checkpoint): resume restores
         * it. Else only the home's files were kept, and why. */
        bool memory;
        char checkpoint[JP_UUID_SIZE];
        char key[65];
        char ipc[PATH_MAX];
        uint64_t checkpoint_bytes; /* what it takes on disk */
        char notice[HOSTMSG_ERROR_SIZE + 128];
};

static struct paused_kernel *paused;

static struct paused_kernel *find(const char *id)
{
        for (struct paused_kernel *p = paused; p; p = p->next) {
                if (strcmp(p->id, id) == 0)
                        return p;
        }
        return NULL;
}

static void paused_free(struct paused_kernel *p)
{
        for (struct paused_kernel **link = &paused; *link; link = &(*link)->next) {
                if (*link == p) {
                        *link = p->next;
                        break;
                }
        }
        if (p->waiter.on)
                waiter_cancel(&p->waiter);
        json_decref(p->env);
        free(p);
}

/* What a pause that kept files only says, with why memory was not kept. */
static void files_notice(struct paused_kernel *p, const char *why)
{
        snprintf(p->notice, sizeof(p->notice), "%s%s%s", PAUSE_MEMORY_NOTICE, why ? ": " : "",
                 why ? why : "");
}

/* The paused state in a model or record. */
static json_t *paused_state(const struct paused_kernel *p)
{
        return p->memory ? json_pack("{s:b}", "memory_kept", true)
                         : json_pack("{s:b, s:s}", "memory_kept", false, "notice", p->notice);
}

static void pending_forget(struct http_request *r)
{
        struct paused_kernel *p = r->ctx;

        if (p && p->pending == r)
                p->pending = NULL;
        r->ctx = NULL;
}

static void pending_set(struct paused_kernel *p, struct http_request *r)
{
        p->pending = r;
        r->ctx = p;
        r->cleanup = pending_forget;
}

static struct http_request *pending_take(struct paused_kernel *p)
{
        struct http_request *r = p->pending;

        p->pending = NULL;
        if (r) {
                r->ctx = NULL;
                r->cleanup = NULL;
        }
        return r;
}

static json_t *paused_model(const struct paused_kernel *p)
{
        return json_pack("{s:s, s:s, s:s, s:s, s:i, s:o}", "id", p->id, "name", p->spec_name,
                         "last_activity", p->last_activity, "execution_state",
                         p->phase == PAUSED_RESUMING ? "resuming" : "paused", "connections", 0,
                         "paused", paused_state(p));
}

static json_t *paused_meta(const struct paused_kernel *p)
{
        json_t *meta = json_pack("{s:i, s:s, s:s, s:s, s:s, s:O, s:o, s:s, s:b, s:s}", "version", 1,
                                 "kind", "kernel", "id", p->id, "owner", p->owner, "kernelspec",
                                 p->spec_name, "env", p->env, "limits", limits_record(&p->limits),
                                 "last_activity", p->last_activity, "memoryKept", p->memory,
                                 "notice", p->memory ? "" : p->notice);

        /* A checkpoint's: what taking the restored kernel over needs. The
         * record is the gateway's own, 0600 in its state directory. */
        if (meta && p->memory)
                json_object_update_new(meta, json_pack("{s:s, s:s, s:s, s:I}", "checkpoint",
                                                       p->checkpoint, "key", p->key, "ipc", p->ipc,
                                                       "checkpointBytes",
                                                       (json_int_t)p->checkpoint_bytes));
        return meta;
}

/* ---- pause ----------------------------------------------------------------- */

static void on_stopped(struct waiter *w, void *subject, int status, const char *message)
{
        struct kernel *k = subject;
        struct paused_kernel *p = lws_container_of(w, struct paused_kernel, waiter);
        struct http_request *r = pending_take(p);

        (void)k;
        (void)status;
        (void)message;
        p->phase = PAUSED;
        log_info("[%s] paused in %.3f s (%s)", fleetid_short(p->id).s, loop_now() - p->started,
                 p->memory ? "memory kept" : p->notice);
        if (r)
                http_reply_json(r, 200, paused_model(p));
}

/* The kernel's memory or files are saved (status 0), or not: recorded
 * and the kernel stopped, or the pause undone. */
static void on_saved_as(struct paused_kernel *p, struct kernel *k, int status, const char *message)
{
        struct http_request *r;
        json_t *meta;

        if (!k) {
                message = "the kernel ended while its files were saved";
                status = -ESRCH;
        }
        if (status == 0) {
                meta = paused_meta(p);
                status = meta ? pause_write_meta(p->id, meta) : -ENOMEM;
                json_decref(meta);
                message = status ? "cannot write its record" : NULL;
        }
        if (status) {
                /* Nothing is lost: the kernel runs on as it was. */
                log_error("[%s] pause failed: %s", p->id, message ? message : "");
                pause_forget(fleetid_short(p->id).s);
                r = pending_take(p);
                if (r)
                        http_reply_error(r, status == -EFBIG ? 507 : 500,
                                         "Pause failed, the kernel keeps running: %s",
                                         message && message[0] ? message : strerror(-status));
                if (p->memory)
                        kernel_checkpoint_forget(p->checkpoint);
                paused_free(p);
                return;
        }
        p->phase = PAUSED_STOPPING;
        p->waiter.done = on_stopped;
        kernel_shutdown(k, &p->waiter);
}

static void on_saved(void *ctx, int status, const char *message, uint64_t bytes)
{
        char *id = ctx;
        struct paused_kernel *p = find(id);

        if (p && p->phase == PAUSED_SAVING) {
                if (status == 0)
                        log_info("[%s] %llu bytes of files saved", fleetid_short(p->id).s,
                                 (unsigned long long)bytes);
                on_saved_as(p, kernel_find_any(id), status, message);
        }
        free(id);
}

static void on_checkpointed(void *ctx, int status, const char *message, uint64_t bytes)
{
        char *id = ctx;
        struct paused_kernel *p = find(id);
        struct kernel *k = kernel_find_any(id);

        if (p && p->phase == PAUSED_SAVING && status == 0)
                p->checkpoint_bytes = bytes;
        if (p && p->phase == PAUSED_SAVING && k && (status == -EOPNOTSUPP || status == -EFBIG) &&
            !k->sandbox->network.enabled) {
                /* One the kernel-host cannot take (a template's, a zygote's
                 * kernel...), or past its room: its files, as without
                 * CRIU, saying why. */
                p->memory = false;
                files_notice(p, message);
                status = pause_save_home(k->sandbox, k->id, k->owner, on_saved, id);
                if (status == 0)
                        return;
        }
        free(id);
        if (p && p->phase == PAUSED_SAVING)
                on_saved_as(p, k, status, message);
}

static void pause_kernel(struct http_request *r, struct kernel *k)
{
        struct paused_kernel *p = NULL;
        const char *why;
        char *id = NULL;
        int rc;

        if (!pause_enabled()) {
                http_reply_error(r, 400, "Pause is not enabled: this Glovebox has no --state-dir");
                return;
        }
        if (k->phase != KERNEL_READY) {
                http_reply_error(r, 409, "Kernel is %s, not running: it cannot be paused",
                                 k->execution_state);
                return;
        }
        if (!k->sandbox || !k->owns_sandbox) {
                http_reply_error(r, 409,
                                 !k->sandbox ? "Kernel has no sandbox (--sandbox none): its "
                                               "files cannot be saved"
                                             : "Kernel's sandbox is an E2B sandbox's: pause that "
                                               "(POST /e2b/sandboxes/{id}/pause)");
                return;
        }
        why = kernel_checkpoint_refusal(k);
        if (!why && !kernel_reported_ipc(k))
                why = "the kernel's sockets cannot be named";
        /* Its files alone would come back without its egress. */
        if (why && k->sandbox->network.enabled) {
                http_reply_error(r, 400,
                                 "A kernel with network egress is paused only with its memory, "
                                 "and this one's cannot be kept: %s",
                                 why);
                return;
        }
        p = calloc(1, sizeof(*p));
        id = strdup(k->id);
        if (!p || !id || !(p->env = jp_strv_to_json(k->env))) {
                rc = -ENOMEM;
                goto fail;
        }
        snprintf(p->id, sizeof(p->id), "%s", k->id);
        snprintf(p->owner, sizeof(p->owner), "%s", k->owner);
        snprintf(p->spec_name, sizeof(p->spec_name), "%s", k->spec->name);
        p->limits = k->limits;
        jp_timestamp_format(&k->last_activity, p->last_activity);
        /* The memory when a checkpoint can take it, else the files. */
        if (!why && jp_uuid4(p->checkpoint) == 0) {
                p->memory = true;
                snprintf(p->key, sizeof(p->key), "%s", k->key);
                snprintf(p->ipc, sizeof(p->ipc), "%s", kernel_reported_ipc(k));
                rc = kernel_checkpoint(k, p->checkpoint, on_checkpointed, id);
                if ((rc == -EFBIG || rc == -EDQUOT) && !k->sandbox->network.enabled) {
                        /* The files may still fit. */
                        p->memory = false;
                        files_notice(p, kernels_checkpoint_why(rc));
                        rc = pause_save_home(k->sandbox, k->id, k->owner, on_saved, id);
                }
        } else {
                files_notice(p, why ? why : "no checkpoint id could be made");
                rc = pause_save_home(k->sandbox, k->id, k->owner, on_saved, id);
        }
        if (rc < 0)
                goto fail;
        p->phase = PAUSED_SAVING;
        p->started = loop_now();
        p->next = paused;
        paused = p;
        pending_set(p, r);
        return;
fail:
        free(id);
        if (p)
                json_decref(p->env);
        free(p);
        if (rc == -EDQUOT)
                http_reply_error(r, 429,
                                 "Cannot pause the kernel: this key's paused kernels and "
                                 "sandboxes hold all they may (--pause-quota-mb)");
        else if (rc == -EFBIG) /* a kernel with egress: no files-only pause */
                http_reply_error(r, 507, "Cannot pause the kernel: %s", kernels_checkpoint_why(rc));
        else
                http_reply_error(r, 500, "Cannot pause the kernel: %s", strerror(-rc));
}

/* ---- resume ---------------------------------------------------------------- */

static void resume_failed(struct paused_kernel *p, const char *message)
{
        struct http_request *r = pending_take(p);
        struct kernel *k = kernel_find_any(p->id);

        log_error("[%s] resume failed: %s", fleetid_short(p->id).s, message);
        if (p->waiter.on)
                waiter_cancel(&p->waiter);
        if (k)
                kernel_shutdown(k, NULL);
        p->phase = PAUSED;
        if (r)
                http_reply_error(r, 500, "Resume failed, the kernel stays paused: %s", message);
}

static void on_restored(void *ctx, int status, const char *message, uint64_t bytes)
{
        char *id = ctx;
        struct paused_kernel *p = find(id);
        struct kernel *k = kernel_find_any(id);
        struct http_request *r;

        free(id);
        if (!p || p->phase != PAUSED_RESUMING)
                return;
        if (status || !k) {
                resume_failed(p, message ? message : "the kernel ended while resuming");
                return;
        }
        log_info("[%s] resumed in %.3f s (%llu bytes of files)", fleetid_short(p->id).s,
                 loop_now() - p->started, (unsigned long long)bytes);
        pause_forget(p->id);
        r = pending_take(p);
        paused_free(p);
        if (r)
                http_reply_json(r, 200, kernel_model(k));
}

static void on_resumed_ready(struct waiter *w, void *subject, int status, const char *message)
{
        struct kernel *k = subject;
        struct paused_kernel *p = lws_container_of(w, struct paused_kernel, waiter);
        char *id;
        int rc;

        if (status || !k->sandbox) {
                resume_failed(p, message ? message : "the kernel did not start");
                return;
        }
        id = strdup(p->id);
        rc = id ? pause_restore_home(k->sandbox, p->id, on_restored, id) : -ENOMEM;
        if (rc < 0) {
                free(id);
                resume_failed(p, strerror(-rc));
        }
}

static void on_memory_resumed(struct waiter *w, void *subject, int status, const char *message)
{
        struct kernel *k = subject;
        struct paused_kernel *p = lws_container_of(w, struct paused_kernel, waiter);
        struct http_request *r;

        if (status || !k) {
                resume_failed(p, message ? message : "the kernel did not come back");
                return;
        }
        log_info("[%s] resumed with its memory in %.3f s", fleetid_short(p->id).s,
                 loop_now() - p->started);
        kernel_checkpoint_forget(p->checkpoint);
        pause_forget(p->id);
        r = pending_take(p);
        paused_free(p);
        if (r)
                http_reply_json(r, 200, kernel_model(k));
}

static void resume_memory(struct http_request *r, struct paused_kernel *p, char **env)
{
        const struct kernel_kept kept = {.id = p->id,
                                         .kernelspec = p->spec_name,
                                         .owner = p->owner,
                                         .key = p->key,
                                         .env = env,
                                         .pid = 0,
                                         .ipc = p->ipc};
        int rc;

        p->waiter.done = on_memory_resumed;
        rc = kernel_restore(&kept, &p->limits, p->checkpoint, false, &p->waiter);
        if (rc < 0) {
                http_reply_error(r, 500, "Cannot resume the kernel: %s", strerror(-rc));
                return;
        }
        p->phase = PAUSED_RESUMING;
        p->started = loop_now();
        pending_set(p, r);
}

static void resume_kernel(struct http_request *r, struct paused_kernel *p)
{
        const struct jp_kernelspec *spec = jp_kernelspec_find(kernels_specs(), p->spec_name);
        struct tenant_caller owner = {.admin = false};
        struct tenant_scope saved;
        char **env = NULL;
        struct kernel *k;
        int rc = -ENOMEM;

        if (p->phase != PAUSED) {
                http_reply_error(r, 409, "Kernel is being %s",
                                 p->phase == PAUSED_RESUMING ? "resumed" : "paused");
                return;
        }
        if (!spec) {
                http_reply_error(r, 500,
                                 "Kernelspec %s is no longer served: the kernel stays "
                                 "paused",
                                 p->spec_name);
                return;
        }
        if (!tenants_exists(p->owner)) {
                http_reply_error(r, 403, "The key that started the kernel was removed");
                return;
        }
        rc = jp_strv_from_json(p->env, &env);
        if (rc < 0)
                goto out;
        if (p->memory) {
                resume_memory(r, p, env);
                goto out_quiet;
        }
        /* Its kernel and quota are its owner's, whoever resumes it. */
        tenants_scope_enter(&saved);
        snprintf(owner.name, sizeof(owner.name), "%s", p->owner);
        if (!config_get()->no_auth)
                tenants_set_caller(&owner);
        else
                tenants_scope_restore(&saved);
        p->waiter.done = on_resumed_ready;
        rc = kernel_start_as(spec, env, &p->limits, p->id, &p->waiter, &k);
        tenants_scope_restore(&saved);
        if (rc == 0) {
                p->phase = PAUSED_RESUMING;
                p->started = loop_now();
                pending_set(p, r);
        }
out:
        if (rc == -EAGAIN || rc == -EDQUOT)
                http_reply_error(r, 429, "Cannot resume the kernel: %s",
                                 rc == -EAGAIN ? "too many kernels"
                                               : "the quota of its key is reached");
        else if (rc < 0)
                http_reply_error(r, 500, "Cannot resume the kernel: %s", strerror(-rc));
out_quiet:
        jp_strv_free(env);
}

/* ---- routes ---------------------------------------------------------------- */

bool kernel_pause_route(struct http_request *r, const char *id, const char *action)
{
        struct paused_kernel *p = find(id);
        struct kernel *k;

        if (p && !tenants_may_reach(p->owner))
                p = NULL;
        if (p && p->phase == PAUSED_SAVING)
                p = NULL; /* still a kernel while its files are saved */
        if (action && strcmp(action, "pause") != 0 && strcmp(action, "resume") != 0 && !p)
                return false;
        if (action && (strcmp(action, "pause") == 0 || strcmp(action, "resume") == 0) &&
            r->method != HTTP_POST) {
                http_reply_error(r, 405, "Use POST to %s a kernel", action);
                return true;
        }
        if (!p) {
                if (!action)
                        return false;
                k = kernel_find(id);
                if (!k) {
                        http_reply_error(r, 404, "Kernel does not exist: %.64s", id);
                } else if (strcmp(action, "resume") == 0) {
                        http_reply_error(r, 409, "Kernel is not paused (%s)",
                                         find(id) ? "being paused" : k->execution_state);
                } else if (find(id)) {
                        http_reply_error(r, 409, "Kernel is being paused");
                } else {
                        pause_kernel(r, k);
                }
                return true;
        }
        if (!action && r->method == HTTP_GET) {
                http_reply_json(r, 200, paused_model(p));
        } else if (!action && r->method == HTTP_DELETE) {
                if (p->phase != PAUSED) {
                        http_reply_error(r, 409, "Kernel is being %s; try again",
                                         p->phase == PAUSED_RESUMING ? "resumed" : "paused");
                        return true;
                }
                pause_forget(p->id);
                if (p->memory)
                        kernel_checkpoint_forget(p->checkpoint);
                log_info("[%s] paused kernel deleted", fleetid_short(p->id).s);
                paused_free(p);
                http_reply_empty(r, 204);
        } else if (!action) {
                http_reply_error(r, 405, "Use GET or DELETE on a kernel");
        } else if (strcmp(action, "resume") == 0) {
                resume_kernel(r, p);
        } else if (strcmp(action, "pause") == 0) {
                http_reply_error(r, 409, "Kernel is already %s",
                                 p->phase == PAUSED ? "paused" : "being resumed");
        } else {
                http_reply_error(r, 409, "Kernel is paused: POST /api/kernels/%s/resume first",
                                 p->id);
        }
        return true;
}

json_t *kernel_pause_models(void)
{
        json_t *list = json_array();

        for (struct paused_kernel *p = paused; list && p; p = p->next) {
                if (p->phase != PAUSED_SAVING && tenants_may_reach(p->owner))
                        json_array_append_new(list, paused_model(p));
        }
        return list;
}

/* ---- at start and at the end ------------------------------------------------- */

static bool meta_copy(json_t *meta, const char *key, char *out, size_t size)
{
        const char *v = json_string_value(json_object_get(meta, key));

        if (!v || strlen(v) >= size)
                return false;
        memcpy(out, v, strlen(v) + 1);
        return true;
}

static void on_found(void *ctx, const char *id, json_t *meta)
{
        json_t *lim = json_object_get(meta, "limits");
        json_t *env = json_object_get(meta, "env");
        struct paused_kernel *p;
        int *count = ctx;
        size_t i;
        json_t *v;

        /* An E2B sandbox's (e2b/lifecycle.c) */
        if (strcmp(json_string_value(json_object_get(meta, "kind")) ?: "", "kernel") != 0)
                return;
        p = calloc(1, sizeof(*p));
        if (!p)
                return;
        if (!meta_copy(meta, "id", p->id, sizeof(p->id)) || strcmp(p->id, id) != 0 ||
            !meta_copy(meta, "owner", p->owner, sizeof(p->owner)) ||
            !meta_copy(meta, "kernelspec", p->spec_name, sizeof(p->spec_name)) ||
            !meta_copy(meta, "last_activity", p->last_activity, sizeof(p->last_activity)) ||
            !json_is_array(env) || json_array_size(env) > 1024 || !json_is_object(lim) ||
            find(id)) {
                log_warn("paused kernel %s: its meta.json is not a paused kernel's; left as it is",
                         id);
                free(p);
                return;
        }
        json_array_foreach(env, i, v) {
                if (!json_is_string(v)) {
                        log_warn("paused kernel %s: its env is not strings; left as it is", id);
                        free(p);
                        return;
                }
        }
        p->memory = json_is_true(json_object_get(meta, "memoryKept"));
        if (p->memory && (!meta_copy(meta, "checkpoint", p->checkpoint, sizeof(p->checkpoint)) ||
                          !meta_copy(meta, "key", p->key, sizeof(p->key)) ||
                          !meta_copy(meta, "ipc", p->ipc, sizeof(p->ipc)))) {
                log_warn("paused kernel %s: its checkpoint is not named; left as it is", id);
                free(p);
                return;
        }
        if (!p->memory)
                meta_copy(meta, "notice", p->notice, sizeof(p->notice));
        p->env = json_incref(env);
        limits_from_record(lim, &p->limits);
        p->phase = PAUSED;
        p->next = paused;
        paused = p;
        (*count)++;
}

void kernel_pause_load(void)
{
        int count = 0;

        pause_load_all(on_found, &count);
        if (count)
                log_info("%d paused kernel%s found in the state directory", count,
                         count == 1 ? "" : "s");
}

void kernel_pause_shutdown(void)
{
        while (paused) {
                struct paused_kernel *p = paused;
                struct http_request *r = pending_take(p);

                if (r)
                        http_reply_error(r, 503, "The gateway is shutting down");
                /* Saved but not yet recorded as paused: nothing to keep. */
                if (p->phase == PAUSED_SAVING)
                        pause_forget(p->id);
                paused_free(p);
        }
}

bool jupyter_kernel_paused(struct http_request *r, const char *id, const char *action)
{
        return kernel_pause_route(r, id, action);
}
