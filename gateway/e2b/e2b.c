#include "autoconf.h"

#include "gateway/e2b/e2b.h"
#include "gateway/core/ports_domain.h"
#include "gateway/e2b/builds.h"
#include "gateway/core/fleet.h"
#include "gateway/core/http.h"
#include "gateway/e2b/contexts.h"
#include "gateway/e2b/list.h"
#include "gateway/e2b/metrics.h"
#include "gateway/e2b/sandbox.h"
#include "gateway/e2b/sudo.h"
#include "gateway/kernels/egress.h"
#include "gateway/kernels/kernels.h"
#include "gateway/core/loop.h"
#include "gateway/kernels/pause.h"
#include "gateway/kernels/pool.h"
#include "gateway/kernels/templates.h"
#include "gateway/core/tenants.h"
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

/* The envd whose features are served (docs/e2b-protocol.md §7): octet-stream
 * and gzip uploads (0.5.7), file metadata (0.6.2), watch events with their
 * entry (0.6.3), allowNetworkMounts (0.6.4). */
#define E2B_ENVD_VERSION "0.6.4"
#define DEFAULT_TEMPLATE "code-interpreter-v1"
#define MAX_METADATA     64
/* A sandbox's envVars, in every command and kernel of it: half of what a
 * process's environment and command line may hold together
 * (protocol/hostmsg.h), so that a command always has the other half for
 * its own command line and envs. */
#define MAX_ENV_VARS       (HOSTMSG_MAX_ENV / 2)
#define MAX_ENV_VARS_BYTES (HOSTMSG_MAX_EXEC_BYTES / 2)

static struct e2b_sandbox *sandboxes;
static bool shutting_down; /* paused sandboxes keep their state on disk */

struct e2b_sandbox *e2b_sandboxes(void)
{
        return sandboxes;
}

static int box_new(struct e2b_sandbox *s, const struct jp_kernelspec *spec,
                   const struct hostmsg_limits *limits, const struct hostmsg_network *net);
static void start_sudo(struct e2b_sandbox *s);
static void reply_created(struct e2b_sandbox *s, struct http_request *r);

/* ---- helpers ------------------------------------------------------------- */

/* The ports of the sandbox that need no token (ports.h): every port when
 * the create said network.allowPublicTraffic true (E2B's default, which
 * the operator makes Glovebox's with --e2b-public-traffic), else those its
 * metadata names under E2B_PUBLIC_PORTS_KEY (checked before the sandbox
 * was made). A private port takes the API key or the traffic access
 * token, as E2B's do with allowPublicTraffic false. Applied to each box
 * the sandbox gets: at create and at every resume. */
static void set_public_traffic(struct e2b_sandbox *s)
{
        json_t *v = json_object_get(s->metadata, E2B_PUBLIC_PORTS_KEY);

        s->box->all_ports_public = s->ports_public;
        if (json_is_string(v))
                sandbox_parse_public_ports(json_string_value(v), s->box, NULL, 0);
        /* Checked at create: the Host header its apps get. */
        if (*s->request_host)
                sandbox_parse_request_host(s->request_host, s->box, NULL, 0);
}


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

/* The E2B sandbox ids, as kernels/sandboxes.h's names. */
static bool name_resolve(const char *name, struct sandbox **box, const char **owner)
{
        struct e2b_sandbox *s = e2b_find_ready(name);

        if (!s)
                return false;
        *box = s->box;
        *owner = s->owner;
        return true;
}

static bool name_token_ok(const char *name, const char *token)
{
        struct e2b_sandbox *s = e2b_find_ready(name);

        return s && token_matches(token, s->token);
}

const struct sandbox_names e2b_names = {.resolve = name_resolve, .token_ok = name_token_ok};

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
static const char *env_vars_refusal(json_t *env, char *why, size_t size);
static void reply_quota(struct http_request *r, json_t *why);

/* Ends what runs of s: its commands, its kernels and its box. */
static void sandbox_stop(struct e2b_sandbox *s)
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
        if (s->phase == E2B_RESUMING && s->resume_waiter.on)
                waiter_cancel(&s->resume_waiter);
        if (s->pending)
                e2b_reply_error(pending_take(s), 410, "the sandbox was removed");
        sandbox_stop(s);
        /* A paused sandbox outlives the gateway; a removed one is gone
         * for good, its saved files with it. */
        if (!shutting_down && s->phase != E2B_RUNNING)
                pause_forget(s->id);
        e2b_metrics_clear(&s->metrics);
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
        e2b_metrics_start(&s->metrics, s->box);
        r = pending_take(s);
        if (r)
                reply_created(s, r);
}

static void on_resume_ready(struct waiter *w, void *subject, int status,
                            const char *message)
{
        struct kernel *k = subject;
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
        const struct config *cfg = config_get();
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
        set_public_traffic(s);
        start_sudo(s);
        s->phase = E2B_RESUMING;
        s->phase_started = loop_now();
        s->pending_timeout = timeout;
        pending_set(s, r);
        s->resume_waiter.done = on_resume_ready;
        if (!e2b_context_new(s, s->spec, "python", NULL, &s->resume_waiter, &rc))
                resume_failed(s, rc == -EAGAIN   ? "too many kernels"
                                 : rc == -EDQUOT ? "quota of this key reached"
                                                 : strerror(-rc));
        else
                e2b_contexts_add_defaults(s);
out:
        tenants_scope_restore(&saved);
}

/* The kernelspec of template tid, as create finds it; NULL if none. */
static const struct jp_kernelspec *template_spec(const char *tid)
{
        const struct config *cfg = config_get();
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
        const struct config *cfg = config_get();
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
            !e2b_string_map(json_object_get(meta, "metadata"), MAX_METADATA) ||
            !json_is_object(json_object_get(meta, "metadata")) ||
            env_vars_refusal(json_object_get(meta, "envVars"), why, sizeof(why)) ||
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

/* ---- control plane ---------------------------------------------------------- */

/* Answers r (a create, a resume or a connect that resumed) with s's
 * model: now, or once its sudo service listens. */
static void reply_created(struct e2b_sandbox *s, struct http_request *r)
{
        if (s->sudo == E2B_SUDO_STARTING) {
                pending_set(s, r);
                s->pending_created = true;
                return;
        }
        http_reply_json(r, 201, created_json(s));
}

static void on_sudo(struct e2b_sandbox *s)
{
        struct http_request *r;

        if (!s->pending_created)
                return;
        s->pending_created = false;
        r = pending_take(s);
        if (r)
                http_reply_json(r, 201, created_json(s));
}

/* The sandbox's sudo service, on its box just made. */
static void start_sudo(struct e2b_sandbox *s)
{
        if (s->box && strcmp(config_get()->sandbox, "none") != 0)
                e2b_sudo_start(s, on_sudo);
        else
                s->sudo = E2B_SUDO_NONE; /* --sandbox=none: no root of its own */
}

static void on_created(struct waiter *w, void *subject, int status, const char *message)
{
        struct kernel *k = subject;
        struct http_request *r = lws_container_of(w, struct http_request, waiter);
        struct e2b_context *c;
        struct e2b_sandbox *s = e2b_sandbox_of_kernel(k->id, &c);

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
        e2b_metrics_start(&s->metrics, s->box);
        reply_created(s, r);
}

/* envVars within its bounds, each a name and value a process can take:
 * NULL, or why not (in why). */
static const char *env_vars_refusal(json_t *env, char *why, size_t size)
{
        size_t total = 0;
        const char *key;
        json_t *value;

        if (env && !json_is_object(env))
                return "envVars must be an object of strings";
        if (json_object_size(env) > MAX_ENV_VARS) {
                snprintf(why, size, "envVars has %zu variables; at most %d", json_object_size(env),
                         MAX_ENV_VARS);
                return why;
        }
        json_object_foreach(env, key, value) {
                size_t len = strlen(key) + 1 + json_string_length(value);

                if (!json_is_string(value) ||
                    strlen(json_string_value(value)) != json_string_length(value)) {
                        snprintf(why, size, "envVars.%.256s must be a string without NUL", key);
                        return why;
                }
                if (!key[0] || strchr(key, '=') || strlen(key) > 256) {
                        snprintf(why, size,
                                 "envVars: a name must be 1 to 256 bytes, without '=' "
                                 "(\"%.64s\")",
                                 key);
                        return why;
                }
                if (len > HOSTMSG_MAX_STRING) {
                        snprintf(why, size,
                                 "envVars.%.256s is %zu bytes as NAME=value; one may be at most "
                                 "%d bytes, Linux's limit (MAX_ARG_STRLEN)",
                                 key, len, HOSTMSG_MAX_STRING);
                        return why;
                }
                total += len + 1;
        }
        if (total > MAX_ENV_VARS_BYTES) {
                snprintf(why, size, "envVars are %zu bytes in all; at most %d", total,
                         MAX_ENV_VARS_BYTES);
                return why;
        }
        return NULL;
}

bool e2b_string_map(json_t *v, size_t max)
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
 * after replying 400 when it is not a number within the server's maximum,
 * from 1 second, or from 0 when zero_ok (E2B's setTimeout(0): end now). */
static bool timeout_of(struct http_request *r, json_t *body, double dflt, bool zero_ok,
                       double *seconds)
{
        json_t *timeout = json_object_get(body, "timeout");
        double max = config_get()->e2b_max_timeout;

        *seconds = json_is_number(timeout) ? json_number_value(timeout) : timeout ? NAN : dflt;
        if (!timeout ||
            (isfinite(*seconds) && (*seconds > 0 || (zero_ok && *seconds == 0)) && *seconds <= max))
                return true;
        e2b_reply_error(r, 400, "timeout must be from %d to %g seconds", zero_ok ? 0 : 1, max);
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
            config_get()->e2b_refuse_internet)
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
/* allowPublicTraffic as the create gave it, or the operator's default. */
static bool public_traffic_of(json_t *body)
{
        json_t *v = json_object_get(json_object_get(body, "network"), "allowPublicTraffic");

        return json_is_boolean(v) ? json_is_true(v) : config_get()->e2b_public_traffic;
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
        const struct config *cfg = config_get();
        json_t *body = http_parse_body(r);
        json_t *template, *metadata, *env, *mask;
        const struct jp_kernelspec *spec = NULL;
        const char *tid, *refusal;
        struct hostmsg_limits limits;
        struct hostmsg_network net = {0};
        struct e2b_sandbox *s = NULL;
        struct kernel *pooled;
        json_t *why = NULL;
        char err[512];
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
        mask = json_object_get(json_object_get(body, "network"), "maskRequestHost");
        tid = json_is_string(template) ? json_string_value(template) : DEFAULT_TEMPLATE;
        spec = template_spec(tid);
        refusal = create_refusal(body);
        if (!spec) {
                e2b_reply_error(r, 404, "template '%.64s' not found; templates: %s%s%s", tid,
                                DEFAULT_TEMPLATE, templates_names()[0] ? ", " : "",
                                templates_names());
        } else if (!timeout_of(r, body, 300, false, &ttl)) {
                /* answered */
        } else if (!e2b_string_map(metadata, MAX_METADATA)) {
                e2b_reply_error(r, 400, "metadata must be an object of at most %d strings",
                                MAX_METADATA);
        } else if (env_vars_refusal(env, err, sizeof(err))) {
                e2b_reply_error(r, 400, "%s", env_vars_refusal(env, err, sizeof(err)));
        } else if (json_object_get(metadata, E2B_PUBLIC_PORTS_KEY) &&
                   sandbox_parse_public_ports(
                       json_string_value(json_object_get(metadata, E2B_PUBLIC_PORTS_KEY)), NULL,
                       err, sizeof(err)) < 0) {
                e2b_reply_error(r, 400, "metadata %s: %s", E2B_PUBLIC_PORTS_KEY, err);
        } else if (json_is_string(mask) &&
                   sandbox_parse_request_host(json_string_value(mask), NULL, err, sizeof(err)) < 0) {
                e2b_reply_error(r, 400, "network.maskRequestHost: %s", err);
        } else if (mask && !json_is_string(mask)) {
                e2b_reply_error(r, 400, "network.maskRequestHost must be a string");
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
                s->ports_public = public_traffic_of(body);
                if (json_is_string(mask))
                        snprintf(s->request_host, sizeof(s->request_host), "%s",
                                 json_string_value(mask));
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
                        set_public_traffic(s);
                        start_sudo(s);
                        s->next = sandboxes;
                        sandboxes = s;
                        r->waiter.done = on_created;
                        if (e2b_context_adopt(s, pooled, "python")) {
                                e2b_contexts_add_defaults(s);
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
                        set_public_traffic(s);
                        start_sudo(s);
                        s->next = sandboxes;
                        sandboxes = s;
                        r->waiter.done = on_created;
                        if (e2b_context_new(s, spec, "python", NULL, &r->waiter, &rc)) {
                                e2b_contexts_add_defaults(s);
                        } else {
                                sandbox_kill(s);
                                e2b_reply_error(r,
                                                rc == -EAGAIN || rc == -EDQUOT ? 429
                                                : rc == -E2BIG                 ? 400
                                                                               : 500,
                                                "cannot start the sandbox: %s",
                                                rc == -EAGAIN   ? "too many kernels"
                                                : rc == -EDQUOT ? "quota of this key reached"
                                                : rc == -E2BIG
                                                    ? "its kernel's environment (the template's "
                                                      "and envVars) is past the bounds of a "
                                                      "process's environment"
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

/* The list's query from r's arguments (each decoded once by lws), read
 * whole: an argument too long to read is refused, not skipped. The older
 * GET /sandboxes (v1 false) lists the running sandboxes, every one, as
 * E2B's does. 0, or -EINVAL with err. */
static int list_query_of(struct http_request *r, bool v2, struct e2b_list_query *q, char *err,
                         size_t errlen)
{
        char *arg = malloc(E2B_LIST_ARG_MAX + 1);
        int rc = 0;

        e2b_list_query_init(q);
        if (!arg) {
                snprintf(err, errlen, "out of memory");
                return -ENOMEM;
        }
        for (int i = 0; rc == 0; i++) {
                int len = lws_hdr_fragment_length(r->wsi, WSI_TOKEN_HTTP_URI_ARGS, i);
                char *eq;

                if (lws_hdr_copy_fragment(r->wsi, arg, E2B_LIST_ARG_MAX + 1,
                                          WSI_TOKEN_HTTP_URI_ARGS, i) < 0) {
                        if (len > E2B_LIST_ARG_MAX) {
                                snprintf(err, errlen, "a query argument is over %d bytes",
                                         E2B_LIST_ARG_MAX);
                                rc = -EINVAL;
                        }
                        break;
                }
                if (i >= E2B_LIST_ARGS_MAX) {
                        snprintf(err, errlen, "more than %d query arguments", E2B_LIST_ARGS_MAX);
                        rc = -EINVAL;
                        break;
                }
                eq = strchr(arg, '=');
                if (!eq)
                        continue;
                *eq = '\0';
                /* The older list has no pages, no order and no other
                 * filter: only its metadata is read. */
                if (v2 || strcmp(arg, "metadata") == 0)
                        rc = e2b_list_query_set(q, arg, eq + 1, err, errlen);
        }
        free(arg);
        if (rc == 0 && !v2) {
                q->paused = false;
                q->limit = 0;
        }
        if (rc == 0)
                rc = e2b_list_query_check(q, err, errlen);
        return rc;
}

/* The start time sandboxes are listed by. */
static int64_t started_us(const struct e2b_sandbox *s)
{
        int64_t us = 0;

        e2b_time_parse(s->started_at, &us);
        return us;
}

static const struct e2b_list_query *sorting_query; /* for qsort */

static int compare_sandboxes(const void *a, const void *b)
{
        const struct e2b_sandbox *x = *(const struct e2b_sandbox *const *)a;
        const struct e2b_sandbox *y = *(const struct e2b_sandbox *const *)b;

        return e2b_list_compare(sorting_query, started_us(x), x->id, started_us(y), y->id);
}

/* Puts the whole list (this host's, and its peers' in a fleet) in order
 * and cuts it to the page asked for. */
static void finish_page(struct http_request *r, json_t *list)
{
        struct e2b_list_query q;
        char err[256];

        /* Read again: it was read whole before the list was made. */
        if (list_query_of(r, strncmp(r->path + 4 + strspn(r->path + 4, "/"), "v2/", 3) == 0, &q,
                          err, sizeof(err)) == 0 &&
            e2b_list_finish(&q, list, r->next_token, sizeof(r->next_token)) < 0)
                log_warn("e2b list: out of memory ordering the page");
        e2b_list_query_clear(&q);
}

static void list_sandboxes(struct http_request *r, bool v2)
{
        struct e2b_sandbox **found = NULL;
        struct e2b_list_query q;
        size_t n = 0, count = 0, keep;
        json_t *list = NULL;
        char err[512];

        if (list_query_of(r, v2, &q, err, sizeof(err)) < 0) {
                e2b_reply_error(r, 400, "%s", err);
                goto out;
        }
        for (struct e2b_sandbox *s = sandboxes; s; s = s->next)
                count++;
        found = calloc(count + 1, sizeof(*found));
        list = json_array();
        if (!found || !list) {
                e2b_reply_error(r, 500, "out of memory");
                goto out;
        }
        for (struct e2b_sandbox *s = sandboxes; s; s = s->next) {
                struct e2b_list_entry e = {.id = s->id,
                                           .template_name = s->template_id,
                                           .started_us = started_us(s),
                                           .paused = s->phase == E2B_PAUSED,
                                           .metadata = s->metadata};

                if (s->ready && tenants_may_reach(s->owner) && e2b_list_matches(&q, &e))
                        found[n++] = s;
        }
        sorting_query = &q;
        qsort(found, n, sizeof(*found), compare_sandboxes);
        sorting_query = NULL;
        /* One more than a page: whoever finishes the list (this host, or
         * the one whose peer this is) sees that more follow. */
        keep = q.limit > 0 && n > (size_t)q.limit + 1 ? (size_t)q.limit + 1 : n;
        for (size_t i = 0; i < keep; i++)
                json_array_append_new(list, sandbox_json(found[i], false));
        fleet_reply_page(r, list, finish_page);
        list = NULL;
out:
        json_decref(list);
        free(found);
        e2b_list_query_clear(&q);
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
                        list_sandboxes(r, route[0] == 'v');
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
                double t; /* negative: none given */

                body = http_parse_body(r);
                if (!body || !timeout_of(r, body, -1, true, &t)) {
                        json_decref(body);
                        return;
                }
                json_decref(body);
                /* A connect resumes a paused sandbox, as E2B's does. */
                if (strcmp(rest, "resume") == 0 ||
                    (strcmp(rest, "connect") == 0 && s->phase == E2B_PAUSED)) {
                        resume_begin(s, r, t > 0 ? t : 0);
                        return;
                }
                if (s->phase != E2B_RUNNING) {
                        e2b_reply_error(r, 409, "sandbox \"%s\" is %s", s->id,
                                        s->phase == E2B_PAUSED    ? "paused"
                                        : s->phase == E2B_PAUSING ? "being paused"
                                                                  : "being resumed");
                        return;
                }
                /* setTimeout sets the lifetime (0: it ends now, killed or
                 * paused as its lifecycle says, once this answer is out); a
                 * connect only ever extends it, as E2B's does (the Python
                 * SDK sends its default 300 s on every connect). Without a
                 * timeout, nothing changes. */
                if (t == 0 && strcmp(rest, "timeout") == 0)
                        set_timeout(s, 0);
                else if (t > 0 &&
                         (strcmp(rest, "timeout") == 0 || time(NULL) + (time_t)t > s->end_at))
                        set_timeout(s, t);
                if (strcmp(rest, "connect") == 0)
                        http_reply_json(r, 200, created_json(s));
                else
                        http_reply_empty(r, 204);
        } else if (strcmp(rest, "metrics") == 0 && r->method == HTTP_GET) {
                e2b_metrics_reply(r, &s->metrics);
        } else if (lacking_action(rest)) {
                e2b_reply_error(r, 400, "%s: not supported by Glovebox", rest);
        } else {
                e2b_reply_error(r, 404, "no route %s", route);
        }
}

/* ---- routing ---------------------------------------------------------------- */

/* Whether s (found by its id, or by a signature) may take a request now:
 * running, and its key still there. A sandbox whose key was removed is
 * reached by admins only, so its token stops working with the key. */
static bool usable(struct http_request *r, struct e2b_sandbox *s)
{
        if (s && s->ready && s->phase != E2B_RUNNING && tenants_exists(s->owner)) {
                e2b_reply_error(r, 502, "The sandbox is %s: connect to it to resume it",
                                s->phase == E2B_RESUMING ? "being resumed" : "paused");
                return false;
        }
        if (!s || !s->ready || !tenants_exists(s->owner)) {
                /* 502 is what E2B answers for a sandbox that is gone; the
                 * SDK turns it into its "sandbox was killed" error. */
                e2b_reply_error(r, 502, "The sandbox was not found (killed or timed out)");
                return false;
        }
        return true;
}

/* Its requests run as its owner: the kernels of its contexts are the
 * owner's. */
static void act_as_owner(const struct e2b_sandbox *s)
{
        if (!config_get()->no_auth) {
                struct tenant_caller owner = {.admin = false};

                snprintf(owner.name, sizeof(owner.name), "%s", s->owner);
                tenants_set_caller(&owner);
        }
}

struct e2b_sandbox *e2b_sandbox_of(struct http_request *r)
{
        char id[64], token[128];
        struct e2b_sandbox *s;

        /* Found whoever asks: its access token is the credential here. */
        if (r->e2b_signed[0]) {
                s = find_any(r->e2b_signed);
                return usable(r, s) ? s : NULL;
        }
        s = header(r, "e2b-sandbox-id:", id, sizeof(id)) ? find_any(id) : NULL;
        if (!usable(r, s))
                return NULL;
        if (!config_get()->no_auth &&
            !((header(r, "x-access-token:", token, sizeof(token)) ||
               header(r, "e2b-traffic-access-token:", token, sizeof(token))) &&
              token_matches(token, s->token))) {
                e2b_reply_error(r, 401, "Missing or wrong sandbox access token");
                return NULL;
        }
        act_as_owner(s);
        return s;
}

bool e2b_admit_signed(struct http_request *r, e2b_token_match_fn match, void *arg, bool expired)
{
        struct e2b_sandbox *found = NULL;
        char id[64] = "";

        /* Every running sandbox's token is tried (in constant time each)
         * unless the request names one: the URL names none. */
        if (header(r, "e2b-sandbox-id:", id, sizeof(id))) {
                found = find_any(id);
                found = found && found->ready && match(found->token, arg) ? found : NULL;
        }
        for (struct e2b_sandbox *s = sandboxes; !found && !id[0] && s; s = s->next) {
                if (s->ready && match(s->token, arg))
                        found = s;
        }
        if (!found) {
                e2b_reply_error(r, 401, "invalid signature");
                return false;
        }
        /* Said only of a signature that is good otherwise, as envd does. */
        if (expired) {
                e2b_reply_error(r, 401, "signature is already expired");
                return false;
        }
        if (!usable(r, found))
                return false;
        snprintf(r->e2b_signed, sizeof(r->e2b_signed), "%s", found->id);
        act_as_owner(found);
        return true;
}

static bool sandbox_plane(struct http_request *r, char *port, size_t size)
{
        return header(r, "e2b-sandbox-port:", port, size);
}

bool e2b_route(const char *path)
{
        /* Signed file URLs are built on the sandbox URL's origin, without
         * its path (docs/e2b-protocol.md §4.4). */
        return strncmp(path, "e2b/", 4) == 0 || strcmp(path, "files") == 0;
}

/* The route below /e2b ("files" for the signed URLs' /files). */
static const char *route_of(struct http_request *r)
{
        const char *route = strncmp(r->path, "e2b/", 4) == 0 ? r->path + 4 : r->path;

        /* A trailing slash on E2B_SANDBOX_URL makes "//execute". */
        return route + strspn(route, "/");
}

bool e2b_admit(struct http_request *r)
{
        char port[16];
        bool ok;

        if (!sandbox_plane(r, port, sizeof(port)) && strcmp(route_of(r), "files") == 0 &&
            envd_signed(r))
                return envd_signed_admit(r);
        /* A template build's upload: its signed URL is its credential. */
        if (builds_upload_admit(r, r->path + 4 + strspn(r->path + 4, "/"), &ok))
                return ok;
        if (sandbox_plane(r, port, sizeof(port)))
                return e2b_sandbox_of(r) != NULL;
        if (strcmp(r->path, "files") == 0) {
                e2b_reply_error(r, 401, "missing signature query parameter");
                return false;
        }
        if (authorized_api(r))
                return true;
        e2b_reply_error(r, 401, "Invalid API key");
        return false;
}

void e2b_prepare(struct http_request *r)
{
        const char *route = route_of(r);
        struct e2b_sandbox *s;
        char port[16];

        if (builds_upload_prepare(r, route + strspn(route, "/")))
                return;
        if (!r->e2b_signed[0] &&
            (!sandbox_plane(r, port, sizeof(port)) || strcmp(port, E2B_ENVD_PORT) != 0))
                return;
        s = e2b_sandbox_of(r);
        if (s)
                envd_prepare(r, s, route);
}

void e2b_handle(struct http_request *r)
{
        const char *route = route_of(r);
        struct e2b_sandbox *s;
        char port[16] = E2B_ENVD_PORT;

        if (builds_upload_handle(r, route))
                return;
        if (!r->e2b_signed[0] && !sandbox_plane(r, port, sizeof(port))) {
                control_plane(r, route);
                return;
        }
        s = e2b_sandbox_of(r);
        if (!s)
                return;
        if (strcmp(port, E2B_JUPYTER_PORT) == 0) {
                e2b_code_interpreter(r, s, route);
        } else {
                envd_handle(r, s, route);
        }
}
