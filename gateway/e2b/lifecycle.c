#include "autoconf.h"

#include "gateway/e2b/e2b.h"
#include "gateway/e2b/builds.h"
#include "gateway/e2b/contexts.h"
#include "gateway/e2b/e2b_internal.h"
#include "gateway/e2b/metrics.h"
#include "gateway/e2b/sandbox.h"
#include "gateway/e2b/snapshots.h"
#include "gateway/e2b/sudo.h"
#include "gateway/core/http.h"
#include "gateway/core/loop.h"
#include "gateway/core/tenants.h"
#include "gateway/kernels/kernels.h"
#include "gateway/kernels/limits.h"
#include "gateway/kernels/pause.h"
#include "gateway/kernels/templates.h"
#include "protocol/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- the list -------------------------------------------------------------- */

static struct e2b_sandbox *sandboxes;
static bool shutting_down; /* paused sandboxes keep their state on disk */

struct e2b_sandbox *e2b_sandboxes(void)
{
        return sandboxes;
}

void e2b_sandbox_add(struct e2b_sandbox *s)
{
        s->next = sandboxes;
        sandboxes = s;
}

struct e2b_sandbox *e2b_find_any(const char *id)
{
        for (struct e2b_sandbox *s = sandboxes; s; s = s->next) {
                if (strcmp(s->id, id) == 0)
                        return s;
        }
        return NULL;
}

/* The ports of the sandbox that need no token (ports.h): every port when
 * the create said network.allowPublicTraffic true (E2B's default, which
 * the operator makes Glovebox's with --e2b-public-traffic), else those its
 * metadata names under E2B_PUBLIC_PORTS_KEY (checked before the sandbox
 * was made). A private port takes the API key or the traffic access
 * token, as E2B's do with allowPublicTraffic false. Applied to each box
 * the sandbox gets: at create and at every resume. */
void e2b_set_public_traffic(struct e2b_sandbox *s)
{
        e2b_traffic_of(s, s->box);
}

/* The same into box, s's or a stand-in for it while it sleeps (wake.c). */
void e2b_traffic_of(const struct e2b_sandbox *s, struct sandbox *box)
{
        json_t *v = json_object_get(s->metadata, E2B_PUBLIC_PORTS_KEY);

        box->all_ports_public = s->ports_public;
        if (json_is_string(v))
                sandbox_parse_public_ports(json_string_value(v), box, NULL, 0);
        /* Checked at create: the Host header its apps get. */
        if (*s->request_host)
                sandbox_parse_request_host(s->request_host, box, NULL, 0);
}

/* ---- life and death --------------------------------------------------------- */

static void on_ttl(lws_sorted_usec_list_t *sul);

/* Ends what runs of s: its commands, its kernels and its box. */
void e2b_sandbox_stop(struct e2b_sandbox *s)
{
        e2b_metrics_stop(&s->metrics);
        envd_forget(s);
        e2b_contexts_stop(s);
        sandbox_unref(&s->box);
}

static void pending_forget(struct http_request *r)
{
        struct e2b_sandbox *s = r->ctx;

        if (s && s->pending == r)
                s->pending = NULL;
        r->ctx = NULL;
}

void e2b_pending_set(struct e2b_sandbox *s, struct http_request *r)
{
        s->pending = r;
        if (r) {
                r->ctx = s;
                r->cleanup = pending_forget;
        }
}

/* The request waiting for s's phase, taken from s: NULL when none. */
struct http_request *e2b_pending_take(struct e2b_sandbox *s)
{
        struct http_request *r = s->pending;

        s->pending = NULL;
        if (r) {
                r->ctx = NULL;
                r->cleanup = NULL;
        }
        return r;
}

void e2b_sandbox_kill(struct e2b_sandbox *s)
{
        for (struct e2b_sandbox **link = &sandboxes; *link; link = &(*link)->next) {
                if (*link == s) {
                        *link = s->next;
                        break;
                }
        }
        log_info("e2b sandbox %s removed", s->id);
        loop_timer_stop(&s->ttl);
        if (s->phase == E2B_RESUMING && s->resume_waiter.on)
                waiter_cancel(&s->resume_waiter);
        if (s->pending)
                e2b_reply_error(e2b_pending_take(s), 410, "the sandbox was removed");
        e2b_wake_end(s, "the sandbox was removed");
        e2b_sandbox_stop(s);
        /* A paused sandbox outlives the gateway; a removed one is gone
         * for good, its saved files with it. */
        if (!shutting_down && s->phase != E2B_RUNNING) {
                pause_forget(s->id);
                if (s->checkpoint[0] && !s->fork_copy)
                        kernel_checkpoint_forget(s->checkpoint);
        }
        json_decref(s->memory_contexts);
        json_decref(s->memory_commands);
        e2b_metrics_clear(&s->metrics);
        json_decref(s->metadata);
        json_decref(s->env);
        jp_strv_free(s->volumes);
        free(s);
}

void e2b_shutdown(void)
{
        shutting_down = true;
        while (sandboxes)
                e2b_sandbox_kill(sandboxes);
}

void e2b_set_timeout(struct e2b_sandbox *s, double seconds)
{
        s->end_at = time(NULL) + (time_t)seconds;
        loop_timer_start(&s->ttl, on_ttl, seconds * 1000.0);
}

/* ---- pause and resume --------------------------------------------------------- */

/* What paused/<id>/meta.json records: all that a resume needs, and who
 * owns it, so that a gateway started later serves the same sandbox to
 * the same tenant. */
static json_t *pause_meta(const struct e2b_sandbox *s)
{
        json_t *meta = json_pack(
            "{s:i, s:s, s:s, s:s, s:s, s:s, s:O, s:O, s:o, s:f, s:s, s:b, s:b, s:s, s:s}",
            "version", 1, "kind", "e2b", "sandboxID", s->id, "owner", s->owner, "token", s->token,
            "templateID", s->template_id, "metadata", s->metadata, "envVars", s->env, "limits",
            limits_record(&s->limits), "lifetime", s->lifetime, "startedAt", s->started_at,
            "onTimeoutPause", s->on_timeout_pause, "memoryKept", s->checkpoint[0] != '\0', "notice",
            s->checkpoint[0] ? "" : e2b_pause_notice(s), "trafficToken", s->traffic_token);
        json_t *volumes = json_array();

        for (size_t i = 0; s->volumes && s->volumes[i]; i++)
                json_array_append_new(volumes, json_string(s->volumes[i]));
        if (meta && volumes && json_array_size(volumes))
                json_object_set(meta, "volumes", volumes);
        /* A checkpoint's: its name and what taking its kernels over needs
         * (their HMAC keys: the record is 0600 in our state directory). */
        if (meta && s->checkpoint[0] && s->memory_contexts)
                json_object_update_new(
                    meta, json_pack("{s:s, s:O, s:O?, s:I, s:b}", "checkpoint", s->checkpoint,
                                    "contexts", s->memory_contexts, "commands", s->memory_commands,
                                    "checkpointBytes", (json_int_t)s->checkpoint_bytes,
                                    "autoPauseMemory", s->auto_pause_memory));
        else if (meta)
                json_object_set_new(meta, "autoPauseMemory", json_boolean(s->auto_pause_memory));
        if (meta)
                json_object_set_new(meta, "autoResume", json_boolean(s->auto_resume));
        json_decref(volumes);
        return meta;
}

/* ctx of a pause job: the sandbox's id, looked up again when the job
 * ends, since the sandbox may be gone by then. */
static struct e2b_sandbox *job_sandbox(void *ctx, enum e2b_phase phase)
{
        struct e2b_sandbox *s = e2b_find_any(ctx);

        free(ctx);
        return s && s->phase == phase ? s : NULL;
}

static void on_saved(void *ctx, int status, const char *message, uint64_t bytes)
{
        char id[sizeof(((struct e2b_sandbox *)0)->id)];
        struct e2b_sandbox *s;

        snprintf(id, sizeof(id), "%s", (const char *)ctx);
        s = job_sandbox(ctx, E2B_PAUSING);
        if (!s) {
                /* removed meanwhile: nothing to keep */
                pause_forget(id);
                return;
        }
        e2b_pause_saved(s, status, message, bytes);
}

void e2b_pause_saved(struct e2b_sandbox *s, int status, const char *message, uint64_t bytes)
{
        bool connect = s->pending_connect;
        struct http_request *r = e2b_pending_take(s);
        json_t *meta;

        s->pending_connect = false;
        if (status == 0) {
                meta = pause_meta(s);
                status = meta ? pause_write_meta(s->id, meta) : -ENOMEM;
                json_decref(meta);
                message = status ? "cannot write its record" : NULL;
        }
        if (status) {
                /* Nothing is lost: the sandbox keeps running as it was. */
                log_error("e2b sandbox %s: pause failed: %s", s->id, message ? message : "");
                pause_forget(s->id);
                if (s->checkpoint[0])
                        kernel_checkpoint_forget(s->checkpoint);
                e2b_memory_drop(s);
                s->phase = E2B_RUNNING;
                e2b_wake_settle(s, NULL);
                if (r && connect) {
                        /* A connect that waited: it runs on, as connected. */
                        e2b_set_timeout(s, s->pending_timeout > 0 ? s->pending_timeout : 1.0);
                        http_reply_json(r, 200, e2b_created_json(s));
                } else if (r) {
                        e2b_set_timeout(s, s->end_at > time(NULL) ? (double)(s->end_at - time(NULL))
                                                                  : 1.0);
                        e2b_reply_error(r, status == -EFBIG ? 507 : 500,
                                        "pause failed, the sandbox keeps running: %s",
                                        message ? message : strerror(-status));
                } else {
                        /* its timeout: it ends as it would have without
                         * onTimeout 'pause' */
                        log_error("e2b sandbox %s reached its timeout and could not be paused: "
                                  "killed",
                                  s->id);
                        e2b_sandbox_kill(s);
                }
                return;
        }
        e2b_sandbox_stop(s);
        s->phase = E2B_PAUSED;
        log_info("e2b sandbox %s paused in %.3f s (%s)", s->id, loop_now() - s->phase_started,
                 s->checkpoint[0] ? "memory kept" : e2b_pause_notice(s));
        (void)bytes;
        if (r && connect)
                e2b_resume_begin(s, r, s->pending_timeout);
        else if (r)
                http_reply_empty(r, 204);
        e2b_wake_settle(s, NULL);
}

/* Pauses s, answering r (NULL: its timeout) when done. */
void e2b_pause_begin(struct e2b_sandbox *s, struct http_request *r, bool memory)
{
        int rc;

        if (!pause_enabled()) {
                if (r)
                        e2b_reply_error(r, 400,
                                        "pause: not enabled (this Glovebox has no --state-dir)");
                goto refused;
        }
        if (s->phase == E2B_PAUSED) {
                if (r)
                        e2b_reply_error(r, 409, "sandbox \"%s\" is already paused", s->id);
                return;
        }
        if (s->phase != E2B_RUNNING) {
                if (r)
                        e2b_reply_error(r, 409, "sandbox \"%s\" is being %s", s->id,
                                        s->phase == E2B_PAUSING ? "paused" : "resumed");
                return;
        }
        s->pause_notice[0] = '\0';
        if (memory && e2b_memory_pause(s) == 0) {
                loop_timer_stop(&s->ttl);
                s->phase = E2B_PAUSING;
                s->phase_started = loop_now();
                e2b_pending_set(s, r);
                return;
        }
        /* Its files alone would come back without its egress. */
        if (s->box->network.enabled) {
                /* e2b_memory_pause's notice, past its files-only words. */
                const char *prefix = PAUSE_MEMORY_NOTICE ": ";
                const char *why = strncmp(s->pause_notice, prefix, strlen(prefix)) == 0
                                      ? s->pause_notice + strlen(prefix)
                                      : "no checkpoint could be made";

                if (r)
                        e2b_reply_error(r, 400,
                                        "pause: a sandbox with network egress is paused only with "
                                        "its memory, and %s%s",
                                        memory ? "it cannot be kept: "
                                               : "the pause asked for "
                                                 "files only",
                                        memory ? why : "");
                s->pause_notice[0] = '\0';
                goto refused;
        }
        if (!memory)
                snprintf(s->pause_notice, sizeof(s->pause_notice),
                         "%s: the pause asked for "
                         "files only",
                         PAUSE_MEMORY_NOTICE);
        rc = e2b_pause_files(s);
        if (rc < 0) {
                if (r && rc == -EDQUOT)
                        e2b_reply_error(r, 429,
                                        "pause: this key's paused sandboxes hold all they may "
                                        "(--pause-quota-mb)");
                else if (r)
                        e2b_reply_error(r, 500, "pause: cannot save the files: %s", strerror(-rc));
                goto refused;
        }
        loop_timer_stop(&s->ttl);
        s->phase = E2B_PAUSING;
        s->phase_started = loop_now();
        e2b_pending_set(s, r);
        return;
refused:
        if (!r) {
                log_error("e2b sandbox %s reached its timeout and cannot be paused: killed", s->id);
                e2b_sandbox_kill(s);
        }
}

int e2b_pause_files(struct e2b_sandbox *s)
{
        char *id = strdup(s->id);
        int rc = id ? pause_save_home(s->box, s->id, s->owner, on_saved, id) : -ENOMEM;

        if (rc < 0)
                free(id);
        return rc;
}

const char *e2b_pause_notice(const struct e2b_sandbox *s)
{
        return s->pause_notice[0] ? s->pause_notice : PAUSE_MEMORY_NOTICE;
}

static void on_ttl(lws_sorted_usec_list_t *sul)
{
        struct e2b_sandbox *s = lws_container_of(sul, struct e2b_sandbox, ttl);

        log_info("e2b sandbox %s reached its timeout", s->id);
        if (s->on_timeout_pause)
                e2b_pause_begin(s, NULL, s->auto_pause_memory);
        else
                e2b_sandbox_kill(s);
}

/* A resume that failed: s is paused again, its files still on disk. */
void e2b_resume_failed(struct e2b_sandbox *s, const char *message)
{
        struct http_request *r = e2b_pending_take(s);
        bool made = s->from_snapshot[0] != '\0' || s->fork_copy;

        log_error("e2b sandbox %s: %s failed: %s", s->id, made ? "start from a snapshot" : "resume",
                  message);
        e2b_sandbox_stop(s);
        s->phase = E2B_PAUSED;
        e2b_wake_settle(s, message);
        if (s->on_resumed)
                s->on_resumed(s, message, s->on_resumed_ctx);
        else if (r && made)
                e2b_reply_error(r, 500, "the sandbox could not start from its snapshot: %s",
                                message);
        else if (r)
                e2b_reply_error(r, 500, "resume failed, the sandbox stays paused: %s", message);
        /* One made from a snapshot was never anything else: gone. */
        if (made)
                e2b_sandbox_kill(s);
}

static void on_restored(void *ctx, int status, const char *message, uint64_t bytes)
{
        struct e2b_sandbox *s = job_sandbox(ctx, E2B_RESUMING);

        if (!s)
                return;
        if (status) {
                e2b_resume_failed(s, message ? message : strerror(-status));
                return;
        }
        log_info("e2b sandbox %s: %llu bytes of files back", s->id, (unsigned long long)bytes);
        e2b_resumed(s);
}

void e2b_resumed(struct e2b_sandbox *s)
{
        struct http_request *r;

        pause_forget(s->id);
        s->phase = E2B_RUNNING;
        log_info("e2b sandbox %s %s in %.3f s", s->id,
                 s->from_snapshot[0] ? "started from a snapshot"
                 : s->checkpoint[0]  ? "resumed with its memory"
                                     : "resumed",
                 loop_now() - s->phase_started);
        if (s->checkpoint[0] && !s->fork_copy)
                kernel_checkpoint_forget(s->checkpoint);
        e2b_memory_drop(s);
        s->from_snapshot[0] = '\0';
        s->fork_copy = false;
        e2b_set_timeout(s, s->pending_timeout > 0 ? s->pending_timeout : s->lifetime);
        e2b_metrics_start(&s->metrics, s->box);
        e2b_wake_settle(s, NULL);
        if (s->on_resumed) {
                s->on_resumed(s, NULL, s->on_resumed_ctx);
                s->on_resumed = NULL;
                return;
        }
        r = e2b_pending_take(s);
        if (r)
                e2b_reply_created(s, r);
}

static void on_resume_ready(struct waiter *w, void *subject, int status, const char *message)
{
        struct kernel *k = subject;
        struct e2b_sandbox *s = lws_container_of(w, struct e2b_sandbox, resume_waiter);
        char *id;
        int rc;

        (void)k;
        if (status) {
                e2b_resume_failed(s, message ? message : "its kernel did not start");
                return;
        }
        id = strdup(s->id);
        /* A sandbox made from a snapshot takes its files from there. */
        rc = !id                   ? -ENOMEM
             : s->from_snapshot[0] ? pause_restore_home_from(PAUSE_SNAPSHOTS, s->box,
                                                             s->from_snapshot, on_restored, id)
                                   : pause_restore_home(s->box, s->id, on_restored, id);
        if (rc < 0) {
                free(id);
                e2b_resume_failed(s, strerror(-rc));
        }
}

/* Resumes paused s for r: a new box and kernel under the same id, its
 * files put back, answered 201 once it runs. */
/* A resume refused before it began: told to r, or to a fork's job (then
 * the sandbox, made for it, is removed). */
static void resume_refused(struct e2b_sandbox *s, struct http_request *r, int status,
                           const char *message)
{
        bool made = s->from_snapshot[0] != '\0' || s->fork_copy;

        if (r)
                e2b_reply_error(r, status, "%s", message);
        if (s->phase == E2B_PAUSED)
                e2b_wake_settle(s, message);
        if (s->on_resumed) {
                s->on_resumed(s, message, s->on_resumed_ctx);
                s->on_resumed = NULL;
        }
        if (made)
                e2b_sandbox_kill(s);
}

void e2b_resume_begin(struct e2b_sandbox *s, struct http_request *r, double timeout)
{
        const struct config *cfg = config_get();
        struct hostmsg_network net = {0};
        struct tenant_caller owner = {.admin = false};
        struct tenant_scope saved;
        char message[256];
        json_t *why = NULL;
        int rc;

        if (s->phase != E2B_PAUSED) {
                snprintf(message, sizeof(message), "sandbox \"%s\" is %s", s->id,
                         s->phase == E2B_RUNNING ? "already running" : "being paused");
                resume_refused(s, r, 409, message);
                return;
        }
        if (!s->spec) {
                snprintf(message, sizeof(message),
                         "resume: template '%s' is no longer served; the sandbox stays paused",
                         s->template_id);
                resume_refused(s, r, 500, message);
                return;
        }
        if (!tenants_exists(s->owner)) {
                snprintf(message, sizeof(message),
                         "resume: the key that created sandbox \"%s\" was removed", s->id);
                resume_refused(s, r, 403, message);
                return;
        }
        /* Its kernels and its quota are its owner's, whoever resumes it
         * (an admin may). */
        tenants_scope_enter(&saved);
        snprintf(owner.name, sizeof(owner.name), "%s", s->owner);
        if (!cfg->no_auth)
                tenants_set_caller(&owner);
        else
                tenants_scope_restore(&saved);
        if (kernels_quota_check(&s->limits, NULL, &why) < 0) {
                if (r) {
                        e2b_reply_quota(r, why);
                        r = NULL;
                } else {
                        json_decref(why);
                }
                resume_refused(s, NULL, 429, "quota of this key reached");
                goto out;
        }
        if (s->checkpoint[0]) {
                /* Paused with its memory: its box and kernels come back as
                 * they were (pause_memory.c). */
                rc = e2b_memory_resume(s);
                if (rc < 0) {
                        snprintf(message, sizeof(message), "resume: cannot restore the sandbox: %s",
                                 strerror(-rc));
                        resume_refused(s, r, 500, message);
                        goto out;
                }
                e2b_set_public_traffic(s);
                s->phase = E2B_RESUMING;
                s->phase_started = loop_now();
                s->pending_timeout = timeout;
                e2b_pending_set(s, r);
                goto out;
        }
        rc = e2b_box_new(s, s->spec, &s->limits, &net);
        if (rc < 0) {
                snprintf(message, sizeof(message), "resume: cannot make a sandbox: %s",
                         strerror(-rc));
                resume_refused(s, r, 500, message);
                goto out;
        }
        e2b_set_public_traffic(s);
        e2b_start_sudo(s);
        s->phase = E2B_RESUMING;
        s->phase_started = loop_now();
        s->pending_timeout = timeout;
        e2b_pending_set(s, r);
        s->resume_waiter.done = on_resume_ready;
        if (!e2b_context_new(s, s->spec, "python", NULL, &s->resume_waiter, &rc))
                e2b_resume_failed(s, rc == -EAGAIN   ? "too many kernels"
                                     : rc == -EDQUOT ? "quota of this key reached"
                                                     : strerror(-rc));
        else
                e2b_contexts_add_defaults(s);
out:
        tenants_scope_restore(&saved);
}

/* The kernelspec of template tid, as create finds it; NULL if none. */
const struct jp_kernelspec *e2b_template_spec(const char *tid)
{
        const struct config *cfg = config_get();
        const struct jp_kernelspec *spec;

        /* The E2B templates an agent asks for by default, or a kernelspec
         * (a template's default kernel has the template's name), or a
         * template the caller built (builds.h): its base's. */
        if (strcmp(tid, E2B_DEFAULT_TEMPLATE) == 0 || strcmp(tid, "base") == 0)
                return jp_kernelspec_find(kernels_specs(), cfg->default_kernel);
        if (templates_find(tid))
                return templates_kernel(templates_find(tid), NULL);
        spec = jp_kernelspec_find(kernels_specs(), tid);
        if (!spec && builds_find(tid))
                spec = builds_kernel(builds_find(tid));
        return spec;
}

/* The built template s is of, or NULL. */
const struct build *e2b_built_of(const struct e2b_sandbox *s)
{
        if (jp_kernelspec_find(kernels_specs(), s->template_id) || templates_find(s->template_id))
                return NULL;
        return builds_find(s->template_id);
}

/* s's box: of its template, and of its layers when it is a built one,
 * whose start command starts in it. */
int e2b_box_new(struct e2b_sandbox *s, const struct jp_kernelspec *spec,
                const struct hostmsg_limits *limits, const struct hostmsg_network *net)
{
        const struct config *cfg = config_get();
        const struct build *b = e2b_built_of(s);
        const struct sandbox_layers mounts = {.volumes = s->volumes};
        int rc;

        if (!b)
                return templates_sandbox_new_layered(
                    spec, limits, strcmp(cfg->sandbox, "none") != 0, net, &mounts, &s->box);
        rc = builds_sandbox_new(b, limits, net, s->volumes, &s->box);
        if (rc == 0 && builds_start(b, s->box) < 0)
                log_warn("sandbox %s: cannot start its template's start command", s->id);
        return rc;
}

static bool meta_string(json_t *meta, const char *key, char *out, size_t size)
{
        const char *v = json_string_value(json_object_get(meta, key));

        if (!v || strlen(v) >= size)
                return false;
        memcpy(out, v, strlen(v) + 1);
        return true;
}

/* The volumes a paused sandbox had mounted (each checked again). */
static void volumes_of_meta(struct e2b_sandbox *s, json_t *list)
{
        size_t i, n = 0;
        json_t *v;

        json_array_foreach(list, i, v) {
                const char *entry = json_string_value(v), *path;
                char id[JP_UUID_SIZE], **grown;

                if (!entry || n >= HOSTMSG_MAX_VOLUMES ||
                    !hostmsg_volume_mount_split(entry, id, &path))
                        continue;
                grown = realloc(s->volumes, (n + 2) * sizeof(char *));
                if (!grown)
                        return;
                s->volumes = grown;
                grown[n] = strdup(entry);
                grown[n + 1] = NULL;
                if (grown[n])
                        n++;
        }
}

static void on_paused_found(void *ctx, const char *id, json_t *meta)
{
        json_t *lim = json_object_get(meta, "limits");
        struct e2b_sandbox *s = calloc(1, sizeof(*s));
        int *count = ctx;
        char why[512];

        if (!s)
                return;
        /* A paused Jupyter kernel's (kernel_pause.c) */
        if (strcmp(json_string_value(json_object_get(meta, "kind")) ?: "", "e2b") != 0) {
                free(s);
                return;
        }
        if (!meta_string(meta, "sandboxID", s->id, sizeof(s->id)) || strcmp(s->id, id) != 0 ||
            !meta_string(meta, "owner", s->owner, sizeof(s->owner)) ||
            !meta_string(meta, "token", s->token, sizeof(s->token)) ||
            !meta_string(meta, "templateID", s->template_id, sizeof(s->template_id)) ||
            !meta_string(meta, "startedAt", s->started_at, sizeof(s->started_at)) ||
            !e2b_string_map(json_object_get(meta, "metadata"), E2B_MAX_METADATA) ||
            !json_is_object(json_object_get(meta, "metadata")) ||
            e2b_env_vars_refusal(json_object_get(meta, "envVars"), why, sizeof(why)) ||
            !json_is_object(json_object_get(meta, "envVars")) || !json_is_object(lim) ||
            e2b_find_any(id)) {
                log_warn("paused sandbox %s: its meta.json is not a paused sandbox's; left as it "
                         "is",
                         id);
                free(s);
                return;
        }
        /* Paused before it had a traffic token of its own (the envd
         * token served as both): a new one, which its connect answers. */
        if (!meta_string(meta, "trafficToken", s->traffic_token, sizeof(s->traffic_token)) &&
            jp_random_hex(s->traffic_token, 32) < 0) {
                free(s);
                return;
        }
        s->metadata = json_incref(json_object_get(meta, "metadata"));
        s->env = json_incref(json_object_get(meta, "envVars"));
        limits_from_record(lim, &s->limits);
        s->lifetime = json_number_value(json_object_get(meta, "lifetime"));
        if (s->lifetime <= 0)
                s->lifetime = 300;
        s->on_timeout_pause = json_is_true(json_object_get(meta, "onTimeoutPause"));
        s->auto_pause_memory = !json_is_false(json_object_get(meta, "autoPauseMemory"));
        s->auto_resume = json_is_true(json_object_get(meta, "autoResume"));
        if (json_is_true(json_object_get(meta, "memoryKept")) &&
            (!meta_string(meta, "checkpoint", s->checkpoint, sizeof(s->checkpoint)) ||
             !json_is_array(json_object_get(meta, "contexts")))) {
                log_warn("paused sandbox %s: its checkpoint is not named; left as it is", id);
                json_decref(s->metadata);
                json_decref(s->env);
                free(s);
                return;
        }
        if (s->checkpoint[0]) {
                s->memory_contexts = json_incref(json_object_get(meta, "contexts"));
                s->memory_commands = json_incref(json_object_get(meta, "commands"));
        } else
                meta_string(meta, "notice", s->pause_notice, sizeof(s->pause_notice));
        volumes_of_meta(s, json_object_get(meta, "volumes"));
        s->spec = e2b_template_spec(s->template_id);
        if (!s->spec)
                log_warn("paused sandbox %s: template '%s' is not served now; it cannot resume", id,
                         s->template_id);
        s->end_at = time(NULL);
        s->ready = true;
        s->phase = E2B_PAUSED;
        s->next = sandboxes;
        sandboxes = s;
        (*count)++;
}

void e2b_load_paused(void)
{
        int count = 0;

        e2b_snapshots_load();
        pause_load_all(on_paused_found, &count);
        if (count)
                log_info("%d paused e2b sandbox%s found in the state directory", count,
                         count == 1 ? "" : "es");
}

/* Answers r (a create, a resume or a connect that resumed) with s's
 * model. Its sudo service may still be starting: sudo waits for it. */
void e2b_reply_created(struct e2b_sandbox *s, struct http_request *r)
{
        http_reply_json(r, 201, e2b_created_json(s));
}

/* The sandbox's sudo service, on its box just made. */
void e2b_start_sudo(struct e2b_sandbox *s)
{
        if (s->box && strcmp(config_get()->sandbox, "none") != 0)
                e2b_sudo_start(s, NULL);
        else
                s->sudo = E2B_SUDO_NONE; /* --sandbox=none: no root of its own */
}
