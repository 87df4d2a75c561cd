#include "autoconf.h"

#include "gateway/e2b/snapshots.h"
#include "gateway/e2b/e2b.h"
#include "gateway/e2b/e2b_internal.h"
#include "gateway/e2b/contexts.h"
#include "gateway/core/config.h"
#include "gateway/core/fleet.h"
#include "gateway/core/tenants.h"
#include "gateway/kernels/kernels.h"
#include "gateway/kernels/limits.h"
#include "gateway/kernels/pause.h"
#include "protocol/ids.h"
#include "protocol/kernelspec.h"
#include "protocol/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SNAPSHOT_ID_PREFIX "snap-"
#define SNAPSHOT_ID_SIZE   (sizeof(SNAPSHOT_ID_PREFIX) + 24) /* prefix, 24 hex, NUL */
#define SNAPSHOT_NAME_MAX  128
#define LIST_MAX           100 /* a page of the list, as E2B's */
#define FORK_MAX           32  /* forks one request may ask for */

struct snapshot {
        struct snapshot *next;
        char id[SNAPSHOT_ID_SIZE];
        char owner[KEYS_NAME_MAX];
        char sandbox_id[FLEETID_SANDBOX_SIZE]; /* whose files */
        char name[SNAPSHOT_NAME_MAX];          /* "" when none */
        char template_id[64];
        json_t *env;
        json_t *metadata;
        struct hostmsg_limits limits;
        char workdir[PATH_MAX];
        time_t created;
        bool ready;  /* its files are kept */
        bool hidden; /* a fork's own: neither listed nor usable by name */
        bool gone;   /* deleted while being made: forgotten when that ends */
        /* With the memory: the checkpoint new sandboxes are copies of, and
         * the contexts and commands it holds; "" and NULL for files only. */
        char checkpoint[JP_UUID_SIZE];
        json_t *contexts, *commands;
        uint64_t checkpoint_bytes;
};

static struct snapshot *snapshots; /* newest first */

static void snapshot_free(struct snapshot *p)
{
        json_decref(p->env);
        json_decref(p->metadata);
        json_decref(p->contexts);
        json_decref(p->commands);
        free(p);
}

static void snapshot_unlink(struct snapshot *p)
{
        for (struct snapshot **link = &snapshots; *link; link = &(*link)->next) {
                if (*link == p) {
                        *link = p->next;
                        return;
                }
        }
}

static void snapshot_remove(struct snapshot *p)
{
        snapshot_unlink(p);
        pause_forget_in(PAUSE_SNAPSHOTS, p->id);
        if (p->checkpoint[0])
                kernel_checkpoint_forget(p->checkpoint);
        snapshot_free(p);
}

static struct snapshot *snapshot_find(const char *id)
{
        for (struct snapshot *p = snapshots; p; p = p->next) {
                if (strcmp(p->id, id) == 0 && !p->gone)
                        return p;
        }
        return NULL;
}

/* What a listing shows, and a create answers. */
static json_t *snapshot_json(const struct snapshot *p)
{
        json_t *names = json_array();

        if (p->name[0])
                json_array_append_new(names, json_string(p->name));
        /* What it keeps, said wherever a snapshot shows (as a pause's is). */
        if (p->checkpoint[0])
                return json_pack("{s:s, s:o, s:s, s:{s:b}}", "snapshotID", p->id, "names", names,
                                 "sandboxID", p->sandbox_id, "glovebox", "memoryKept", true);
        return json_pack("{s:s, s:o, s:s, s:{s:b, s:s}}", "snapshotID", p->id, "names", names,
                         "sandboxID", p->sandbox_id, "glovebox", "memoryKept", false, "notice",
                         PAUSE_MEMORY_NOTICE);
}

static json_t *snapshot_meta(const struct snapshot *p)
{
        json_t *meta = json_pack(
            "{s:i, s:s, s:s, s:s, s:s, s:s, s:s, s:O, s:O, s:o, s:I, s:b}", "version", 1, "kind",
            "snapshot", "id", p->id, "owner", p->owner, "sandboxID", p->sandbox_id, "name", p->name,
            "templateID", p->template_id, "envVars", p->env, "metadata", p->metadata, "limits",
            limits_record(&p->limits), "created", (json_int_t)p->created, "hidden", p->hidden);

        if (meta && p->checkpoint[0])
                json_object_update_new(
                    meta, json_pack("{s:s, s:O, s:O, s:I}", "checkpoint", p->checkpoint,
                                    "contexts", p->contexts, "commands", p->commands,
                                    "checkpointBytes", (json_int_t)p->checkpoint_bytes));
        return meta;
}

static bool copy_string(json_t *meta, const char *key, char *out, size_t size)
{
        const char *v = json_string_value(json_object_get(meta, key));

        return v && (size_t)snprintf(out, size, "%s", v) < size;
}

static void on_found(void *ctx, const char *id, json_t *meta)
{
        json_t *lim = json_object_get(meta, "limits");
        struct snapshot *p = calloc(1, sizeof(*p));
        char why[256];

        (void)ctx;
        if (!p)
                return;
        /* A Jupyter kernel's (gateway/jupyter/snapshots_api.c). */
        if (strcmp(json_string_value(json_object_get(meta, "kind")) ?: "", "snapshot") != 0) {
                free(p);
                return;
        }
        if (!copy_string(meta, "id", p->id, sizeof(p->id)) || strcmp(p->id, id) != 0 ||
            !copy_string(meta, "owner", p->owner, sizeof(p->owner)) ||
            !copy_string(meta, "sandboxID", p->sandbox_id, sizeof(p->sandbox_id)) ||
            !copy_string(meta, "name", p->name, sizeof(p->name)) ||
            !copy_string(meta, "templateID", p->template_id, sizeof(p->template_id)) ||
            !json_is_object(lim) || !json_is_object(json_object_get(meta, "envVars")) ||
            e2b_env_vars_refusal(json_object_get(meta, "envVars"), why, sizeof(why)) ||
            !e2b_string_map(json_object_get(meta, "metadata"), 64)) {
                log_warn("snapshot %s: its meta.json is not a snapshot's; left as it is", id);
                free(p);
                return;
        }
        /* A fork's own outlives nothing: one left by a crash goes. */
        if (json_is_true(json_object_get(meta, "hidden"))) {
                pause_forget_in(PAUSE_SNAPSHOTS, id);
                free(p);
                return;
        }
        p->env = json_incref(json_object_get(meta, "envVars"));
        p->metadata = json_object_get(meta, "metadata")
                          ? json_incref(json_object_get(meta, "metadata"))
                          : json_object();
        limits_from_record(lim, &p->limits);
        p->created = (time_t)json_integer_value(json_object_get(meta, "created"));
        if (json_object_get(meta, "checkpoint")) {
                if (!copy_string(meta, "checkpoint", p->checkpoint, sizeof(p->checkpoint)) ||
                    !jp_uuid_valid(p->checkpoint, strlen(p->checkpoint)) ||
                    !json_is_array(json_object_get(meta, "contexts")) ||
                    !json_is_array(json_object_get(meta, "commands"))) {
                        log_warn("snapshot %s: its checkpoint is not named; left as it is", id);
                        snapshot_free(p);
                        return;
                }
                p->contexts = json_incref(json_object_get(meta, "contexts"));
                p->commands = json_incref(json_object_get(meta, "commands"));
                p->checkpoint_bytes =
                    (uint64_t)json_integer_value(json_object_get(meta, "checkpointBytes"));
        }
        p->ready = true;
        p->next = snapshots;
        snapshots = p;
}

void e2b_snapshots_load(void)
{
        pause_load_all_in(PAUSE_SNAPSHOTS, on_found, NULL);
}

/* ---- making one ------------------------------------------------------------ */

/* Who waits for a snapshot's files: the create_snapshot request, or a fork. */
struct making {
        struct snapshot *snapshot;
        struct http_request *r; /* create_snapshot's, until it goes away */
        struct fork_job *fork;  /* or a fork's */
};

struct fork_job {
        struct http_request *r; /* NULL once the client went away */
        struct snapshot *snapshot;
        double timeout;
        unsigned count, pending;
        json_t *results; /* one per fork, in order */
        char **ids;      /* the forks' sandbox ids, to find them again */
        /* With the memory: the checkpoint the forks are copies of, and
         * the source's contexts and commands as they were at it; snapshot
         * then describes the source only (no files, in no list). */
        char checkpoint[JP_UUID_SIZE];
        json_t *contexts, *commands;
};

static void fork_launch(struct fork_job *job);
static void fork_end(struct fork_job *job);

static void making_cleanup(struct http_request *r)
{
        struct making *m = r->ctx;

        if (m)
                m->r = NULL;
        r->ctx = NULL;
}

static void on_saved(void *ctx, int status, const char *message, uint64_t bytes)
{
        struct making *m = ctx;
        struct snapshot *p = m->snapshot;
        struct http_request *r = m->r;
        json_t *meta;

        if (r) {
                r->ctx = NULL;
                r->cleanup = NULL;
        }
        if (status == 0 && !p->gone) {
                meta = snapshot_meta(p);
                status = meta ? pause_write_meta_in(PAUSE_SNAPSHOTS, p->id, meta) : -ENOMEM;
                json_decref(meta);
                message = status ? "cannot write its record" : NULL;
        }
        if (status || p->gone) {
                log_warn("snapshot %s of sandbox %s: %s", p->id, p->sandbox_id,
                         p->gone   ? "deleted while it was made"
                         : message ? message
                                   : "failed");
                if (r && !p->gone)
                        e2b_reply_error(r,
                                        status == -EFBIG    ? 507
                                        : status == -EDQUOT ? 429
                                                            : 500,
                                        "the snapshot could not be made: %s",
                                        message ? message : strerror(-status));
                else if (r)
                        e2b_reply_error(r, 410, "the snapshot was deleted while it was made");
                if (m->fork) {
                        m->fork->snapshot = NULL;
                        for (unsigned i = 0; i < m->fork->count; i++)
                                json_array_append_new(
                                    m->fork->results,
                                    json_pack("{s:{s:i, s:s}}", "error", "code", 500, "message",
                                              message ? message
                                                      : "the sandbox's files could "
                                                        "not be kept"));
                        fork_end(m->fork);
                }
                snapshot_remove(p);
                free(m);
                return;
        }
        p->ready = true;
        log_info("snapshot %s of sandbox %s: %llu bytes of files", p->id, p->sandbox_id,
                 (unsigned long long)bytes);
        if (r)
                http_reply_json(r, 201, snapshot_json(p));
        if (m->fork)
                fork_launch(m->fork);
        free(m);
}

/* What a sandbox made from s starts with: its template, environment,
 * metadata, limits and working directory. NULL when out of memory. */
static struct snapshot *snapshot_new(struct e2b_sandbox *s, const char *name, bool hidden)
{
        struct snapshot *p = calloc(1, sizeof(*p));
        char hex[25];

        if (!p || jp_random_hex(hex, 12) < 0) {
                free(p);
                return NULL;
        }
        snprintf(p->id, sizeof(p->id), SNAPSHOT_ID_PREFIX "%s", hex);
        snprintf(p->owner, sizeof(p->owner), "%s", s->owner);
        snprintf(p->sandbox_id, sizeof(p->sandbox_id), "%s", s->id);
        snprintf(p->name, sizeof(p->name), "%s", name ? name : "");
        snprintf(p->template_id, sizeof(p->template_id), "%s", s->template_id);
        snprintf(p->workdir, sizeof(p->workdir), "%s", s->workdir);
        p->env = json_deep_copy(s->env);
        p->metadata = json_deep_copy(s->metadata);
        p->limits = s->limits;
        p->created = time(NULL);
        p->hidden = hidden;
        if (!p->env || !p->metadata) {
                snapshot_free(p);
                return NULL;
        }
        return p;
}

/* A new snapshot of running s's files; m hears when they are kept. */
static void memory_clear(struct snapshot *p)
{
        p->checkpoint[0] = '\0';
        json_decref(p->contexts);
        json_decref(p->commands);
        p->contexts = p->commands = NULL;
}

static void on_checkpointed(void *ctx, int status, const char *message, uint64_t bytes)
{
        struct making *m = ctx;
        struct snapshot *p = m->snapshot;
        struct e2b_sandbox *s;

        if (status == 0) {
                p->checkpoint_bytes = bytes;
                on_saved(m, 0, NULL, p->checkpoint_bytes);
                return;
        }
        /* One the kernel-host cannot take, or past its room: the files. */
        memory_clear(p);
        s = e2b_find_any(p->sandbox_id);
        if ((status == -EOPNOTSUPP || status == -EFBIG) && s && s->phase == E2B_RUNNING &&
            s->box && !s->box->network.enabled && !p->gone &&
            pause_save_home_in(PAUSE_SNAPSHOTS, s->box, p->id, s->owner, on_saved, m) == 0)
                return;
        on_saved(m, status, message, 0);
}

/* The memory too, where a checkpoint can take s: 0 and the checkpoint
 * runs (s runs on), or -errno (-EOPNOTSUPP, -EFBIG: the files only). */
static int snapshot_checkpoint(struct e2b_sandbox *s, struct snapshot *p, struct making *m)
{
        int rc;

        if (kernels_checkpoint_refusal(s->box))
                return -EOPNOTSUPP;
        p->contexts = e2b_contexts_record(s);
        p->commands = envd_commands_record(s);
        if (!p->contexts || !p->commands || jp_uuid4(p->checkpoint) < 0)
                rc = -ENOMEM;
        else
                rc = kernels_checkpoint(s->box, s->owner, p->id, p->checkpoint, false,
                                        on_checkpointed, m);
        if (rc < 0)
                memory_clear(p);
        return rc;
}

static int snapshot_make(struct e2b_sandbox *s, const char *name, bool hidden, struct making *m)
{
        struct snapshot *p = snapshot_new(s, name, hidden);
        int rc;

        if (!p)
                return -ENOMEM;
        m->snapshot = p;
        /* A fork's own is of the files only: a fork with the memory makes
         * no snapshot (fork_memory). */
        rc = hidden ? -EOPNOTSUPP : snapshot_checkpoint(s, p, m);
        /* Its files alone would start sandboxes without its egress. */
        if ((rc == -EOPNOTSUPP || rc == -EFBIG) && s->box->network.enabled)
                rc = -ENETUNREACH;
        if (rc == -EOPNOTSUPP || rc == -EFBIG)
                rc = pause_save_home_in(PAUSE_SNAPSHOTS, s->box, p->id, s->owner, on_saved, m);
        if (rc < 0) {
                pause_forget_in(PAUSE_SNAPSHOTS, p->id);
                snapshot_free(p);
                return rc;
        }
        p->next = snapshots;
        snapshots = p;
        return 0;
}

static bool snapshot_name_ok(const char *name)
{
        size_t n = strlen(name);

        if (n == 0 || n >= SNAPSHOT_NAME_MAX)
                return false;
        for (size_t i = 0; i < n; i++) {
                char c = name[i];

                if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      strchr("-_.:/", c)))
                        return false;
        }
        return true;
}

static void reply_refused(struct http_request *r, int rc)
{
        if (rc == -EDQUOT)
                e2b_reply_error(r, 429,
                                "snapshots: this key's paused sandboxes and snapshots hold all "
                                "they may (--pause-quota-mb)");
        else if (rc == -ENOTSUP)
                e2b_reply_error(r, 400, "snapshots need a --state-dir");
        else if (rc == -ENETUNREACH)
                e2b_reply_error(r, 400,
                                "a sandbox with network egress is snapshotted and forked only "
                                "with its memory, and this one's cannot be kept (see "
                                "docs/pause.md)");
        else
                e2b_reply_error(r, 500, "the snapshot could not be made: %s", strerror(-rc));
}

/* A snapshot needs a running sandbox and a --state-dir. false after
 * replying. */
static bool snapshot_allowed(struct e2b_sandbox *s, struct http_request *r)
{
        if (s->phase != E2B_RUNNING || !s->box) {
                e2b_reply_error(r, 409, "sandbox \"%s\" is %s", s->id,
                                s->phase == E2B_PAUSED ? "paused" : "being paused or resumed");
                return false;
        }
        if (!pause_enabled()) {
                e2b_reply_error(r, 400, "snapshots need a --state-dir");
                return false;
        }
        return true;
}

void e2b_snapshot_begin(struct e2b_sandbox *s, struct http_request *r)
{
        json_t *body = http_parse_body(r);
        const char *name;
        struct making *m;
        int rc;

        if (!body)
                return;
        name = json_string_value(json_object_get(body, "name"));
        if (json_object_get(body, "name") && (!name || !snapshot_name_ok(name))) {
                e2b_reply_error(r, 400,
                                "name: 1 to %d letters, digits and '-', '_', '.', ':' or '/'",
                                SNAPSHOT_NAME_MAX - 1);
        } else if (snapshot_allowed(s, r)) {
                m = calloc(1, sizeof(*m));
                rc = m ? snapshot_make(s, name, false, m) : -ENOMEM;
                if (rc < 0) {
                        free(m);
                        reply_refused(r, rc);
                } else {
                        m->r = r;
                        r->ctx = m;
                        r->cleanup = making_cleanup;
                }
        }
        json_decref(body);
}

/* ---- the list, deleting ----------------------------------------------------- */

static void list(struct http_request *r)
{
        char sandbox_id[FLEETID_SANDBOX_SIZE] = "", name[SNAPSHOT_NAME_MAX] = "", after[64] = "";
        char limit_text[16] = "", *end;
        struct snapshot *all[4096];
        long limit = LIST_MAX;
        size_t n = 0, start = 0;
        json_t *out = json_array();

        http_query_arg(r->wsi, "sandboxID", sandbox_id, sizeof(sandbox_id));
        http_query_arg(r->wsi, "name", name, sizeof(name));
        http_query_arg(r->wsi, "nextToken", after, sizeof(after));
        if (http_query_arg(r->wsi, "limit", limit_text, sizeof(limit_text)) == 0) {
                limit = strtol(limit_text, &end, 10);
                if (*end || limit < 1 || limit > LIST_MAX) {
                        json_decref(out);
                        e2b_reply_error(r, 400, "limit: a number from 1 to %d", LIST_MAX);
                        return;
                }
        }
        /* Oldest first, so that a page's next token stays good as new ones come. */
        for (struct snapshot *p = snapshots; p && n < sizeof(all) / sizeof(all[0]); p = p->next) {
                if (p->ready && !p->hidden && !p->gone && tenants_may_reach(p->owner) &&
                    (!sandbox_id[0] || strcmp(p->sandbox_id, sandbox_id) == 0) &&
                    (!name[0] || strcmp(p->name, name) == 0))
                        all[n++] = p;
        }
        for (size_t i = 0; i < n / 2; i++) {
                struct snapshot *t = all[i];

                all[i] = all[n - 1 - i];
                all[n - 1 - i] = t;
        }
        if (after[0]) {
                while (start < n && strcmp(all[start]->id, after) != 0)
                        start++;
                start = start < n ? start + 1 : n;
        }
        for (size_t i = start; i < n && i < start + (size_t)limit; i++)
                json_array_append_new(out, snapshot_json(all[i]));
        /* The last one shown: the next page begins after it. */
        if (start + (size_t)limit < n)
                snprintf(r->next_token, sizeof(r->next_token), "%s",
                         all[start + (size_t)limit - 1]->id);
        http_reply_json(r, 200, out);
}

bool e2b_snapshots_handle(struct http_request *r, const char *route)
{
        char id[64], rest[8];
        struct snapshot *p;

        if (strcmp(route, "snapshots") == 0) {
                if (r->method == HTTP_GET)
                        list(r);
                else
                        e2b_reply_error(r, 405, "use GET");
                return true;
        }
        /* E2B deletes a snapshot as the template it is. */
        if (sscanf(route, "templates/%63[^/]%7s", id, rest) != 1 || r->method != HTTP_DELETE)
                return false;
        p = snapshot_find(id);
        if (!p || p->hidden || !tenants_may_reach(p->owner))
                return false;
        if (p->ready)
                snapshot_remove(p);
        else
                p->gone = true; /* on_saved forgets it */
        http_reply_empty(r, 204);
        return true;
}

/* ---- sandboxes from a snapshot --------------------------------------------- */

/* A new sandbox of p's, paused until its resume takes p's files. */
static struct e2b_sandbox *sandbox_of(const struct snapshot *p, json_t *metadata, double lifetime)
{
        struct e2b_sandbox *s = calloc(1, sizeof(*s));

        if (!s || fleet_new_sandbox_id(s->id) < 0 || jp_random_hex(s->token, 32) < 0 ||
            jp_random_hex(s->traffic_token, 32) < 0) {
                free(s);
                return NULL;
        }
        snprintf(s->owner, sizeof(s->owner), "%s", p->owner);
        snprintf(s->template_id, sizeof(s->template_id), "%s", p->template_id);
        snprintf(s->workdir, sizeof(s->workdir), "%s", p->workdir);
        snprintf(s->from_snapshot, sizeof(s->from_snapshot), "%s", p->id);
        s->spec = e2b_template_spec(p->template_id);
        s->env = json_deep_copy(p->env);
        s->metadata = metadata ? json_incref(metadata) : json_deep_copy(p->metadata);
        s->limits = p->limits;
        s->lifetime = lifetime;
        s->end_at = time(NULL) + (time_t)lifetime;
        jp_timestamp_now(s->started_at);
        s->ready = true;
        s->phase = E2B_PAUSED;
        if (!s->env || !s->metadata) {
                json_decref(s->env);
                json_decref(s->metadata);
                free(s);
                return NULL;
        }
        e2b_sandbox_add(s);
        return s;
}

bool e2b_create_from_snapshot(struct http_request *r, const char *tid, json_t *body,
                              double lifetime)
{
        struct snapshot *p = snapshot_find(tid);
        json_t *metadata = json_object_get(body, "metadata");
        struct e2b_sandbox *s;

        if (!p || p->hidden || !tenants_may_reach(p->owner))
                return false;
        if (!p->ready) {
                e2b_reply_error(r, 409, "snapshot \"%s\" is still being made", p->id);
                return true;
        }
        s = sandbox_of(p, json_is_object(metadata) ? metadata : NULL, lifetime);
        if (!s) {
                e2b_reply_error(r, 500, "out of memory");
                return true;
        }
        /* With the memory: a copy of its checkpoint, which stays. */
        if (p->checkpoint[0]) {
                s->fork_copy = true;
                snprintf(s->checkpoint, sizeof(s->checkpoint), "%s", p->checkpoint);
                s->memory_contexts = json_incref(p->contexts);
                s->memory_commands = json_incref(p->commands);
        }
        e2b_resume_begin(s, r, lifetime);
        return true;
}

/* ---- forks --------------------------------------------------------------------- */

static void fork_cleanup(struct http_request *r)
{
        struct fork_job *job = r->ctx;

        if (job)
                job->r = NULL;
        r->ctx = NULL;
}

static void fork_end(struct fork_job *job)
{
        if (job->r) {
                job->r->ctx = NULL;
                job->r->cleanup = NULL;
                http_reply_json(job->r, 201, json_incref(job->results));
        }
        /* The forks have their files (or memory): what they came from goes. */
        if (job->checkpoint[0]) {
                kernel_checkpoint_forget(job->checkpoint);
                if (job->snapshot)
                        snapshot_free(job->snapshot);
        } else if (job->snapshot) {
                snapshot_remove(job->snapshot);
        }
        json_decref(job->contexts);
        json_decref(job->commands);
        json_decref(job->results);
        jp_strv_free(job->ids);
        free(job);
}

static void on_fork_resumed(struct e2b_sandbox *s, const char *error, void *ctx)
{
        struct fork_job *job = ctx;

        for (unsigned i = 0; i < job->count; i++) {
                if (job->ids[i] && strcmp(job->ids[i], s->id) == 0) {
                        json_array_set_new(
                            job->results, i,
                            error ? json_pack("{s:{s:i, s:s}}", "error", "code", 500, "message",
                                              error)
                                  : json_pack("{s:o}", "sandbox", e2b_created_json(s)));
                        break;
                }
        }
        if (--job->pending == 0)
                fork_end(job);
}

/* The snapshot is kept: each fork starts from it, on its own. */
static void fork_launch(struct fork_job *job)
{
        job->ids = calloc(job->count + 1, sizeof(char *));
        for (unsigned i = 0; i < job->count; i++)
                json_array_append_new(job->results,
                                      job->ids ? json_null()
                                               : json_pack("{s:{s:i, s:s}}", "error", "code", 500,
                                                           "message", "out of memory"));
        /* The launch itself counts till it ends; each fork till it runs. */
        job->pending = job->ids ? job->count + 1 : 1;
        for (unsigned i = 0; job->ids && i < job->count; i++) {
                struct e2b_sandbox *s = sandbox_of(job->snapshot, NULL, job->timeout);

                if (!s) {
                        json_array_set_new(job->results, i,
                                           json_pack("{s:{s:i, s:s}}", "error", "code", 500,
                                                     "message", "out of memory"));
                        job->pending--;
                        continue;
                }
                job->ids[i] = strdup(s->id);
                if (job->checkpoint[0]) {
                        /* A copy of the checkpoint, with the memory. */
                        s->from_snapshot[0] = '\0';
                        s->fork_copy = true;
                        snprintf(s->checkpoint, sizeof(s->checkpoint), "%s", job->checkpoint);
                        s->memory_contexts = json_incref(job->contexts);
                        s->memory_commands = json_incref(job->commands);
                }
                s->on_resumed = on_fork_resumed;
                s->on_resumed_ctx = job;
                e2b_resume_begin(s, NULL, job->timeout);
        }
        if (--job->pending == 0)
                fork_end(job);
}

/* Every fork fails with why (nothing was made). */
static void fork_failed(struct fork_job *job, int status, const char *message)
{
        for (unsigned i = 0; i < job->count; i++)
                json_array_append_new(job->results,
                                      json_pack("{s:{s:i, s:s}}", "error", "code",
                                                status == -EFBIG    ? 507
                                                : status == -EDQUOT ? 429
                                                                    : 500,
                                                "message", message));
        fork_end(job);
}

static void on_fork_checkpointed(void *ctx, int status, const char *message, uint64_t bytes)
{
        struct fork_job *job = ctx;

        (void)bytes; /* the copies are what count, not the checkpoint */

        if (status) {
                fork_failed(job, status, message && message[0] ? message : strerror(-status));
                return;
        }
        fork_launch(job);
}

/* A fork with the memory, where a checkpoint can take s: 0 and the job
 * runs, -EOPNOTSUPP (a fork of the files then), or -errno. */
static int fork_memory(struct e2b_sandbox *s, struct fork_job *job)
{
        int rc;

        if (kernels_checkpoint_refusal(s->box))
                return -EOPNOTSUPP;
        job->snapshot = snapshot_new(s, NULL, true);
        job->contexts = e2b_contexts_record(s);
        job->commands = envd_commands_record(s);
        if (!job->snapshot || !job->contexts || !job->commands || jp_uuid4(job->checkpoint) < 0)
                rc = -ENOMEM;
        else
                rc = kernels_checkpoint(s->box, s->owner, s->id, job->checkpoint, false,
                                        on_fork_checkpointed, job);
        if (rc < 0) {
                if (job->snapshot)
                        snapshot_free(job->snapshot);
                job->snapshot = NULL;
                json_decref(job->contexts);
                json_decref(job->commands);
                job->contexts = job->commands = NULL;
                job->checkpoint[0] = '\0';
        }
        return rc;
}

void e2b_fork_begin(struct e2b_sandbox *s, struct http_request *r)
{
        json_t *body = http_parse_body(r);
        json_t *count = body ? json_object_get(body, "count") : NULL;
        struct fork_job *job = NULL;
        struct making *m = NULL;
        double timeout;
        int rc;

        if (!body)
                return;
        if (count && (!json_is_integer(count) || json_integer_value(count) < 1 ||
                      json_integer_value(count) > FORK_MAX)) {
                e2b_reply_error(r, 400, "count: a number from 1 to %d", FORK_MAX);
                goto out;
        }
        if (!e2b_timeout_of(r, body, 300, false, &timeout) || !snapshot_allowed(s, r))
                goto out;
        job = calloc(1, sizeof(*job));
        m = calloc(1, sizeof(*m));
        if (!job || !m || !(job->results = json_array())) {
                e2b_reply_error(r, 500, "out of memory");
                goto out;
        }
        job->count = count ? (unsigned)json_integer_value(count) : 1;
        job->timeout = timeout;
        rc = fork_memory(s, job);
        if (rc == 0) {
                free(m);
                goto started;
        }
        if (rc != -EOPNOTSUPP) {
                reply_refused(r, rc);
                goto out;
        }
        m->fork = job;
        rc = snapshot_make(s, NULL, true, m);
        if (rc < 0) {
                reply_refused(r, rc);
                goto out;
        }
        job->snapshot = m->snapshot;
started:
        job->r = r;
        r->ctx = job;
        r->cleanup = fork_cleanup;
        json_decref(body);
        return;
out:
        if (job)
                json_decref(job->results);
        free(job);
        free(m);
        json_decref(body);
}
