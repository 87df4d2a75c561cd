#include "autoconf.h"

#include "gateway/jupyter/snapshots_api.h"
#include "gateway/core/config.h"
#include "gateway/core/tenants.h"
#include "gateway/kernels/limits.h"
#include "gateway/kernels/pause.h"
#include "protocol/ids.h"
#include "protocol/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NAME_MAX_LEN 128
#define KIND         "kernel-snapshot" /* beside E2B's, in the same store */

struct ksnap {
        struct ksnap *next;
        char id[JP_UUID_SIZE];
        char owner[KEYS_NAME_MAX];
        char name[NAME_MAX_LEN];
        char kernel_id[JP_UUID_SIZE]; /* whose memory */
        char kernelspec[256];
        json_t *env; /* ["NAME=value", ...] */
        struct hostmsg_limits limits;
        char checkpoint[JP_UUID_SIZE];
        char key[65];
        char ipc[PATH_MAX];
        uint64_t bytes;
        time_t created;
        bool ready; /* its checkpoint is whole */
        bool gone;  /* deleted while it was made */
        struct http_request *pending; /* the request making it */
};

static struct ksnap *snaps;

static void snap_free(struct ksnap *p)
{
        json_decref(p->env);
        free(p);
}

static void snap_unlink(struct ksnap *p)
{
        for (struct ksnap **link = &snaps; *link; link = &(*link)->next) {
                if (*link == p) {
                        *link = p->next;
                        return;
                }
        }
}

static struct ksnap *snap_find(const char *id)
{
        for (struct ksnap *p = snaps; p; p = p->next) {
                if (strcmp(p->id, id) == 0 && !p->gone && tenants_may_reach(p->owner))
                        return p;
        }
        return NULL;
}

static json_t *snap_model(const struct ksnap *p)
{
        char created[32];

        strftime(created, sizeof(created), "%Y-%m-%dT%H:%M:%SZ", gmtime(&p->created));
        return json_pack("{s:s, s:s, s:s, s:s, s:s, s:b, s:I}", "id", p->id, "name", p->name,
                         "kernel_id", p->kernel_id, "kernelspec", p->kernelspec, "created",
                         created, "memory_kept", true, "size_bytes", (json_int_t)p->bytes);
}

static json_t *snap_meta(const struct ksnap *p)
{
        return json_pack("{s:i, s:s, s:s, s:s, s:s, s:s, s:s, s:O, s:o, s:s, s:s, s:s, s:I, s:I}",
                         "version", 1, "kind", KIND, "id", p->id, "owner", p->owner, "name",
                         p->name, "kernel", p->kernel_id, "kernelspec", p->kernelspec, "env",
                         p->env, "limits", limits_record(&p->limits),
                         "checkpoint", p->checkpoint, "key", p->key, "ipc", p->ipc,
                         "checkpointBytes", (json_int_t)p->bytes, "created",
                         (json_int_t)p->created);
}

/* Removes p and what it keeps on disk. */
static void snap_remove(struct ksnap *p)
{
        snap_unlink(p);
        pause_forget_in(PAUSE_SNAPSHOTS, p->id);
        kernel_checkpoint_forget(p->checkpoint);
        snap_free(p);
}

/* ---- kept across restarts ---------------------------------------------------- */

static bool take_string(json_t *meta, const char *key, char *out, size_t size)
{
        const char *v = json_string_value(json_object_get(meta, key));

        return v && (size_t)snprintf(out, size, "%s", v) < size;
}

static void on_found(void *ctx, const char *id, json_t *meta)
{
        json_t *lim = json_object_get(meta, "limits");
        struct ksnap *p;

        (void)ctx;
        if (strcmp(json_string_value(json_object_get(meta, "kind")) ?: "", KIND) != 0)
                return; /* E2B's */
        p = calloc(1, sizeof(*p));
        if (!p)
                return;
        if (!take_string(meta, "id", p->id, sizeof(p->id)) || strcmp(p->id, id) != 0 ||
            !take_string(meta, "owner", p->owner, sizeof(p->owner)) ||
            !take_string(meta, "name", p->name, sizeof(p->name)) ||
            !take_string(meta, "kernel", p->kernel_id, sizeof(p->kernel_id)) ||
            !take_string(meta, "kernelspec", p->kernelspec, sizeof(p->kernelspec)) ||
            !take_string(meta, "checkpoint", p->checkpoint, sizeof(p->checkpoint)) ||
            !jp_uuid_valid(p->checkpoint, strlen(p->checkpoint)) ||
            !take_string(meta, "key", p->key, sizeof(p->key)) ||
            !take_string(meta, "ipc", p->ipc, sizeof(p->ipc)) || !json_is_object(lim) ||
            !json_is_array(json_object_get(meta, "env"))) {
                log_warn("kernel snapshot %s: its meta.json is not one's; left as it is", id);
                free(p);
                return;
        }
        p->env = json_incref(json_object_get(meta, "env"));
        limits_from_record(lim, &p->limits);
        p->bytes = (uint64_t)json_integer_value(json_object_get(meta, "checkpointBytes"));
        p->created = (time_t)json_integer_value(json_object_get(meta, "created"));
        p->ready = true;
        p->next = snaps;
        snaps = p;
}

void jupyter_snapshots_load(void)
{
        if (pause_enabled())
                pause_load_all_in(PAUSE_SNAPSHOTS, on_found, NULL);
}

/* ---- making one ---------------------------------------------------------------- */

static void making_gone(struct http_request *r)
{
        struct ksnap *p = r->ctx;

        if (p)
                p->pending = NULL;
}

static void on_checkpointed(void *ctx, int status, const char *message, uint64_t bytes)
{
        struct ksnap *p = ctx;
        struct http_request *r = p->pending;
        json_t *meta;

        if (r) {
                r->ctx = NULL;
                r->cleanup = NULL;
        }
        p->pending = NULL;
        if (status == 0 && !p->gone) {
                p->bytes = bytes;
                meta = snap_meta(p);
                status = meta ? pause_write_meta_in(PAUSE_SNAPSHOTS, p->id, meta) : -ENOMEM;
                json_decref(meta);
                message = status ? "cannot write its record" : NULL;
        }
        if (status || p->gone) {
                log_warn("kernel snapshot %s of %s: %s", p->id, p->kernel_id,
                         p->gone ? "deleted while it was made" : message ? message : "failed");
                if (r)
                        http_reply_error(r,
                                         p->gone             ? 410
                                         : status == -EFBIG  ? 507
                                         : status == -EDQUOT ? 429
                                                             : 500,
                                         "The snapshot could not be made, the kernel runs on: %s",
                                         p->gone ? "it was deleted" : message ?: strerror(-status));
                snap_remove(p);
                return;
        }
        p->ready = true;
        log_info("kernel snapshot %s of %s: %llu bytes", p->id, p->kernel_id,
                 (unsigned long long)p->bytes);
        if (r) {
                snprintf(r->location, sizeof(r->location), "%sapi/snapshots/%s",
                         config_get()->base_url, p->id);
                http_reply_json(r, 201, snap_model(p));
        }
}

static bool name_ok(const char *name)
{
        size_t n = strlen(name);

        if (n == 0 || n >= NAME_MAX_LEN)
                return false;
        for (size_t i = 0; i < n; i++) {
                if (!(name[i] >= 0x20 && name[i] < 0x7f))
                        return false;
        }
        return true;
}

void jupyter_kernel_snapshot(struct http_request *r, struct kernel *k)
{
        json_t *body = http_parse_body(r);
        const char *name = json_string_value(json_object_get(body, "name"));
        const char *why = kernel_checkpoint_refusal(k);
        struct ksnap *p = NULL;
        int rc;

        if (!body)
                return;
        if (json_object_get(body, "name") && (!name || !name_ok(name))) {
                http_reply_error(r, 400, "name: 1 to %d printable characters", NAME_MAX_LEN - 1);
        } else if (!pause_enabled()) {
                http_reply_error(r, 400, "Snapshots need a --state-dir");
        } else if (k->phase != KERNEL_READY) {
                http_reply_error(r, 409, "Kernel is %s, not running", k->execution_state);
        } else if (why || !kernel_reported_ipc(k)) {
                http_reply_error(r, 400, "Kernel cannot be snapshotted: %s",
                                 why ? why : "its sockets cannot be named");
        } else if (!(p = calloc(1, sizeof(*p))) || jp_uuid4(p->id) < 0 ||
                   jp_uuid4(p->checkpoint) < 0 || !(p->env = jp_strv_to_json(k->env))) {
                http_reply_error(r, 500, "Out of memory");
        } else {
                snprintf(p->owner, sizeof(p->owner), "%s", k->owner);
                snprintf(p->name, sizeof(p->name), "%s", name ? name : "");
                snprintf(p->kernel_id, sizeof(p->kernel_id), "%s", k->id);
                snprintf(p->kernelspec, sizeof(p->kernelspec), "%s", k->spec->name);
                snprintf(p->key, sizeof(p->key), "%s", k->key);
                snprintf(p->ipc, sizeof(p->ipc), "%s", kernel_reported_ipc(k));
                p->limits = k->limits;
                p->created = time(NULL);
                rc = kernels_checkpoint(k->sandbox, k->owner, p->id, p->checkpoint, false,
                                        on_checkpointed, p);
                if (rc == 0) {
                        p->pending = r;
                        r->ctx = p;
                        r->cleanup = making_gone;
                        p->next = snaps;
                        snaps = p;
                        p = NULL;
                } else {
                        http_reply_error(r,
                                         rc == -EFBIG    ? 507
                                         : rc == -EDQUOT ? 429
                                                         : 500,
                                         "Kernel cannot be snapshotted: %s",
                                         kernels_checkpoint_why(rc));
                }
        }
        if (p)
                snap_free(p);
        json_decref(body);
}

/* ---- kernels from one ----------------------------------------------------------- */

static void on_started(struct waiter *w, void *subject, int status, const char *message)
{
        struct http_request *r = lws_container_of(w, struct http_request, waiter);
        struct kernel *k = subject;

        if (status || !k) {
                http_reply_error(r, status ? status : 500, "The kernel could not start from "
                                 "the snapshot: %s", message ? message : "it failed");
                return;
        }
        snprintf(r->location, sizeof(r->location), "%sapi/kernels/%s", config_get()->base_url,
                 k->id);
        http_reply_json(r, 201, kernel_model(k));
}

bool jupyter_kernel_from_snapshot(struct http_request *r, json_t *body)
{
        json_t *id = json_object_get(body, "snapshot"), *why = NULL;
        const struct config *cfg = config_get();
        struct ksnap *p;
        char **env;
        int rc;

        if (!id)
                return false;
        p = json_is_string(id) ? snap_find(json_string_value(id)) : NULL;
        if (!p) {
                http_reply_error(r, 404, "No such snapshot: %.64s",
                                 json_is_string(id) ? json_string_value(id) : "(not a string)");
                return true;
        }
        if (!p->ready) {
                http_reply_error(r, 409, "Snapshot %s is still being made", p->id);
                return true;
        }
        if (kernels_count() >= (size_t)cfg->max_kernels) {
                http_reply_error(r, 429, "--max-kernels (%lld) reached",
                                 (long long)cfg->max_kernels);
                return true;
        }
        if (kernels_quota_check(&p->limits, NULL, &why) < 0) {
                http_reply_json(r, 429, why);
                return true;
        }
        rc = jp_strv_from_json(p->env, &env);
        if (rc == 0) {
                const struct kernel_kept kept = {.id = p->kernel_id,
                                                 .kernelspec = p->kernelspec,
                                                 .owner = p->owner,
                                                 .key = p->key,
                                                 .env = env,
                                                 .pid = 0,
                                                 .ipc = p->ipc};

                r->waiter.done = on_started;
                rc = kernel_restore(&kept, &p->limits, p->checkpoint, true, &r->waiter);
        }
        jp_strv_free(env);
        if (rc < 0)
                http_reply_error(r, 500, "The kernel could not start from the snapshot: %s",
                                 strerror(-rc));
        return true;
}

/* ---- the list, one, deleting ------------------------------------------------------ */

void jupyter_snapshots(struct http_request *r, const char *id)
{
        struct ksnap *p = id ? snap_find(id) : NULL;
        json_t *list;

        if (!id) {
                if (r->method != HTTP_GET) {
                        http_reply_error(r, 405, "Use GET on /api/snapshots");
                        return;
                }
                list = json_array();
                for (p = snaps; list && p; p = p->next) {
                        if (p->ready && !p->gone && tenants_may_reach(p->owner))
                                json_array_append_new(list, snap_model(p));
                }
                http_reply_json(r, 200, list);
                return;
        }
        if (!p) {
                http_reply_error(r, 404, "No such snapshot: %.64s", id);
        } else if (r->method == HTTP_GET) {
                http_reply_json(r, 200, snap_model(p));
        } else if (r->method == HTTP_DELETE) {
                if (p->ready)
                        snap_remove(p);
                else
                        p->gone = true; /* on_checkpointed removes it */
                http_reply_empty(r, 204);
        } else {
                http_reply_error(r, 405, "Use GET or DELETE on a snapshot");
        }
}
