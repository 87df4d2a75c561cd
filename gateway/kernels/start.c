#include "autoconf.h"

#include "gateway/kernels/start.h"
#include "gateway/core/fleet.h"
#include "gateway/kernels/egress.h"
#include "gateway/kernels/host.h"
#include "gateway/kernels/limits.h"
#include "gateway/kernels/pool.h"
#include "gateway/kernels/templates.h"
#include "gateway/kernels/volumes.h"
#include "protocol/log.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int parse_limits(json_t *obj, struct hostmsg_limits *out, char *err, size_t errlen)
{
        const struct config *cfg = config_get();
        struct {
                const char *key;
                double dflt, min, max, value;
        } f[] = {
            {"memory_mb", (double)cfg->memory_mb, 16, (double)cfg->max_memory_mb, 0},
            {"cpus", cfg->cpus, 0.01, cfg->max_cpus, 0},
            {"pids", (double)cfg->pids, 8, (double)cfg->max_pids, 0},
            {"disk_mb", (double)cfg->disk_mb, 1, (double)cfg->max_disk_mb, 0},
        };
        const char *key;
        json_t *v;

        if (obj && !json_is_object(obj)) {
                snprintf(err, errlen, "\"limits\" must be an object");
                return -EINVAL;
        }
        json_object_foreach(obj, key, v) {
                bool known = false;

                for (size_t i = 0; i < 4; i++)
                        known |= strcmp(key, f[i].key) == 0;
                if (!known) {
                        snprintf(err, errlen, "unknown limit \"%.64s\"", key);
                        return -EINVAL;
                }
        }
        for (size_t i = 0; i < 4; i++) {
                v = json_object_get(obj, f[i].key);
                f[i].value = v ? json_number_value(v) : f[i].dflt;
                if (v && (!json_is_number(v) || !isfinite(f[i].value) || f[i].value < f[i].min ||
                          f[i].value > f[i].max)) {
                        snprintf(err, errlen, "limits.%s must be a number from %g to %g", f[i].key,
                                 f[i].min, f[i].max);
                        return -EINVAL;
                }
                if (i != 1 && v && !json_is_integer(v)) {
                        snprintf(err, errlen, "limits.%s must be an integer", f[i].key);
                        return -EINVAL;
                }
        }
        out->memory_mb = (uint64_t)f[0].value;
        out->cpu_millis = (uint32_t)lround(f[1].value * 1000.0);
        out->pids = (uint32_t)f[2].value;
        out->disk_mb = (uint64_t)f[3].value;
        return 0;
}

/* A kernel with egress or volumes: in a sandbox of its own made with them
 * (never a pooled one, which has neither). */
static int start_networked(const struct jp_kernelspec *ks, char *const *env,
                           const struct hostmsg_limits *limits, const struct hostmsg_network *net,
                           char *const *volumes, struct waiter *w, struct kernel **out)
{
        const struct sandbox_layers mounts = {.volumes = volumes};
        struct sandbox *sb = NULL;
        int rc = templates_sandbox_new_layered(
            ks, limits, strcmp(config_get()->sandbox, "none") != 0, net, &mounts, &sb);

        if (rc == 0)
                rc = kernel_start(ks, env, limits, sb, w, out);
        /* Its own, as any kernel's: a new one (with the same egress) if it dies. */
        if (rc == 0)
                (*out)->owns_sandbox = true;
        sandbox_unref(&sb);
        return rc;
}

/* {"volumes": {"/data": NAME or id, ...}}: *out the mounts (NULL: none).
 * -EINVAL with why in err. */
static int volume_mounts_of(json_t *map, char ***out, char *err, size_t errlen)
{
        const char *path;
        size_t n = 0;
        json_t *v;
        int rc = 0;

        *out = NULL;
        if (!map || json_is_null(map))
                return 0;
        if (!json_is_object(map)) {
                snprintf(err, errlen, "\"volumes\" must be an object: {\"/path\": \"name\"}");
                return -EINVAL;
        }
        json_object_foreach(map, path, v) {
                if (!json_is_string(v)) {
                        snprintf(err, errlen, "volumes.%.64s must be a volume's name", path);
                        rc = -EINVAL;
                } else {
                        rc = volume_mounts_add(out, &n, path, json_string_value(v), err, errlen);
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

/* {"template": NAME} (and "name", a kernel of it): *ks its kernelspec, or
 * NULL without "template". -errno once answered (400, or 404 naming the
 * templates there are). */
static int template_kernel(struct http_request *r, json_t *request, const struct jp_kernelspec **ks)
{
        json_t *jtemplate = json_object_get(request, "template");
        json_t *jname = json_object_get(request, "name");
        const char *kernel = json_is_string(jname) ? json_string_value(jname) : NULL;
        const struct sandbox_template *t;

        *ks = NULL;
        if (!jtemplate)
                return 0;
        if (!json_is_string(jtemplate)) {
                http_reply_error(r, 400, "\"template\" must be a string");
                return -EINVAL;
        }
        t = templates_find(json_string_value(jtemplate));
        if (!t) {
                http_reply_error(r, 404, "No such template: %.64s; templates: %s",
                                 json_string_value(jtemplate),
                                 templates_names()[0] ? templates_names() : "none");
                return -ENOENT;
        }
        *ks = templates_kernel(t, kernel);
        if (!*ks) {
                http_reply_error(r, 404, "Template %s has no kernel %.64s",
                                 json_string_value(jtemplate), kernel ? kernel : "at all");
                return -ENOENT;
        }
        return 0;
}

int start_kernel_for_request(struct http_request *r, json_t *request, waiter_fn done,
                             struct kernel **out)
{
        const struct config *cfg = config_get();
        const struct jp_kernelspec *ks;
        struct hostmsg_limits limits;
        struct hostmsg_network net = {0};
        char err[512];
        char **env = NULL, **volumes = NULL;
        size_t nenv = 0;
        const char *name;
        json_t *jname = json_object_get(request, "name");
        json_t *jenv = json_object_get(request, "env");
        int rc = -EINVAL;

        *out = NULL;
        /* A draining host starts nothing new (fleet.h); its kernels keep
         * running. */
        if (fleet_refuse_if_draining(r)) {
                rc = -ESHUTDOWN;
                goto out;
        }
        if (jname && !json_is_null(jname) && !json_is_string(jname)) {
                http_reply_error(r, 400, "\"name\" must be a string");
                goto out;
        }
        name = json_is_string(jname) && json_string_length(jname) ? json_string_value(jname)
                                                                  : cfg->default_kernel;
        if (template_kernel(r, request, &ks) < 0)
                goto out;
        if (!ks)
                ks = jp_kernelspec_find(kernels_specs(), name);
        if (!ks) {
                http_reply_error(r, 404, "No such kernel spec: %.64s", name);
                goto out;
        }
        if (jenv && !json_is_null(jenv) && !json_is_object(jenv)) {
                http_reply_error(r, 400, "\"env\" must be an object of strings");
                goto out;
        }
        if (parse_limits(json_object_get(request, "limits"), &limits, err, sizeof(err)) < 0) {
                http_reply_error(r, 400, "%s", err);
                goto out;
        }
        if (egress_kernel_request(json_object_get(request, "network"), &net, err, sizeof(err)) <
            0) {
                http_reply_error(r, 400, "%s", err);
                goto out;
        }
        if (net.enabled && strcmp(cfg->sandbox, "none") == 0) {
                http_reply_error(r, 400, "network: egress needs sandboxes (--sandbox full)");
                goto out;
        }
        if (volume_mounts_of(json_object_get(request, "volumes"), &volumes, err, sizeof(err)) < 0) {
                http_reply_error(r, 400, "%s", err);
                goto out;
        }
        /* Without a sandbox nothing is enforced, as the operator chose. */
        if (!cfg->allow_unenforced_limits && strcmp(cfg->sandbox, "none") != 0 &&
            limits_refusal(json_object_get(request, "limits"), host_controllers(), err,
                           sizeof(err)) < 0) {
                http_reply_error(r, 400, "%s", err);
                goto out;
        }
        env = calloc(1, sizeof(char *));
        rc =
            env ? kernel_env_append(json_object_get(ks->spec, "env"), &env, &nenv, err, sizeof(err))
                : -ENOMEM;
        if (rc == 0 && json_is_object(jenv))
                rc = kernel_env_append(jenv, &env, &nenv, err, sizeof(err));
        /* The whole of it within a process's bounds, said before asking. */
        if (rc == 0)
                rc = kernel_exec_check(ks, env, err, sizeof(err));
        if (rc == -EINVAL || rc == -E2BIG) {
                http_reply_error(r, 400, "%s", err);
                goto out;
        }
        if (rc == 0) {
                json_t *why = NULL;

                /* Before the pool too: a pooled kernel counts as one
                 * started for the tenant that takes it. */
                if (kernels_quota_check(&limits, NULL, &why) == -EDQUOT) {
                        http_reply_json(r, 429, why);
                        rc = -EDQUOT;
                        goto out;
                }
        }
        r->waiter.done = done;
        /* A pooled kernel takes the request's own env and limits where it
         * can (pool.h); egress and volumes need a sandbox made with them. */
        if (rc == 0 && !net.enabled && !volumes &&
            (*out = pool_take_for(ks, json_is_object(jenv) ? jenv : NULL, env, &limits)) != NULL) {
                kernel_when_ready(*out, &r->waiter);
                goto out;
        }
        if (rc == 0 && (net.enabled || volumes))
                rc = start_networked(ks, env, &limits, &net, volumes, &r->waiter, out);
        else if (rc == 0)
                rc = kernel_start(ks, env, &limits, NULL, &r->waiter, out);
        if (rc == -EAGAIN)
                http_reply_error(r, 403, "Kernel limit of %lld reached",
                                 (long long)cfg->max_kernels);
        else if (rc == -ESHUTDOWN)
                http_reply_error(r, 503, "The gateway is shutting down");
        else if (rc == -EDQUOT)
                http_reply_error(r, 429, "Quota of this key reached");
        else if (rc < 0)
                http_reply_error(r, 500, "Cannot start a kernel: %s", strerror(-rc));
out:
        egress_network_clear(&net);
        jp_strv_free(env);
        jp_strv_free(volumes);
        return rc;
}

int start_plain_kernel(const struct jp_kernelspec *ks, struct waiter *w, struct kernel **out)
{
        struct hostmsg_limits limits;
        char err[256];
        char **env = calloc(1, sizeof(char *));
        size_t nenv = 0;
        int rc =
            env ? kernel_env_append(json_object_get(ks->spec, "env"), &env, &nenv, err, sizeof(err))
                : -ENOMEM;

        *out = NULL;
        if (rc < 0)
                goto out;
        *out = pool_take(ks);
        if (*out) {
                if (w)
                        kernel_when_ready(*out, w);
                goto out;
        }
        kernels_default_limits(&limits);
        rc = kernel_start(ks, env, &limits, NULL, w, out);
out:
        jp_strv_free(env);
        return rc;
}
