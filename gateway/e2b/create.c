#include "autoconf.h"

#include "gateway/e2b/e2b.h"
#include "gateway/e2b/builds.h"
#include "gateway/e2b/contexts.h"
#include "gateway/e2b/e2b_internal.h"
#include "gateway/kernels/volumes.h"
#include "gateway/e2b/metrics.h"
#include "gateway/e2b/sandbox.h"
#include "gateway/e2b/snapshots.h"
#include "gateway/core/fleet.h"
#include "gateway/core/http.h"
#include "gateway/core/tenants.h"
#include "gateway/kernels/egress.h"
#include "gateway/kernels/kernels.h"
#include "gateway/kernels/pause.h"
#include "gateway/kernels/pool.h"
#include "gateway/kernels/templates.h"
#include "protocol/ids.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* A sandbox's envVars, in every command and kernel of it: half of what a
 * process's environment and command line may hold together
 * (protocol/hostmsg.h), so that a command always has the other half for
 * its own command line and envs. */
#define MAX_ENV_VARS       (HOSTMSG_MAX_ENV / 2)
#define MAX_ENV_VARS_BYTES (HOSTMSG_MAX_EXEC_BYTES / 2)

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
                e2b_sandbox_kill(s);
                return;
        }
        s->ready = true;
        /* The lifetime asked for is the client's from the answer on: a
         * start slowed by a busy host does not eat into it. */
        e2b_set_timeout(s, s->lifetime);
        e2b_metrics_start(&s->metrics, s->box);
        e2b_reply_created(s, r);
}

/* envVars within its bounds, each a name and value a process can take:
 * NULL, or why not (in why). */
const char *e2b_env_vars_refusal(json_t *env, char *why, size_t size)
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

/* What a create request asks for that Glovebox cannot give, as a message
 * naming the field; NULL when it can be served. The Python SDK always sends
 * allow_internet_access (true by default), "autoPause": false and
 * "autoResume": {"enabled": false}: those are requests for nothing Glovebox
 * lacks (autoResume enabled is served with autoPause: wake.c). Internet
 * access is granted "within the operator's network policy", which without
 * --egress-allow is no network: the sandbox's info says
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
        if (resume && (!json_is_object(resume) ||
                       (json_object_get(resume, "enabled") &&
                        !json_is_boolean(json_object_get(resume, "enabled")))))
                return "autoResume must be an object {\"enabled\": true or false}";
        /* Only a sandbox paused at its timeout is there to resume: one
         * killed then is gone (E2B's SDK says the same before sending). */
        if (json_is_true(json_object_get(resume, "enabled")) &&
            !json_is_true(json_object_get(body, "autoPause")))
                return "autoResume.enabled needs autoPause (lifecycle onTimeout 'pause'): a "
                       "sandbox killed at its timeout has nothing to resume";
        if (json_object_get(body, "mcp"))
                return "mcp is not supported";
        return NULL;
}

/* allowPublicTraffic as the create gave it, or the operator's default. */
static bool public_traffic_of(json_t *body)
{
        json_t *v = json_object_get(json_object_get(body, "network"), "allowPublicTraffic");

        return json_is_boolean(v) ? json_is_true(v) : config_get()->e2b_public_traffic;
}

/* volumeMounts: [{"name": a volume's name (or id), "path": "/data"}]. */
static int volume_mounts_e2b(json_t *list, char ***out, char *err, size_t errlen)
{
        size_t i, n = 0;
        json_t *m;
        int rc = 0;

        *out = NULL;
        if (!list || json_is_null(list))
                return 0;
        if (!json_is_array(list)) {
                snprintf(err, errlen, "volumeMounts must be an array of {name, path}");
                return -EINVAL;
        }
        json_array_foreach(list, i, m) {
                const char *name = json_string_value(json_object_get(m, "name"));
                const char *path = json_string_value(json_object_get(m, "path"));

                if (!name || !path) {
                        snprintf(err, errlen, "volumeMounts[%zu]: name and path are strings", i);
                        rc = -EINVAL;
                } else {
                        rc = volume_mounts_add(out, &n, path, name, err, errlen);
                }
                if (rc < 0)
                        break;
        }
        if (rc < 0) {
                jp_strv_free(*out);
                *out = NULL;
        }
        return rc < 0 ? -EINVAL : 0;
}

/* The egress an E2B create asks for, within the operator's policy:
 * allow_internet_access (the SDKs send true unless told otherwise) gives
 * all the operator allows, network.allowOut narrows it and network.denyOut
 * adds denials. In E2B allowOut wins over denyOut and "deny 0.0.0.0/0"
 * means "only allowOut": that entry is read so, every other denial wins.
 * Without an operator policy nothing is enabled (create_refusal has the
 * old answers). 0 (net->enabled says whether) or -EINVAL with err. */
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

void e2b_create_sandbox(struct http_request *r)
{
        const struct config *cfg = config_get();
        json_t *body = http_parse_body(r);
        json_t *template, *metadata, *env, *mask;
        const struct jp_kernelspec *spec = NULL;
        const char *tid, *refusal;
        struct hostmsg_limits limits;
        struct hostmsg_network net = {0};
        struct e2b_sandbox *s = NULL;
        char **volumes = NULL;
        struct kernel *pooled;
        char **kernel_env = NULL;
        json_t *own_env = NULL;
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
        tid = json_is_string(template) ? json_string_value(template) : E2B_DEFAULT_TEMPLATE;
        spec = e2b_template_spec(tid);
        refusal = create_refusal(body);
        /* A snapshot's id as the template: a sandbox of its files. */
        if (!spec && !refusal && json_is_string(template)) {
                if (!e2b_timeout_of(r, body, 300, false, &ttl) ||
                    e2b_create_from_snapshot(r, tid, body, ttl))
                        goto out;
        }
        if (!spec) {
                e2b_reply_error(r, 404, "template '%.64s' not found; templates: %s%s%s", tid,
                                E2B_DEFAULT_TEMPLATE, templates_names()[0] ? ", " : "",
                                templates_names());
        } else if (!e2b_timeout_of(r, body, 300, false, &ttl)) {
                /* answered */
        } else if (!e2b_string_map(metadata, E2B_MAX_METADATA)) {
                e2b_reply_error(r, 400, "metadata must be an object of at most %d strings",
                                E2B_MAX_METADATA);
        } else if (e2b_env_vars_refusal(env, err, sizeof(err))) {
                e2b_reply_error(r, 400, "%s", e2b_env_vars_refusal(env, err, sizeof(err)));
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
        } else if (volume_mounts_e2b(json_object_get(body, "volumeMounts"), &volumes, err,
                                     sizeof(err)) < 0) {
                e2b_reply_error(r, 400, "%s", err);
        } else if (kernels_quota_check(&limits, NULL, &why) < 0) {
                /* Before the pool too: a pooled kernel counts for the key
                 * that takes it. */
                e2b_reply_quota(r, why);
        } else {
                s = calloc(1, sizeof(*s));
                if (!s || fleet_new_sandbox_id(s->id) < 0 || jp_random_hex(s->token, 32) < 0 ||
                    jp_random_hex(s->traffic_token, 32) < 0) {
                        free(s);
                        e2b_reply_error(r, 500, "out of memory");
                        goto out;
                }
                snprintf(s->owner, sizeof(s->owner), "%s", tenants_owner_now());
                snprintf(s->template_id, sizeof(s->template_id), "%s", tid);
                s->spec = spec;
                s->on_timeout_pause = json_is_true(json_object_get(body, "autoPause"));
                /* E2B's autoPauseMemory: true unless said false. */
                s->auto_pause_memory = !json_is_false(json_object_get(body, "autoPauseMemory"));
                /* Checked above: with autoPause only (wake.c). */
                s->auto_resume =
                    json_is_true(json_object_get(json_object_get(body, "autoResume"), "enabled"));
                s->ports_public = public_traffic_of(body);
                if (json_is_string(mask))
                        snprintf(s->request_host, sizeof(s->request_host), "%s",
                                 json_string_value(mask));
                s->metadata = metadata ? json_incref(metadata) : json_object();
                s->volumes = volumes;
                volumes = NULL;
                /* A built template's env, then the sandbox's own. */
                s->env =
                    e2b_built_of(s) ? json_deep_copy(builds_env(e2b_built_of(s))) : json_object();
                if (env)
                        json_object_update(s->env, env);
                if (e2b_built_of(s))
                        snprintf(s->workdir, sizeof(s->workdir), "%s",
                                 builds_workdir(e2b_built_of(s)));
                jp_timestamp_now(s->started_at);
                /* Its timer starts once it is ready (on_created); a start
                 * that fails or hangs past --kernel-start-timeout ends it. */
                s->lifetime = ttl;
                s->end_at = time(NULL) + (time_t)ttl;
                /* The default context can be a pooled kernel, given the
                 * envVars where it can take them (pool.h), and the sandbox
                 * its sandbox. */
                pooled = NULL;
                if (!net.enabled && !e2b_built_of(s) && !s->volumes &&
                    e2b_kernel_env(s, spec, &kernel_env) == 0 && (own_env = e2b_env(s)))
                        pooled = pool_take_for(spec, own_env, kernel_env, &limits);
                if (pooled) {
                        s->box = sandbox_ref(pooled->sandbox);
                        s->limits = s->box->limits;
                        e2b_set_public_traffic(s);
                        e2b_start_sudo(s);
                        e2b_sandbox_add(s);
                        r->waiter.done = on_created;
                        /* Answered as the envVars' execution goes to the
                         * kernel: the client's first cell waits for it to
                         * have run (kernel_when_ready), and meanwhile the
                         * client reads the answer. */
                        if (e2b_context_adopt(s, pooled, "python")) {
                                e2b_contexts_add_defaults(s);
                                kernel_when_adapted(pooled, &r->waiter);
                        } else {
                                kernel_shutdown(pooled, NULL);
                                e2b_sandbox_kill(s);
                                e2b_reply_error(r, 500, "out of memory");
                        }
                        goto out;
                }
                rc = e2b_box_new(s, spec, &limits, &net);
                if (rc == 0) {
                        s->limits = s->box->limits;
                        e2b_set_public_traffic(s);
                        e2b_start_sudo(s);
                        e2b_sandbox_add(s);
                        r->waiter.done = on_created;
                        if (e2b_context_new(s, spec, "python", NULL, &r->waiter, &rc)) {
                                e2b_contexts_add_defaults(s);
                        } else {
                                e2b_sandbox_kill(s);
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
                        jp_strv_free(s->volumes);
                        free(s);
                        e2b_reply_error(r, 500, "cannot make a sandbox: %s", strerror(-rc));
                }
        }
out:
        egress_network_clear(&net);
        jp_strv_free(volumes);
        jp_strv_free(kernel_env);
        json_decref(own_env);
        json_decref(body);
}
