#include "autoconf.h"

#include "gateway/e2b.h"
#include "gateway/builds.h"
#include "gateway/fleet.h"
#include "gateway/ports.h"
#include "gateway/api.h"
#include "gateway/e2b_display.h"
#include "gateway/egress.h"
#include "gateway/execute.h"
#include "gateway/kernels.h"
#include "gateway/loop.h"
#include "gateway/monitor.h"
#include "gateway/pause.h"
#include "gateway/pool.h"
#include "gateway/templates.h"
#include "gateway/tenants.h"
#include "gateway/specs.h"
#include "protocol/ids.h"
#include "protocol/log.h"

#include <errno.h>
#include <math.h>
#include <openssl/crypto.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define E2B_ENVD_VERSION "0.5.6" /* multipart uploads; see docs/e2b-protocol.md §7 */
#define DEFAULT_TEMPLATE "code-interpreter-v1"
#define MAX_METADATA     64
#define MAX_CONTEXTS     16

struct e2b_context {
        struct e2b_context *next;
        char id[JP_UUID_SIZE];
        char language[32];
        char cwd[PATH_MAX];
        char kernel_id[JP_UUID_SIZE];
};

/* A sandbox is running, or on disk (pause.h) with no box at all, or on
 * its way between the two; requests to its own plane need it running. */
enum e2b_phase { E2B_RUNNING, E2B_PAUSING, E2B_PAUSED, E2B_RESUMING };

struct e2b_sandbox {
        struct e2b_sandbox *next;
        char id[FLEETID_SANDBOX_SIZE];
        char owner[KEYS_NAME_MAX]; /* the tenant whose key created it */
        char token[65];
        char template_id[64];
        char workdir[PATH_MAX]; /* a built template's: its commands' default cwd */
        json_t *metadata;
        json_t *env;
        const struct jp_kernelspec *spec; /* of its first context: its template's */
        struct sandbox *box;
        char started_at[JP_TIMESTAMP_SIZE];
        time_t end_at;
        double lifetime; /* asked for at create; counted again from ready */
        lws_sorted_usec_list_t ttl;
        struct e2b_context *contexts;
        bool ready; /* its default context answered; listed from then on */
        enum e2b_phase phase;
        struct hostmsg_limits limits; /* its box's, kept while paused (box NULL) */
        bool on_timeout_pause;        /* lifecycle onTimeout 'pause': paused, not killed */
        /* The pause or resume (or connect) waiting for the phase to
         * change, or NULL: its answer comes then. */
        struct http_request *pending;
        bool pending_connect;   /* a connect: answered as one */
        double pending_timeout; /* a connect's or resume's timeout; 0: its lifetime */
        struct kernel_waiter resume_waiter;
        double phase_started; /* loop_now() when pausing or resuming began */
};

static struct e2b_sandbox *sandboxes;
static bool shutting_down; /* paused sandboxes keep their state on disk */

static int box_new(struct e2b_sandbox *s, const struct jp_kernelspec *spec,
                   const struct hostmsg_limits *limits, const struct hostmsg_network *net);

/* ---- helpers ------------------------------------------------------------- */

static bool header(struct http_request *r, const char *name, char *out, size_t size)
{
        return lws_hdr_custom_copy(r->wsi, out, (int)size, name, (int)strlen(name)) > 0;
}

static bool token_matches(const char *given, const char *expected)
{
        return strlen(given) == strlen(expected) &&
               CRYPTO_memcmp(given, expected, strlen(expected)) == 0;
}

void e2b_reply_error(struct http_request *r, int status, const char *fmt, ...)
{
        char message[1024];
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(message, sizeof(message), fmt, ap);
        va_end(ap);
        http_reply_json(r, status, json_pack("{s:i, s:s}", "code", status, "message", message));
}

/* The code interpreter's errors are plain text (its SDK reads the body as
 * the message). */
static void reply_text(struct http_request *r, int status, const char *message)
{
        http_reply_bytes(r, status, "text/plain", message, strlen(message));
}

bool e2b_key_form(const char *key)
{
        return strncmp(key, "e2b_", 4) == 0 && key[4] &&
               key[4 + strspn(key + 4, "0123456789abcdef")] == '\0';
}

static struct e2b_sandbox *find_any(const char *id)
{
        for (struct e2b_sandbox *s = sandboxes; s; s = s->next) {
                if (strcmp(s->id, id) == 0)
                        return s;
        }
        return NULL;
}

/* A sandbox the caller may reach (tenants.h); another tenant's is not
 * found, as if it did not exist. */
static struct e2b_sandbox *find(const char *id)
{
        struct e2b_sandbox *s = find_any(id);

        return s && tenants_may_reach(s->owner) ? s : NULL;
}

struct e2b_sandbox *e2b_find_ready(const char *id)
{
        struct e2b_sandbox *s = find_any(id);

        return s && s->ready && s->phase == E2B_RUNNING ? s : NULL;
}

bool e2b_token_ok(struct e2b_sandbox *s, const char *token)
{
        return token_matches(token, s->token);
}

const char *e2b_owner(const struct e2b_sandbox *s)
{
        return s->owner;
}

struct sandbox *e2b_box(struct e2b_sandbox *s)
{
        return s->box;
}

json_t *e2b_env(struct e2b_sandbox *s)
{
        return s->env;
}

const char *e2b_workdir(const struct e2b_sandbox *s)
{
        return s->workdir;
}

static void format_time(time_t t, char *out, size_t size)
{
        struct tm tm;

        gmtime_r(&t, &tm);
        strftime(out, size, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static json_t *sandbox_json(const struct e2b_sandbox *s, bool detail)
{
        const struct hostmsg_limits *lim = &s->limits;
        bool networked = s->box && s->box->network.enabled;
        char end[32];
        json_t *o;

        format_time(s->end_at, end, sizeof(end));
        o = json_pack("{s:s, s:s, s:s, s:s, s:i, s:I, s:I, s:s, s:O, s:s, s:s, s:s}", "sandboxID",
                      s->id, "templateID", s->template_id, "alias", s->template_id, "clientID",
                      "glovebox", "cpuCount", (int)ceil(lim->cpu_millis / 1000.0), "memoryMB",
                      (json_int_t)lim->memory_mb, "diskSizeMB", (json_int_t)lim->disk_mb,
                      "envdVersion", E2B_ENVD_VERSION, "metadata", s->metadata, "startedAt",
                      s->started_at, "endAt", end, "state",
                      s->phase == E2B_PAUSED ? "paused" : "running");
        if (o) {
                /* What the sandbox has, whatever was asked: its egress
                 * (see create_network), and death at its timeout. */
                json_object_set_new(o, "allowInternetAccess", json_boolean(networked));
                if (networked)
                        json_object_set_new(o, "network", egress_describe(&s->box->network));
                json_object_set_new(o, "lifecycle",
                                    json_pack("{s:s, s:b}", "onTimeout",
                                              s->on_timeout_pause ? "pause" : "kill", "autoResume",
                                              false));
                /* A pause keeps the files only: said wherever the pause
                 * shows, so that no variable is lost unannounced. */
                if (s->phase == E2B_PAUSED)
                        json_object_set_new(o, "glovebox",
                                            json_pack("{s:b, s:s}", "memoryKept", false,
                                                      "pauseNotice", PAUSE_MEMORY_NOTICE));
        }
        if (o && detail) {
                json_object_set_new(o, "envdAccessToken", json_string(s->token));
                json_object_set_new(o, "domain", json_string(ports_domain()));
        }
        return o;
}

/* What create and connect answer: where and how to reach the sandbox. */
static json_t *created_json(const struct e2b_sandbox *s)
{
        /* E2B's getHost(port) is "{port}-{sandboxID}.{domain}": the
         * ports domain makes that a name the gateway serves (ports.h). */
        return json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:s}", "sandboxID", s->id,
                         "templateID", s->template_id, "alias", s->template_id, "clientID",
                         "glovebox", "envdVersion", E2B_ENVD_VERSION, "envdAccessToken", s->token,
                         "trafficAccessToken", s->token, "domain", ports_domain());
}

/* ---- life and death --------------------------------------------------------- */

static void on_ttl(lws_sorted_usec_list_t *sul);
static struct e2b_context *context_new(struct e2b_sandbox *s, const struct jp_kernelspec *spec,
                                       const char *language, const char *cwd,
                                       struct kernel_waiter *w, int *err);
static bool string_map(json_t *v, size_t max);
static void reply_quota(struct http_request *r, json_t *why);

/* Ends what runs of s: its commands, its kernels and its box. */
static void sandbox_stop(struct e2b_sandbox *s)
{
        envd_forget(s);
        while (s->contexts) {
                struct e2b_context *c = s->contexts;
                struct kernel *k = kernel_find_any(c->kernel_id);

                s->contexts = c->next;
                if (k)
                        kernel_shutdown(k, NULL);
                free(c);
        }
        sandbox_unref(&s->box);
}

static void pending_forget(struct http_request *r)
{
        struct e2b_sandbox *s = r->ctx;

        if (s && s->pending == r)
                s->pending = NULL;
        r->ctx = NULL;
}

static void pending_set(struct e2b_sandbox *s, struct http_request *r)
{
        s->pending = r;
        if (r) {
                r->ctx = s;
                r->cleanup = pending_forget;
        }
}

/* The request waiting for s's phase, taken from s: NULL when none. */
static struct http_request *pending_take(struct e2b_sandbox *s)
{
        struct http_request *r = s->pending;

        s->pending = NULL;
        if (r) {
                r->ctx = NULL;
                r->cleanup = NULL;
        }
        return r;
}

static void sandbox_kill(struct e2b_sandbox *s)
{
        for (struct e2b_sandbox **link = &sandboxes; *link; link = &(*link)->next) {
                if (*link == s) {
                        *link = s->next;
                        break;
                }
        }
        log_info("e2b sandbox %s removed", s->id);
        loop_timer_stop(&s->ttl);
        if (s->phase == E2B_RESUMING && s->resume_waiter.kernel)
                kernel_waiter_cancel(&s->resume_waiter);
        if (s->pending)
                e2b_reply_error(pending_take(s), 410, "the sandbox was removed");
        sandbox_stop(s);
        /* A paused sandbox outlives the gateway; a removed one is gone
         * for good, its saved files with it. */
        if (!shutting_down && s->phase != E2B_RUNNING)
                pause_forget(s->id);
        json_decref(s->metadata);
        json_decref(s->env);
        free(s);
}

void e2b_shutdown(void)
{
        shutting_down = true;
        while (sandboxes)
                sandbox_kill(sandboxes);
}

static void set_timeout(struct e2b_sandbox *s, double seconds)
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
        return json_pack("{s:i, s:s, s:s, s:s, s:s, s:s, s:O, s:O, s:{s:I, s:I, s:I, s:I}, s:f, "
                         "s:s, s:b, s:b, s:s}",
                         "version", 1, "kind", "e2b", "sandboxID", s->id, "owner", s->owner,
                         "token", s->token, "templateID", s->template_id, "metadata", s->metadata,
                         "envVars", s->env, "limits", "memory_mb", (json_int_t)s->limits.memory_mb,
                         "cpu_millis", (json_int_t)s->limits.cpu_millis, "pids",
                         (json_int_t)s->limits.pids, "disk_mb", (json_int_t)s->limits.disk_mb,
                         "lifetime", s->lifetime, "startedAt", s->started_at, "onTimeoutPause",
                         s->on_timeout_pause, "memoryKept", false, "notice", PAUSE_MEMORY_NOTICE);
}

/* ctx of a pause job: the sandbox's id, looked up again when the job
 * ends, since the sandbox may be gone by then. */
static struct e2b_sandbox *job_sandbox(void *ctx, enum e2b_phase phase)
{
        struct e2b_sandbox *s = find_any(ctx);

        free(ctx);
        return s && s->phase == phase ? s : NULL;
}

static void on_saved(void *ctx, int status, const char *message, uint64_t bytes)
{
        char id[sizeof(((struct e2b_sandbox *)0)->id)];
        struct e2b_sandbox *s;
        struct http_request *r;
        json_t *meta;

        snprintf(id, sizeof(id), "%s", (const char *)ctx);
        s = job_sandbox(ctx, E2B_PAUSING);
        if (!s) {
                /* removed meanwhile: nothing to keep */
                pause_forget(id);
                return;
        }
        r = pending_take(s);
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
                s->phase = E2B_RUNNING;
                if (r) {
                        set_timeout(s, s->end_at > time(NULL) ? (double)(s->end_at - time(NULL))
                                                              : 1.0);
                        e2b_reply_error(r, 500, "pause failed, the sandbox keeps running: %s",
                                        message ? message : strerror(-status));
                } else {
                        /* its timeout: it ends as it would have without
                         * onTimeout 'pause' */
                        log_error("e2b sandbox %s reached its timeout and could not be paused: "
                                  "killed",
                                  s->id);
                        sandbox_kill(s);
                }
                return;
        }
        sandbox_stop(s);
        s->phase = E2B_PAUSED;
        log_info("e2b sandbox %s paused in %.3f s (%llu bytes of files; %s)", s->id,
                 loop_now() - s->phase_started, (unsigned long long)bytes, PAUSE_MEMORY_NOTICE);
        if (r)
                http_reply_empty(r, 204);
}

/* Pauses s, answering r (NULL: its timeout) when done. */
static void pause_begin(struct e2b_sandbox *s, struct http_request *r)
{
        char *id;
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
        if (s->box->network.enabled) {
                if (r)
                        e2b_reply_error(r, 400,
                                        "pause: a sandbox with network egress cannot be paused");
                goto refused;
        }
        id = strdup(s->id);
        rc = id ? pause_save_home(s->box, s->id, on_saved, id) : -ENOMEM;
        if (rc < 0) {
                free(id);
                if (r)
                        e2b_reply_error(r, 500, "pause: cannot save the files: %s", strerror(-rc));
                goto refused;
        }
        loop_timer_stop(&s->ttl);
        s->phase = E2B_PAUSING;
        s->phase_started = loop_now();
        pending_set(s, r);
        return;
refused:
        if (!r) {
                log_error("e2b sandbox %s reached its timeout and cannot be paused: killed", s->id);
                sandbox_kill(s);
        }
}

static void on_ttl(lws_sorted_usec_list_t *sul)
{
        struct e2b_sandbox *s = lws_container_of(sul, struct e2b_sandbox, ttl);

        log_info("e2b sandbox %s reached its timeout", s->id);
        if (s->on_timeout_pause)
                pause_begin(s, NULL);
        else
                sandbox_kill(s);
}

/* A resume that failed: s is paused again, its files still on disk. */
static void resume_failed(struct e2b_sandbox *s, const char *message)
{
        struct http_request *r = pending_take(s);

        log_error("e2b sandbox %s: resume failed: %s", s->id, message);
        sandbox_stop(s);
        s->phase = E2B_PAUSED;
        if (r)
                e2b_reply_error(r, 500, "resume failed, the sandbox stays paused: %s", message);
}

static void on_restored(void *ctx, int status, const char *message, uint64_t bytes)
{
        struct e2b_sandbox *s = job_sandbox(ctx, E2B_RESUMING);
        struct http_request *r;

        if (!s)
                return;
        if (status) {
                resume_failed(s, message ? message : strerror(-status));
                return;
        }
        pause_forget(s->id);
        s->phase = E2B_RUNNING;
        log_info("e2b sandbox %s resumed in %.3f s (%llu bytes of files)", s->id,
                 loop_now() - s->phase_started, (unsigned long long)bytes);
        set_timeout(s, s->pending_timeout > 0 ? s->pending_timeout : s->lifetime);
        r = pending_take(s);
        if (r)
                http_reply_json(r, 201, created_json(s));
}

static void on_resume_ready(struct kernel_waiter *w, struct kernel *k, int status,
                            const char *message)
{
        struct e2b_sandbox *s = lws_container_of(w, struct e2b_sandbox, resume_waiter);
        char *id;
        int rc;

        (void)k;
        if (status) {
                resume_failed(s, message ? message : "its kernel did not start");
                return;
        }
        id = strdup(s->id);
        rc = id ? pause_restore_home(s->box, s->id, on_restored, id) : -ENOMEM;
        if (rc < 0) {
                free(id);
                resume_failed(s, strerror(-rc));
        }
}

/* Resumes paused s for r: a new box and kernel under the same id, its
 * files put back, answered 201 once it runs. */
static void resume_begin(struct e2b_sandbox *s, struct http_request *r, double timeout)
{
        const struct config *cfg = kernels_config();
        struct hostmsg_network net = {0};
        struct tenant_caller owner = {.admin = false};
        struct tenant_scope saved;
        json_t *why = NULL;
        int rc;

        if (s->phase != E2B_PAUSED) {
                e2b_reply_error(r, 409, "sandbox \"%s\" is %s", s->id,
                                s->phase == E2B_RUNNING ? "already running" : "being paused");
                return;
        }
        if (!s->spec) {
                e2b_reply_error(r, 500,
                                "resume: template '%s' is no longer served; the sandbox stays "
                                "paused",
                                s->template_id);
                return;
        }
        if (!tenants_exists(s->owner)) {
                e2b_reply_error(r, 403, "resume: the key that created sandbox \"%s\" was removed",
                                s->id);
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
                reply_quota(r, why);
                goto out;
        }
        rc = box_new(s, s->spec, &s->limits, &net);
        if (rc < 0) {
                e2b_reply_error(r, 500, "resume: cannot make a sandbox: %s", strerror(-rc));
                goto out;
        }
        s->phase = E2B_RESUMING;
        s->phase_started = loop_now();
        s->pending_timeout = timeout;
        pending_set(s, r);
        s->resume_waiter.done = on_resume_ready;
        if (!context_new(s, s->spec, "python", NULL, &s->resume_waiter, &rc))
                resume_failed(s, rc == -EAGAIN   ? "too many kernels"
                                 : rc == -EDQUOT ? "quota of this key reached"
                                                 : strerror(-rc));
out:
        tenants_scope_restore(&saved);
}

/* The kernelspec of template tid, as create finds it; NULL if none. */
static const struct jp_kernelspec *template_spec(const char *tid)
{
        const struct config *cfg = kernels_config();
        const struct jp_kernelspec *spec;

        /* The E2B templates an agent asks for by default, or a kernelspec
         * (a template's default kernel has the template's name), or a
         * template the caller built (builds.h): its base's. */
        if (strcmp(tid, DEFAULT_TEMPLATE) == 0 || strcmp(tid, "base") == 0)
                return jp_kernelspec_find(kernels_specs(), cfg->default_kernel);
        if (templates_find(tid))
                return templates_kernel(templates_find(tid), NULL);
        spec = jp_kernelspec_find(kernels_specs(), tid);
        if (!spec && builds_find(tid))
                spec = builds_kernel(builds_find(tid));
        return spec;
}

/* The built template s is of, or NULL. */
static const struct build *built_of(const struct e2b_sandbox *s)
{
        if (jp_kernelspec_find(kernels_specs(), s->template_id) || templates_find(s->template_id))
                return NULL;
        return builds_find(s->template_id);
}

/* s's box: of its template, and of its layers when it is a built one,
 * whose start command starts in it. */
static int box_new(struct e2b_sandbox *s, const struct jp_kernelspec *spec,
                   const struct hostmsg_limits *limits, const struct hostmsg_network *net)
{
        const struct config *cfg = kernels_config();
        const struct build *b = built_of(s);
        int rc;

        if (!b)
                return templates_sandbox_new(spec, limits, strcmp(cfg->sandbox, "none") != 0, net,
                                             &s->box);
        rc = builds_sandbox_new(b, limits, net, &s->box);
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

static void on_paused_found(void *ctx, const char *id, json_t *meta)
{
        json_t *lim = json_object_get(meta, "limits");
        struct e2b_sandbox *s = calloc(1, sizeof(*s));
        int *count = ctx;

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
            !string_map(json_object_get(meta, "metadata"), MAX_METADATA) ||
            !json_is_object(json_object_get(meta, "metadata")) ||
            !string_map(json_object_get(meta, "envVars"), 256) ||
            !json_is_object(json_object_get(meta, "envVars")) || !json_is_object(lim) ||
            find_any(id)) {
                log_warn("paused sandbox %s: its meta.json is not a paused sandbox's; left as it "
                         "is",
                         id);
                free(s);
                return;
        }
        s->metadata = json_incref(json_object_get(meta, "metadata"));
        s->env = json_incref(json_object_get(meta, "envVars"));
        s->limits.memory_mb = (uint64_t)json_integer_value(json_object_get(lim, "memory_mb"));
        s->limits.cpu_millis = (uint32_t)json_integer_value(json_object_get(lim, "cpu_millis"));
        s->limits.pids = (uint32_t)json_integer_value(json_object_get(lim, "pids"));
        s->limits.disk_mb = (uint64_t)json_integer_value(json_object_get(lim, "disk_mb"));
        s->lifetime = json_number_value(json_object_get(meta, "lifetime"));
        if (s->lifetime <= 0)
                s->lifetime = 300;
        s->on_timeout_pause = json_is_true(json_object_get(meta, "onTimeoutPause"));
        s->spec = template_spec(s->template_id);
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

        pause_load_all(on_paused_found, &count);
        if (count)
                log_info("%d paused e2b sandbox%s found in the state directory", count,
                         count == 1 ? "" : "es");
}

/* ---- contexts --------------------------------------------------------------- */

/* The kernelspec serving an E2B language name (python when none) in s:
 * among its template's kernels when it has one; the name as the code
 * interpreter knows it in *name. NULL if none serves it. */
static const struct jp_kernelspec *spec_for(const struct e2b_sandbox *s, const char *language,
                                            char *name, size_t size)
{
        const struct jp_kernelspec_list *specs = kernels_specs();

        if (!specs_language_name(language && *language ? language : "python", name, size))
                return NULL;
        if (!s->spec->template_name[0])
                return specs_for_language(name, kernels_config()->default_kernel);
        if (specs_speaks(s->spec, name))
                return s->spec;
        for (size_t i = 0; i < specs->count; i++) {
                if (templates_same(&specs->items[i], s->spec) &&
                    specs_speaks(&specs->items[i], name))
                        return &specs->items[i];
        }
        return NULL;
}

/* 400 for a context language no kernelspec serves, naming those that are. */
static void reply_languages(struct http_request *r, const char *language)
{
        char message[1024], installed[768];

        specs_languages(installed, sizeof(installed));
        snprintf(message, sizeof(message),
                 "no kernel for language '%.32s' here; languages: %s (install a kernelspec "
                 "whose \"language\" is it)",
                 language, installed[0] ? installed : "none");
        reply_text(r, 400, message);
}

static struct e2b_context *context_find(struct e2b_sandbox *s, const char *id)
{
        for (struct e2b_context *c = s->contexts; c; c = c->next) {
                if (strcmp(c->id, id) == 0)
                        return c;
        }
        return NULL;
}

static json_t *context_json(const struct e2b_context *c)
{
        return json_pack("{s:s, s:s, s:s}", "id", c->id, "language", c->language, "cwd", c->cwd);
}

static char **env_strv(json_t *env)
{
        size_t n = 0;
        char **v = calloc(json_object_size(env) + 1, sizeof(char *));
        const char *key;
        json_t *value;

        json_object_foreach(env, key, value) {
                size_t len = strlen(key) + json_string_length(value) + 2;

                if (!v || !(v[n] = malloc(len)))
                        break;
                snprintf(v[n++], len, "%s=%s", key, json_string_value(value));
        }
        return v;
}

/* pip installs into the user's site directory (the system's is read-only);
 * Python puts that on sys.path only if it existed at start. Made now, and
 * put where Python would (before the system's), a package pip installs is
 * importable at once, as it is in E2B's sandboxes. */
static const char user_site_code[] =
    "(lambda os, site, sys: (os.makedirs(site.getusersitepackages(), exist_ok=True),"
    " site.getusersitepackages() in sys.path or sys.path.insert(min([i for i, p in"
    " enumerate(sys.path) if p in site.getsitepackages()] or [len(sys.path)]),"
    " site.getusersitepackages())))(__import__('os'), __import__('site'),"
    " __import__('sys'))\n";

/* What a Python context's kernel runs each time it starts: E2B's result
 * formats (e2b_display.h), the user's site directory, and a move to the
 * context's directory. */
static int context_startup(const struct e2b_context *c, struct kernel *k)
{
        const char *language = json_string_value(json_object_get(k->spec->spec, "language"));
        const char *display = e2b_display_code();
        json_t *dir = json_string(c->cwd);
        char *cwd = json_dumps(dir, JSON_ENCODE_ANY), *code = NULL;
        int rc = 0;

        json_decref(dir);
        if (!language || strcmp(language, "python") != 0)
                goto out;
        if (!display || !cwd ||
            asprintf(&code, "%s%s__import__('os').chdir(%s)\n", display, user_site_code, cwd) < 0) {
                code = NULL;
                rc = -ENOMEM;
                goto out;
        }
        rc = kernel_set_startup_code(k, code);
out:
        free(code);
        free(cwd);
        return rc;
}

/* Records k as a context of s. */
static struct e2b_context *context_add(struct e2b_sandbox *s, struct kernel *k,
                                       const char *language, const char *cwd)
{
        struct e2b_context *c = calloc(1, sizeof(*c));

        if (!c)
                return NULL;
        /* Random, as E2B's are: ids made from a counter and the clock
         * collided (n ^ t repeats when t moves on by one). */
        jp_uuid4(c->id);
        snprintf(c->language, sizeof(c->language), "%s", language);
        snprintf(c->cwd, sizeof(c->cwd), "%s", cwd && *cwd ? cwd : "/home/user");
        snprintf(c->kernel_id, sizeof(c->kernel_id), "%s", k->id);
        if (context_startup(c, k) < 0) {
                free(c);
                return NULL;
        }
        c->next = s->contexts;
        s->contexts = c;
        return c;
}

/* Starts a kernel for a new context; done hears when it is ready. */
static struct e2b_context *context_new(struct e2b_sandbox *s, const struct jp_kernelspec *spec,
                                       const char *language, const char *cwd,
                                       struct kernel_waiter *w, int *err)
{
        char **env = calloc(1, sizeof(char *)), **sandbox_env = env_strv(s->env);
        struct e2b_context *c = NULL;
        char reason[256];
        size_t nenv = 0;
        struct kernel *k;

        /* The kernelspec's env first, as POST /api/kernels has it, then
         * the sandbox's envVars (checked when it was created). */
        *err = env && sandbox_env ? kernel_env_append(json_object_get(spec->spec, "env"), &env,
                                                      &nenv, reason, sizeof(reason))
                                  : -ENOMEM;
        if (*err == -EINVAL)
                log_warn("kernelspec %s: its env is refused: %s", spec->name, reason);
        for (size_t i = 0; *err == 0 && sandbox_env[i]; i++) {
                char **grown = realloc(env, (nenv + 2) * sizeof(char *));

                if (!grown) {
                        *err = -ENOMEM;
                        break;
                }
                env = grown;
                env[nenv++] = sandbox_env[i];
                env[nenv] = NULL;
                sandbox_env[i] = NULL;
        }
        jp_strv_free(sandbox_env);
        if (*err == 0)
                *err = kernel_start(spec, env, &s->box->limits, s->box, w, &k);
        jp_strv_free(env);
        if (*err == 0) {
                c = context_add(s, k, language, cwd);
                if (!c) {
                        kernel_waiter_cancel(w);
                        kernel_shutdown(k, NULL);
                        *err = -ENOMEM;
                }
        }
        return c;
}

static struct http_request *request_of(struct kernel_waiter *w)
{
        return lws_container_of(w, struct http_request, waiter);
}

static struct e2b_sandbox *sandbox_of_kernel(const char *kernel_id, struct e2b_context **ctx)
{
        for (struct e2b_sandbox *s = sandboxes; s; s = s->next) {
                for (struct e2b_context *c = s->contexts; c; c = c->next) {
                        if (strcmp(c->kernel_id, kernel_id) == 0) {
                                *ctx = c;
                                return s;
                        }
                }
        }
        return NULL;
}

static void context_remove(struct e2b_sandbox *s, struct e2b_context *c)
{
        for (struct e2b_context **link = &s->contexts; *link; link = &(*link)->next) {
                if (*link == c) {
                        *link = c->next;
                        free(c);
                        return;
                }
        }
}

static void on_context_ready(struct kernel_waiter *w, struct kernel *k, int status,
                             const char *message)
{
        struct http_request *r = request_of(w);
        struct e2b_context *c;
        struct e2b_sandbox *s = sandbox_of_kernel(k->id, &c);

        if (!s) {
                reply_text(r, 500, "the sandbox went away");
                return;
        }
        if (status) {
                context_remove(s, c);
                reply_text(r, 500, message ? message : "the context failed to start");
                return;
        }
        http_reply_json(r, 200, context_json(c));
}

/* ---- control plane ---------------------------------------------------------- */

static void on_created(struct kernel_waiter *w, struct kernel *k, int status, const char *message)
{
        struct http_request *r = request_of(w);
        struct e2b_context *c;
        struct e2b_sandbox *s = sandbox_of_kernel(k->id, &c);

        if (!s) {
                e2b_reply_error(r, 500, "the sandbox went away while starting");
                return;
        }
        if (status) {
                e2b_reply_error(r, 500, "the sandbox failed to start: %s",
                                message ? message : "unknown error");
                sandbox_kill(s);
                return;
        }
        s->ready = true;
        /* The lifetime asked for is the client's from the answer on: a
         * start slowed by a busy host does not eat into it. */
        set_timeout(s, s->lifetime);
        http_reply_json(r, 201, created_json(s));
}

static bool string_map(json_t *v, size_t max)
{
        const char *key;
        json_t *value;

        if (v && !json_is_object(v))
                return false;
        if (json_object_size(v) > max)
                return false;
        json_object_foreach(v, key, value) {
                if (!json_is_string(value) || strlen(key) > 256 || json_string_length(value) > 4096)
                        return false;
        }
        return true;
}

/* A lifetime in seconds from body's "timeout" (dflt when absent); false
 * after replying 400 when it is not a number within the server's maximum. */
static bool timeout_of(struct http_request *r, json_t *body, double dflt, double *seconds)
{
        json_t *timeout = json_object_get(body, "timeout");
        double max = kernels_config()->e2b_max_timeout;

        *seconds = json_is_number(timeout) ? json_number_value(timeout) : timeout ? NAN : dflt;
        if (!timeout || (isfinite(*seconds) && *seconds > 0 && *seconds <= max))
                return true;
        e2b_reply_error(r, 400, "timeout must be from 1 to %g seconds", max);
        return false;
}

/* What a create request asks for that Glovebox cannot give, as a message
 * naming the field; NULL when it can be served. The Python SDK always sends
 * allow_internet_access (true by default), "autoPause": false and
 * "autoResume": {"enabled": false}: those are requests for nothing Glovebox
 * lacks. Internet access is granted "within the operator's network policy",
 * which without --egress-allow is no network: the sandbox's info says
 * allowInternetAccess false, unless the operator chose
 * --e2b-refuse-internet. With an egress policy, create_network decides. */
static const char *create_refusal(json_t *body)
{
        json_t *net = json_object_get(body, "network");
        json_t *resume = json_object_get(body, "autoResume");

        if (json_is_true(json_object_get(body, "allow_internet_access")) && !egress_enabled() &&
            kernels_config()->e2b_refuse_internet)
                return "allow_internet_access: this Glovebox refuses requests for internet "
                       "access (its sandboxes have no network); create with "
                       "allow_internet_access false";
        if (net && !json_is_object(net))
                return "network must be an object";
        if (egress_enabled() && (json_object_size(json_object_get(net, "rules")) > 0 ||
                                 json_object_get(net, "egressProxy")))
                return "network.rules and egressProxy are not supported: Glovebox filters "
                       "egress by address and name (network.allowOut, network.denyOut)";
        if (!egress_enabled() && (json_array_size(json_object_get(net, "allowOut")) > 0 ||
                                  json_object_size(json_object_get(net, "rules")) > 0 ||
                                  json_object_get(net, "egressProxy")))
                return "network.allowOut, rules and egressProxy are not supported: Glovebox "
                       "sandboxes have no network (loopback only)";
        if (json_is_true(json_object_get(body, "autoPause")) && !pause_enabled())
                return "autoPause (lifecycle onTimeout 'pause') is not enabled: this Glovebox "
                       "has no --state-dir";
        if (resume &&
            !(json_is_object(resume) && json_is_false(json_object_get(resume, "enabled"))))
                return "autoResume.enabled is not supported: a paused Glovebox sandbox resumes "
                       "on connect (Sandbox.connect), not on traffic";
        if (json_array_size(json_object_get(body, "volumeMounts")) > 0)
                return "volumeMounts are not supported";
        if (json_object_get(body, "mcp"))
                return "mcp is not supported";
        return NULL;
}

/* The egress an E2B create asks for, within the operator's policy:
 * allow_internet_access (the SDKs send true unless told otherwise) gives
 * all the operator allows, network.allowOut narrows it and network.denyOut
 * adds denials. In E2B allowOut wins over denyOut and "deny 0.0.0.0/0"
 * means "only allowOut": that entry is read so, every other denial wins.
 * Without an operator policy nothing is enabled (create_refusal has the
 * old answers). 0 (net->enabled says whether) or -EINVAL with err. */
/* The ports of the sandbox that need no token (ports.h), from the
 * metadata key E2B_PUBLIC_PORTS_KEY, checked before the sandbox is made.
 * Not E2B's network.allowPublicTraffic: the Python SDK sends that as true
 * whenever any network option is given, so it says nothing of what the
 * caller chose; a port takes the API key or the traffic access token, as
 * E2B's do with allowPublicTraffic false. */
static void set_public_traffic(struct e2b_sandbox *s, json_t *body)
{
        json_t *v = json_object_get(json_object_get(body, "metadata"), E2B_PUBLIC_PORTS_KEY);

        if (json_is_string(v))
                ports_parse_public(json_string_value(v), s->box, NULL, 0);
}

static int create_network(json_t *body, struct hostmsg_network *net, char *err, size_t errlen)
{
        json_t *jnet = json_object_get(body, "network");
        json_t *allow = json_object_get(jnet, "allowOut");
        json_t *deny = json_object_get(jnet, "denyOut");
        bool internet = json_is_true(json_object_get(body, "allow_internet_access"));
        bool only_allowed = false;
        json_t *denials = json_array();
        size_t i;
        json_t *v;
        int rc = 0;

        memset(net, 0, sizeof(*net));
        if (!denials)
                return -ENOMEM;
        if (!egress_enabled())
                goto out;
        if (deny && !json_is_array(deny)) {
                snprintf(err, errlen, "network.denyOut must be an array");
                rc = -EINVAL;
                goto out;
        }
        json_array_foreach(deny, i, v) {
                if (json_is_string(v) && strcmp(json_string_value(v), "0.0.0.0/0") == 0)
                        only_allowed = true;
                else
                        json_array_append(denials, v);
        }
        if (json_array_size(allow) == 0) {
                /* No list: everything the operator allows, if asked for. */
                if (!internet || only_allowed)
                        goto out;
                allow = NULL;
        }
        rc = egress_request(allow, denials, "network", net, err, errlen);
out:
        json_decref(denials);
        return rc;
}

/* 429 past the key's quota, in E2B's error shape with the quota and what
 * the key holds (kernels_quota_check); takes why. */
static void reply_quota(struct http_request *r, json_t *why)
{
        json_object_set_new(why, "code", json_integer(429));
        http_reply_json(r, 429, why);
}

static void create_sandbox(struct http_request *r)
{
        const struct config *cfg = kernels_config();
        json_t *body = api_parse_body(r);
        json_t *template, *metadata, *env;
        const struct jp_kernelspec *spec = NULL;
        const char *tid, *refusal;
        struct hostmsg_limits limits;
        struct hostmsg_network net = {0};
        struct e2b_sandbox *s = NULL;
        struct kernel *pooled;
        json_t *why = NULL;
        char err[256];
        double ttl;
        int rc;

        if (!body)
                return;
        if (fleet_draining()) {
                /* The front proxy sends creates elsewhere once the agent
                 * says "drain" (fleet.h); one that came meanwhile is told. */
                e2b_reply_error(r, 503, "This host (%s) is draining: it starts no new sandboxes",
                                fleet_host_id()[0] ? fleet_host_id() : "single host");
                json_decref(body);
                return;
        }
        kernels_default_limits(&limits);
        template = json_object_get(body, "templateID");
        metadata = json_object_get(body, "metadata");
        env = json_object_get(body, "envVars");
        tid = json_is_string(template) ? json_string_value(template) : DEFAULT_TEMPLATE;
        spec = template_spec(tid);
        refusal = create_refusal(body);
        if (!spec) {
                e2b_reply_error(r, 404, "template '%.64s' not found; templates: %s%s%s", tid,
                                DEFAULT_TEMPLATE, templates_names()[0] ? ", " : "",
                                templates_names());
        } else if (!timeout_of(r, body, 300, &ttl)) {
                /* answered */
        } else if (!string_map(metadata, MAX_METADATA) || !string_map(env, 256)) {
                e2b_reply_error(r, 400, "metadata and envVars must be objects of strings");
        } else if (json_object_get(metadata, E2B_PUBLIC_PORTS_KEY) &&
                   ports_parse_public(
                       json_string_value(json_object_get(metadata, E2B_PUBLIC_PORTS_KEY)), NULL,
                       err, sizeof(err)) < 0) {
                e2b_reply_error(r, 400, "metadata %s: %s", E2B_PUBLIC_PORTS_KEY, err);
        } else if (refusal) {
                e2b_reply_error(r, 400, "%s", refusal);
        } else if (create_network(body, &net, err, sizeof(err)) < 0) {
                e2b_reply_error(r, 400, "%s", err);
        } else if (net.enabled && strcmp(cfg->sandbox, "none") == 0) {
                e2b_reply_error(r, 400, "network: egress needs sandboxes (--sandbox full)");
        } else if (kernels_quota_check(&limits, NULL, &why) < 0) {
                /* Before the pool too: a pooled kernel counts for the key
                 * that takes it. */
                reply_quota(r, why);
        } else {
                s = calloc(1, sizeof(*s));
                if (!s || fleet_new_sandbox_id(s->id) < 0 || jp_random_hex(s->token, 32) < 0) {
                        free(s);
                        e2b_reply_error(r, 500, "out of memory");
                        goto out;
                }
                snprintf(s->owner, sizeof(s->owner), "%s", tenants_owner_now());
                snprintf(s->template_id, sizeof(s->template_id), "%s", tid);
                s->spec = spec;
                s->on_timeout_pause = json_is_true(json_object_get(body, "autoPause"));
                s->metadata = metadata ? json_incref(metadata) : json_object();
                /* A built template's env, then the sandbox's own. */
                s->env = built_of(s) ? json_deep_copy(builds_env(built_of(s))) : json_object();
                if (env)
                        json_object_update(s->env, env);
                if (built_of(s))
                        snprintf(s->workdir, sizeof(s->workdir), "%s",
                                 builds_workdir(built_of(s)));
                jp_timestamp_now(s->started_at);
                /* Its timer starts once it is ready (on_created); a start
                 * that fails or hangs past --kernel-start-timeout ends it. */
                s->lifetime = ttl;
                s->end_at = time(NULL) + (time_t)ttl;
                /* Without envVars, the default context can be a pooled
                 * kernel, and the sandbox its sandbox. */
                pooled = json_object_size(s->env) == 0 && !net.enabled && !built_of(s)
                                 ? pool_take(spec)
                                 : NULL;
                if (pooled) {
                        s->box = sandbox_ref(pooled->sandbox);
                        s->limits = s->box->limits;
                        set_public_traffic(s, body);
                        s->next = sandboxes;
                        sandboxes = s;
                        r->waiter.done = on_created;
                        if (context_add(s, pooled, "python", NULL)) {
                                kernel_when_ready(pooled, &r->waiter);
                        } else {
                                kernel_shutdown(pooled, NULL);
                                sandbox_kill(s);
                                e2b_reply_error(r, 500, "out of memory");
                        }
                        goto out;
                }
                rc = box_new(s, spec, &limits, &net);
                if (rc == 0) {
                        s->limits = s->box->limits;
                        set_public_traffic(s, body);
                        s->next = sandboxes;
                        sandboxes = s;
                        r->waiter.done = on_created;
                        if (!context_new(s, spec, "python", NULL, &r->waiter, &rc)) {
                                sandbox_kill(s);
                                e2b_reply_error(r, rc == -EAGAIN || rc == -EDQUOT ? 429 : 500,
                                                "cannot start the sandbox: %s",
                                                rc == -EAGAIN   ? "too many kernels"
                                                : rc == -EDQUOT ? "quota of this key reached"
                                                                : strerror(-rc));
                        }
                } else {
                        json_decref(s->metadata);
                        json_decref(s->env);
                        free(s);
                        e2b_reply_error(r, 500, "cannot make a sandbox: %s", strerror(-rc));
                }
        }
out:
        egress_network_clear(&net);
        json_decref(body);
}

/* "metadata=k%3Dv%26k2%3Dv2": decoded once by lws, then a form string
 * whose keys and values are percent-encoded once more. */
static void url_decode(const char *in, size_t len, char *out, size_t size)
{
        size_t o = 0;

        for (size_t i = 0; i < len && o + 1 < size; i++) {
                if (in[i] == '%' && i + 2 < len) {
                        char hex[3] = {in[i + 1], in[i + 2], 0};

                        out[o++] = (char)strtol(hex, NULL, 16);
                        i += 2;
                } else {
                        out[o++] = in[i] == '+' ? ' ' : in[i];
                }
        }
        out[o] = '\0';
}

static bool metadata_matches(const struct e2b_sandbox *s, const char *filter)
{
        char key[512], value[4200];

        for (const char *p = filter; p && *p;) {
                const char *amp = strchr(p, '&');
                size_t n = amp ? (size_t)(amp - p) : strlen(p);
                const char *eq = memchr(p, '=', n);

                if (eq) {
                        url_decode(p, (size_t)(eq - p), key, sizeof(key));
                        url_decode(eq + 1, n - (size_t)(eq - p) - 1, value, sizeof(value));
                        if (!json_is_string(json_object_get(s->metadata, key)) ||
                            strcmp(json_string_value(json_object_get(s->metadata, key)), value))
                                return false;
                }
                p = amp ? amp + 1 : NULL;
        }
        return true;
}

static void list_sandboxes(struct http_request *r)
{
        char filter[4096], state[64], arg[64];
        const char *m = lws_get_urlarg_by_name(r->wsi, "metadata=", filter, sizeof(filter));
        const char *st = lws_get_urlarg_by_name(r->wsi, "state=", state, sizeof(state));
        const char *lim = lws_get_urlarg_by_name(r->wsi, "limit=", arg, sizeof(arg));
        long limit = lim ? strtol(lim, NULL, 10) : 100;
        long skip = 0, index = 0;
        json_t *list = json_array();
        char token[32];

        if (lws_get_urlarg_by_name(r->wsi, "nextToken=", token, sizeof(token)))
                skip = strtol(strchr(token, '=') + 1, NULL, 10);
        if (limit <= 0 || limit > 1000)
                limit = 100;
        for (struct e2b_sandbox *s = sandboxes; list && s; s = s->next) {
                if (!s->ready || !tenants_may_reach(s->owner) ||
                    (st && !strstr(st, s->phase == E2B_PAUSED ? "paused" : "running")) ||
                    (m && !metadata_matches(s, m)))
                        continue;
                if (index++ < skip)
                        continue;
                if ((long)json_array_size(list) == limit) {
                        snprintf(r->next_token, sizeof(r->next_token), "%ld", skip + limit);
                        break;
                }
                json_array_append_new(list, sandbox_json(s, false));
        }
        fleet_reply_list(r, list);
}

static bool authorized_api(struct http_request *r)
{
        char key[512];
        bool ok;

        /* (With --no-auth too: it makes the caller an admin.) */
        if (http_authorized(r->wsi))
                return true;
        ok = header(r, "x-api-key:", key, sizeof(key)) && http_authorized_key(key, strlen(key));
        explicit_bzero(key, sizeof(key));
        return ok;
}

/* E2B's features that Glovebox lacks, named in the 400 each gets, so that
 * an SDK call reaching one says what it cannot do, never "not found": the
 * top-level routes, and the actions on a sandbox. */
static const char *lacking_route(const char *route)
{
        static const char *const routes[] = {"snapshots",     "volumes",
                                             "sandboxes/metrics", "v2/sandboxes/metrics", "teams",
                                             "access-tokens", "api-keys"};

        for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++) {
                size_t n = strlen(routes[i]);

                if (strncmp(route, routes[i], n) == 0 && (route[n] == '\0' || route[n] == '/'))
                        return routes[i];
        }
        return NULL;
}

static bool lacking_action(const char *action)
{
        static const char *const actions[] = {"snapshots", "fork",      "network",
                                              "logs",      "refreshes", NULL};

        return jp_strv_contains(actions, action);
}

/* getMetrics: E2B keeps a series of samples; Glovebox answers the one
 * taken now (a list of one), whatever start and end ask for. */
static void sandbox_metrics(struct http_request *r, struct e2b_sandbox *s)
{
        struct sandbox_usage u;

        if (!s->box || monitor_sandbox_usage(s->box, &u) < 0)
                http_reply_json(r, 200, json_array());
        else
                http_reply_json(r, 200, json_pack("[o]", monitor_usage_json(&u)));
}

static void control_plane(struct http_request *r, const char *route)
{
        char id[64], rest[64];
        struct e2b_sandbox *s;
        json_t *body;

        if (!authorized_api(r)) {
                e2b_reply_error(r, 401, "Invalid API key");
                return;
        }
        if (builds_handle(r, route))
                return;
        if (lacking_route(route)) {
                e2b_reply_error(r, 400, "%s: not supported by Glovebox", lacking_route(route));
                return;
        }
        if (strcmp(route, "v2/sandboxes") == 0 || strcmp(route, "sandboxes") == 0) {
                if (r->method == HTTP_POST)
                        create_sandbox(r);
                else if (r->method == HTTP_GET)
                        list_sandboxes(r);
                else
                        e2b_reply_error(r, 405, "use GET or POST");
                return;
        }
        rest[0] = '\0';
        if (sscanf(route, "v2/sandboxes/%63[^/]/%63s", id, rest) < 1 &&
            sscanf(route, "sandboxes/%63[^/]/%63s", id, rest) < 1) {
                e2b_reply_error(r, 404, "no route %s", route);
                return;
        }
        s = find(id);
        if (!s || !s->ready) {
                e2b_reply_error(r, 404, "sandbox \"%.64s\" not found", id);
                return;
        }
        if (!rest[0] && r->method == HTTP_GET) {
                http_reply_json(r, 200, sandbox_json(s, true));
        } else if (!rest[0] && r->method == HTTP_DELETE) {
                if (s->phase == E2B_PAUSING || s->phase == E2B_RESUMING) {
                        e2b_reply_error(r, 409, "sandbox \"%s\" is being %s; try again", s->id,
                                        s->phase == E2B_PAUSING ? "paused" : "resumed");
                        return;
                }
                sandbox_kill(s);
                http_reply_empty(r, 204);
        } else if (strcmp(rest, "pause") == 0 && r->method == HTTP_POST) {
                /* {"memory": true} (the SDKs' default) gets the files: the
                 * sandbox's info says so (sandbox_json). */
                pause_begin(s, r);
        } else if ((strcmp(rest, "timeout") == 0 || strcmp(rest, "connect") == 0 ||
                    strcmp(rest, "resume") == 0) &&
                   r->method == HTTP_POST) {
                double t;

                body = api_parse_body(r);
                if (!body || !timeout_of(r, body, 0, &t)) {
                        json_decref(body);
                        return;
                }
                json_decref(body);
                /* A connect resumes a paused sandbox, as E2B's does. */
                if (strcmp(rest, "resume") == 0 ||
                    (strcmp(rest, "connect") == 0 && s->phase == E2B_PAUSED)) {
                        resume_begin(s, r, t);
                        return;
                }
                if (s->phase != E2B_RUNNING) {
                        e2b_reply_error(r, 409, "sandbox \"%s\" is %s", s->id,
                                        s->phase == E2B_PAUSED    ? "paused"
                                        : s->phase == E2B_PAUSING ? "being paused"
                                                                  : "being resumed");
                        return;
                }
                /* setTimeout sets the lifetime; a connect only ever extends
                 * it, as E2B's does (the Python SDK sends its default 300 s
                 * on every connect). Without a timeout, nothing changes. */
                if (t > 0 && (strcmp(rest, "timeout") == 0 || time(NULL) + (time_t)t > s->end_at))
                        set_timeout(s, t);
                if (strcmp(rest, "connect") == 0)
                        http_reply_json(r, 200, created_json(s));
                else
                        http_reply_empty(r, 204);
        } else if (strcmp(rest, "metrics") == 0 && r->method == HTTP_GET) {
                sandbox_metrics(r, s);
        } else if (lacking_action(rest)) {
                e2b_reply_error(r, 400, "%s: not supported by Glovebox", rest);
        } else {
                e2b_reply_error(r, 404, "no route %s", route);
        }
}

/* ---- the code interpreter ----------------------------------------------------- */

static void forget_pending_run(struct http_request *r)
{
        json_t *body = r->ctx;

        json_decref(body);
        r->ctx = NULL;
        r->cleanup = NULL;
}

static void on_run_context_ready(struct kernel_waiter *w, struct kernel *k, int status,
                                 const char *message)
{
        struct http_request *r = request_of(w);
        json_t *body = json_incref(r->ctx);
        struct e2b_context *c;
        struct e2b_sandbox *s = sandbox_of_kernel(k->id, &c);

        forget_pending_run(r);
        if (!s) {
                reply_text(r, 500, "the sandbox went away");
        } else if (status) {
                context_remove(s, c);
                reply_text(r, 500, message ? message : "the context failed to start");
        } else {
                execute_start(r, k, json_string_value(json_object_get(body, "code")),
                              json_object_get(body, "env_vars"), 0);
        }
        json_decref(body);
}

/* Runs the code of body once a new default context of language is ready. */
static void run_in_new_context(struct http_request *r, struct e2b_sandbox *s,
                               const struct jp_kernelspec *spec, const char *language, json_t *body)
{
        size_t n = 0;
        int err;

        for (struct e2b_context *x = s->contexts; x; x = x->next)
                n++;
        if (n >= MAX_CONTEXTS) {
                reply_text(r, 400, "too many contexts in this sandbox");
                return;
        }
        r->ctx = json_incref(body);
        r->cleanup = forget_pending_run;
        r->waiter.done = on_run_context_ready;
        if (!context_new(s, spec, language, NULL, &r->waiter, &err)) {
                forget_pending_run(r);
                reply_text(r, err == -EAGAIN || err == -EDQUOT ? 429 : 500,
                           err == -EDQUOT ? "quota of this key reached"
                                          : "cannot start a kernel for the context");
        }
}

static void run_code(struct http_request *r, struct e2b_sandbox *s)
{
        json_t *body = api_parse_body(r);
        json_t *code, *ctx_id, *language, *env;
        struct e2b_context *c = NULL;
        struct kernel *k;

        if (!body)
                return;
        code = json_object_get(body, "code");
        ctx_id = json_object_get(body, "context_id");
        language = json_object_get(body, "language");
        env = json_object_get(body, "env_vars");
        if (!json_is_string(code) || (env && !string_map(env, 256))) {
                reply_text(r, 400, "code must be a string and env_vars an object of strings");
                goto out;
        }
        if (json_is_string(ctx_id) && json_is_string(language)) {
                reply_text(r, 400, "give context_id or language, not both");
                goto out;
        }
        if (json_is_string(ctx_id)) {
                c = context_find(s, json_string_value(ctx_id));
                if (!c) {
                        char msg[128];

                        snprintf(msg, sizeof(msg), "Context %.64s not found",
                                 json_string_value(ctx_id));
                        reply_text(r, 404, msg);
                        goto out;
                }
        } else {
                char want[32];
                const struct jp_kernelspec *spec =
                    spec_for(s, json_string_value(language), want, sizeof(want));

                if (!spec) {
                        reply_languages(r, json_is_string(language) ? json_string_value(language)
                                                                    : "python");
                        goto out;
                }
                /* The oldest context of the language is its default one. */
                for (struct e2b_context *x = s->contexts; x; x = x->next) {
                        if (strcmp(x->language, want) == 0)
                                c = x;
                }
                if (!c) {
                        /* None yet: made now, as E2B's code interpreter does. */
                        run_in_new_context(r, s, spec, want, body);
                        goto out;
                }
        }
        k = kernel_find(c->kernel_id);
        if (!k) {
                reply_text(r, 404, "The context's kernel is gone");
                goto out;
        }
        /* The SDK keeps its own time; an abandoned call interrupts the cell. */
        execute_start(r, k, json_string_value(code), env, 0);
out:
        json_decref(body);
}

static void on_context_restarted(struct kernel_waiter *w, struct kernel *k, int status,
                                 const char *message)
{
        (void)k;
        if (status)
                reply_text(request_of(w), 500, message ? message : "the context failed to restart");
        else
                http_reply_empty(request_of(w), 204);
}

static void contexts(struct http_request *r, struct e2b_sandbox *s, const char *route)
{
        char id[64], action[32] = "";
        struct e2b_context *c;
        struct kernel *k;
        json_t *body, *list;
        int err;

        if (strcmp(route, "contexts") == 0 && r->method == HTTP_GET) {
                list = json_array();
                for (c = s->contexts; list && c; c = c->next)
                        json_array_append_new(list, context_json(c));
                http_reply_json(r, 200, list);
                return;
        }
        if (strcmp(route, "contexts") == 0 && r->method == HTTP_POST) {
                const struct jp_kernelspec *spec;
                const char *language, *cwd;
                char name[32];
                size_t n = 0;

                body = api_parse_body(r);
                if (!body)
                        return;
                language = json_string_value(json_object_get(body, "language"));
                cwd = json_string_value(json_object_get(body, "cwd"));
                spec = spec_for(s, language, name, sizeof(name));
                for (c = s->contexts; c; c = c->next)
                        n++;
                if (!spec)
                        reply_languages(r, language ? language : "python");
                else if (cwd && cwd[0] != '/')
                        reply_text(r, 400, "cwd must be an absolute path");
                else if (n >= MAX_CONTEXTS)
                        reply_text(r, 400, "too many contexts in this sandbox");
                else {
                        r->waiter.done = on_context_ready;
                        if (!context_new(s, spec, name, cwd, &r->waiter, &err))
                                reply_text(r, err == -EAGAIN || err == -EDQUOT ? 429 : 500,
                                           err == -EDQUOT
                                               ? "quota of this key reached"
                                               : "cannot start a kernel for the context");
                }
                json_decref(body);
                return;
        }
        if (sscanf(route, "contexts/%63[^/]/%31s", id, action) < 1 || !(c = context_find(s, id))) {
                reply_text(r, 404, "Context not found");
                return;
        }
        k = kernel_find(c->kernel_id);
        if (strcmp(action, "restart") == 0 && r->method == HTTP_POST && k) {
                /* Answered once the context is ready again, as E2B's is. */
                r->waiter.done = on_context_restarted;
                kernel_restart(k, &r->waiter);
        } else if (!action[0] && r->method == HTTP_DELETE) {
                if (k)
                        kernel_shutdown(k, NULL);
                context_remove(s, c);
                http_reply_empty(r, 204);
        } else {
                reply_text(r, k ? 405 : 404, k ? "Method not allowed" : "Context not found");
        }
}

/* ---- routing ---------------------------------------------------------------- */

struct e2b_sandbox *e2b_sandbox_of(struct http_request *r)
{
        char id[64], token[128];
        struct e2b_sandbox *s;

        /* Found whoever asks: its access token is the credential here. A
         * sandbox whose key was removed is reached by admins only, so its
         * token stops working with the key. */
        if (header(r, "e2b-sandbox-id:", id, sizeof(id)) && (s = find_any(id)) && s->ready &&
            s->phase != E2B_RUNNING && tenants_exists(s->owner)) {
                e2b_reply_error(r, 502, "The sandbox is %s: connect to it to resume it",
                                s->phase == E2B_RESUMING ? "being resumed" : "paused");
                return NULL;
        }
        if (!header(r, "e2b-sandbox-id:", id, sizeof(id)) || !(s = find_any(id)) || !s->ready ||
            !tenants_exists(s->owner)) {
                /* 502 is what E2B answers for a sandbox that is gone; the
                 * SDK turns it into its "sandbox was killed" error. */
                e2b_reply_error(r, 502, "The sandbox was not found (killed or timed out)");
                return NULL;
        }
        if (!kernels_config()->no_auth &&
            !((header(r, "x-access-token:", token, sizeof(token)) ||
               header(r, "e2b-traffic-access-token:", token, sizeof(token))) &&
              token_matches(token, s->token))) {
                e2b_reply_error(r, 401, "Missing or wrong sandbox access token");
                return NULL;
        }
        /* Its requests run as its owner: the kernels of its contexts are
         * the owner's. */
        if (!kernels_config()->no_auth) {
                struct tenant_caller owner = {.admin = false};

                snprintf(owner.name, sizeof(owner.name), "%s", s->owner);
                tenants_set_caller(&owner);
        }
        return s;
}

static bool sandbox_plane(struct http_request *r, char *port, size_t size)
{
        return header(r, "e2b-sandbox-port:", port, size);
}

bool e2b_admit(struct http_request *r)
{
        char port[16];
        bool ok;

        /* A template build's upload: its signed URL is its credential. */
        if (builds_upload_admit(r, r->path + 4 + strspn(r->path + 4, "/"), &ok))
                return ok;
        if (sandbox_plane(r, port, sizeof(port)))
                return e2b_sandbox_of(r) != NULL;
        if (authorized_api(r))
                return true;
        e2b_reply_error(r, 401, "Invalid API key");
        return false;
}

void e2b_prepare(struct http_request *r)
{
        const char *route = r->path + 4;
        struct e2b_sandbox *s;
        char port[16];

        if (builds_upload_prepare(r, route + strspn(route, "/")))
                return;
        if (!sandbox_plane(r, port, sizeof(port)) || strcmp(port, E2B_ENVD_PORT) != 0)
                return;
        s = e2b_sandbox_of(r);
        if (s)
                envd_prepare(r, s, route);
}

void e2b_handle(struct http_request *r)
{
        /* A trailing slash on E2B_SANDBOX_URL makes "//execute". */
        const char *route = r->path + 4 + strspn(r->path + 4, "/");
        struct e2b_sandbox *s;
        char port[16];

        if (builds_upload_handle(r, route))
                return;
        if (!sandbox_plane(r, port, sizeof(port))) {
                control_plane(r, route);
                return;
        }
        s = e2b_sandbox_of(r);
        if (!s)
                return;
        if (strcmp(port, E2B_JUPYTER_PORT) == 0) {
                if (strcmp(route, "execute") == 0 && r->method == HTTP_POST)
                        run_code(r, s);
                else if (strncmp(route, "contexts", 8) == 0)
                        contexts(r, s, route);
                else
                        reply_text(r, 404, "Not found");
        } else {
                envd_handle(r, s, route);
        }
}
