#include "autoconf.h"

#include "gateway/jupyter/kernels_api.h"
#include "gateway/core/fleet.h"
#include "gateway/e2b/e2b.h"
#include "gateway/kernels/egress.h"
#include "gateway/kernels/host.h"
#include "gateway/ops/monitor.h"
#include "gateway/jupyter/page.h"
#include "gateway/kernels/pool.h"
#include "gateway/ports/ports.h"
#include "gateway/jupyter/pause_api.h"
#include "gateway/kernels/kernels.h"
#include "gateway/kernels/limits.h"
#include "gateway/mcp/mcp.h"
#include "gateway/kernels/templates.h"
#include "gateway/core/tenants.h"
#include "gateway/terminals/terminals.h"
#include "protocol/log.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_SEGMENTS    8

struct route {
        char *seg[MAX_SEGMENTS];
        size_t n;
        char storage[HTTP_PATH_MAX];
};

/* Splits "api/kernels/ID/restart" into segments; a trailing '/' is ignored. */
static int split_path(const char *path, struct route *rt)
{
        char *p;

        snprintf(rt->storage, sizeof(rt->storage), "%s", path);
        rt->n = 0;
        p = rt->storage;
        while (*p) {
                char *slash = strchr(p, '/');

                if (rt->n == MAX_SEGMENTS)
                        return -E2BIG;
                rt->seg[rt->n++] = p;
                if (!slash)
                        break;
                *slash = '\0';
                p = slash + 1;
        }
        return 0;
}

static bool is(const struct route *rt, size_t i, const char *s)
{
        return i < rt->n && strcmp(rt->seg[i], s) == 0;
}

/* ---- kernelspecs ---------------------------------------------------------- */

static json_t *kernelspec_model(const struct jp_kernelspec *ks)
{
        const char *base = config_get()->base_url;
        json_t *resources = json_object();
        char url[HTTP_PATH_MAX], key[256];

        for (size_t i = 0; resources && ks->resources && ks->resources[i]; i++) {
                const char *file = ks->resources[i];
                const char *dot = strrchr(file, '.');
                bool logo = strncmp(file, "logo-", 5) == 0 && dot;

                snprintf(key, sizeof(key), "%.*s", logo ? (int)(dot - file) : (int)strlen(file),
                         file);
                snprintf(url, sizeof(url), "%skernelspecs/%s/%s", base, ks->name, file);
                json_object_set_new(resources, key, json_string(url));
        }
        return json_pack("{s:s, s:O, s:o}", "name", ks->name, "spec", ks->spec, "resources",
                         resources);
}

static void get_kernelspecs(struct http_request *r)
{
        const struct jp_kernelspec_list *list = kernels_specs();
        json_t *all = json_object();

        for (size_t i = 0; all && i < list->count; i++) {
                if (!list->items[i].removed)
                        json_object_set_new(all, list->items[i].name,
                                            kernelspec_model(&list->items[i]));
        }
        http_reply_json(r, 200,
                        json_pack("{s:s, s:o}", "default", config_get()->default_kernel,
                                  "kernelspecs", all));
}

static void get_kernelspec(struct http_request *r, const char *name)
{
        const struct jp_kernelspec *ks = jp_kernelspec_find(kernels_specs(), name);

        if (!ks) {
                http_reply_error(r, 404, "Kernel spec %s not found", name);
                return;
        }
        http_reply_json(r, 200, kernelspec_model(ks));
}

static const char *resource_type(const char *file)
{
        const char *dot = strrchr(file, '.');

        if (!dot)
                return "application/octet-stream";
        if (strcmp(dot, ".png") == 0)
                return "image/png";
        if (strcmp(dot, ".svg") == 0)
                return "image/svg+xml";
        if (strcmp(dot, ".js") == 0)
                return "text/javascript";
        if (strcmp(dot, ".css") == 0)
                return "text/css";
        return "application/octet-stream";
}

/* Serves a kernelspec's logo or kernel.js/css: only the files discovery
 * listed, so no request path ever reaches another file. */
static void get_kernelspec_resource(struct http_request *r, const char *name, const char *file)
{
        const struct jp_kernelspec *ks = jp_kernelspec_find(kernels_specs(), name);
        char path[PATH_MAX + 256];
        struct stat st;
        int fd;

        for (size_t i = 0; ks && ks->resources && ks->resources[i]; i++) {
                if (strcmp(ks->resources[i], file) != 0)
                        continue;
                snprintf(path, sizeof(path), "%s/%s", ks->dir, file);
                fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
                if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
                        http_reply_fd(r, 200, resource_type(file), fd, (uint64_t)st.st_size);
                        return;
                }
                if (fd >= 0)
                        close(fd);
                break;
        }
        http_reply_error(r, 404, "No resource %s for kernel spec %s", file, name);
}

/* ---- kernels -------------------------------------------------------------- */

static struct http_request *request_of(struct waiter *w)
{
        return lws_container_of(w, struct http_request, waiter);
}

static void on_created(struct waiter *w, void *subject, int status, const char *message)
{
        struct kernel *k = subject;
        struct http_request *r = request_of(w);

        if (status) {
                http_reply_error(r, status, "%s", message);
                return;
        }
        snprintf(r->location, sizeof(r->location), "%sapi/kernels/%s", config_get()->base_url,
                 k->id);
        http_reply_json(r, 201, kernel_model(k));
}

static void on_restarted(struct waiter *w, void *subject, int status, const char *message)
{
        struct kernel *k = subject;
        struct http_request *r = request_of(w);

        if (status)
                http_reply_error(r, status, "%s", message);
        else
                http_reply_json(r, 200, kernel_model(k));
}

static void on_deleted(struct waiter *w, void *subject, int status, const char *message)
{
        (void)subject;
        http_reply_empty(request_of(w), 204);
}

static bool limits_are_default(const struct hostmsg_limits *l)
{
        struct hostmsg_limits d;

        kernels_default_limits(&d);
        return l->memory_mb == d.memory_mb && l->cpu_millis == d.cpu_millis && l->pids == d.pids &&
               l->disk_mb == d.disk_mb;
}

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

void api_drop_nulls(json_t *v)
{
        const char *key;
        json_t *value;
        void *tmp;

        json_object_foreach_safe(v, tmp, key, value) {
                if (json_is_null(value))
                        json_object_del(v, key);
                else
                        api_drop_nulls(value);
        }
}

json_t *api_parse_body(struct http_request *r)
{
        json_error_t jerr;
        json_t *body;

        if (r->body.len == 0)
                return json_object();
        body = json_loadb(r->body.data, r->body.len, 0, &jerr);
        if (!body) {
                http_reply_error(r, 400, "Invalid JSON in request body: %s", jerr.text);
        } else if (!json_is_object(body)) {
                http_reply_error(r, 400, "Request body must be a JSON object");
                json_decref(body);
                body = NULL;
        }
        api_drop_nulls(body);
        return body;
}

/* A kernel with egress: in a sandbox of its own made with it (never a
 * pooled one, which has none). */
static int start_networked(const struct jp_kernelspec *ks, char *const *env,
                           const struct hostmsg_limits *limits, const struct hostmsg_network *net,
                           struct waiter *w, struct kernel **out)
{
        struct sandbox *sb = NULL;
        int rc = templates_sandbox_new(ks, limits, true, net, &sb);

        if (rc == 0)
                rc = kernel_start(ks, env, limits, sb, w, out);
        /* Its own, as any kernel's: a new one (with the same egress) if it dies. */
        if (rc == 0)
                (*out)->owns_sandbox = true;
        sandbox_unref(&sb);
        return rc;
}

/* {"template": NAME} (and "name", a kernel of it): *ks its kernelspec, or
 * NULL without "template". -errno once answered (400, or 404 naming the
 * templates there are). */
static int api_template_kernel(struct http_request *r, json_t *request,
                               const struct jp_kernelspec **ks)
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

int api_start_kernel(struct http_request *r, json_t *request,
                     waiter_fn done,
                     struct kernel **out)
{
        const struct config *cfg = config_get();
        const struct jp_kernelspec *ks;
        struct hostmsg_limits limits;
        struct hostmsg_network net = {0};
        char err[512];
        char **env = NULL;
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
        if (api_template_kernel(r, request, &ks) < 0)
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
        /* Without a sandbox nothing is enforced, as the operator chose. */
        if (!cfg->allow_unenforced_limits && strcmp(cfg->sandbox, "none") != 0 &&
            limits_refusal(json_object_get(request, "limits"), host_controllers(), err,
                           sizeof(err)) < 0) {
                http_reply_error(r, 400, "%s", err);
                goto out;
        }
        env = calloc(1, sizeof(char *));
        rc = env ? kernel_env_append(json_object_get(ks->spec, "env"), &env, &nenv, err, sizeof(err))
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
        /* The pool's kernels have the kernelspec's environment and the
         * default limits: a request asking for nothing else gets one. */
        if (rc == 0 && json_object_size(jenv) == 0 && limits_are_default(&limits) && !net.enabled &&
            (*out = pool_take(ks)) != NULL) {
                kernel_when_ready(*out, &r->waiter);
                goto out;
        }
        if (rc == 0 && net.enabled)
                rc = start_networked(ks, env, &limits, &net, &r->waiter, out);
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
        return rc;
}

int api_start_plain_kernel(const struct jp_kernelspec *ks, struct waiter *w,
                           struct kernel **out)
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

static void post_kernel(struct http_request *r)
{
        json_t *body = api_parse_body(r);
        struct kernel *k;

        if (body)
                api_start_kernel(r, body, on_created, &k);
        json_decref(body);
}

/* The kernels, the paused ones last (kernel_pause.h). */
static void list_kernels(struct http_request *r)
{
        json_t *list = kernels_model();
        json_t *paused = kernel_pause_models();

        if (list && paused)
                json_array_extend(list, paused);
        json_decref(paused);
        fleet_reply_list(r, list);
}

static void kernel_action(struct http_request *r, const struct route *rt)
{
        struct kernel *k = kernel_find(rt->seg[2]);
        const char *action = rt->n == 4 ? rt->seg[3] : NULL;

        /* Pause and resume, and a paused kernel's own routes. */
        if (kernel_pause_route(r, rt->seg[2], action))
                return;
        if (!k) {
                http_reply_error(r, 404, "Kernel does not exist: %.64s", rt->seg[2]);
                return;
        }
        if (!action) {
                if (r->method == HTTP_GET) {
                        http_reply_json(r, 200, kernel_model(k));
                } else if (r->method == HTTP_DELETE) {
                        r->waiter.done = on_deleted;
                        kernel_shutdown(k, &r->waiter);
                } else {
                        http_reply_error(r, 405, "Use GET or DELETE on a kernel");
                }
        } else if (strcmp(action, "interrupt") == 0 && r->method == HTTP_POST) {
                if (kernel_interrupt(k) == -EAGAIN)
                        http_reply_error(r, 409, "Kernel is %s, not running a cell: nothing to "
                                         "interrupt", k->execution_state);
                else
                        http_reply_empty(r, 204);
        } else if (strcmp(action, "restart") == 0 && r->method == HTTP_POST) {
                r->waiter.done = on_restarted;
                kernel_restart(k, &r->waiter);
        } else if (strcmp(action, "execute") == 0 && r->method == HTTP_POST) {
                api_execute(r, k);
        } else if (strcmp(action, "ports") == 0) {
                ports_api(r, k);
        } else if (strcmp(action, "metrics") == 0 && r->method == HTTP_GET) {
                monitor_kernel_metrics(r, k);
        } else if (strcmp(action, "channels") == 0) {
                http_reply_error(r, 400, "This route needs a WebSocket upgrade");
        } else if (strcmp(action, "interrupt") == 0 || strcmp(action, "restart") == 0) {
                http_reply_error(r, 405, "Use POST to %s a kernel", action);
        } else {
                http_reply_error(r, 404, "No route %s", r->path);
        }
}

static void get_status(struct http_request *r)
{
        json_t *list = kernels_model();
        size_t i, connections = 0;
        json_t *k;

        json_array_foreach(list, i, k)
                connections += (size_t)json_integer_value(json_object_get(k, "connections"));
        http_reply_json(r, 200,
                        json_pack("{s:s, s:i, s:i, s:o}", "version", PACKAGE_VERSION, "kernels",
                                  (int)json_array_size(list), "connections", (int)connections,
                                  "pool", pool_status()));
        json_decref(list);
}

void api_prepare(struct http_request *r)
{
        if (e2b_route(r->path))
                e2b_prepare(r);
        else
                api_files_prepare(r);
}

void api_handle(struct http_request *r)
{
        struct route rt;

        if (e2b_route(r->path)) {
                e2b_handle(r);
                return;
        }
        if (page_route(r->path)) {
                page_serve(r);
                return;
        }
        if (mcp_route(r->path)) {
                mcp_handle(r);
                return;
        }
        if (api_files_handle(r))
                return;
        if (split_path(r->path, &rt) < 0 || !is(&rt, 0, "api")) {
                /* The server's metrics cover every tenant: admins only
                 * (a kernel's own are at /api/kernels/{id}/metrics). */
                if (rt.n == 1 && is(&rt, 0, "metrics") && r->method == HTTP_GET &&
                    !(tenants_caller() && tenants_caller()->admin))
                        http_reply_error(r, 403, "The server's metrics need an admin key");
                else if (rt.n == 1 && is(&rt, 0, "metrics") && r->method == HTTP_GET)
                        monitor_metrics(r);
                else if (rt.n == 3 && is(&rt, 0, "kernelspecs") && r->method == HTTP_GET)
                        get_kernelspec_resource(r, rt.seg[1], rt.seg[2]);
                else
                        http_reply_error(r, 404, "No route %s", r->path);
                return;
        }
        if (rt.n == 1 && r->method == HTTP_GET) {
                http_reply_json(r, 200, json_pack("{s:s}", "version", PACKAGE_VERSION));
        } else if (rt.n == 2 && is(&rt, 1, "status") && r->method == HTTP_GET) {
                get_status(r);
        } else if (rt.n == 2 && is(&rt, 1, "health") && r->method == HTTP_GET) {
                monitor_health(r);
        } else if (rt.n == 2 && is(&rt, 1, "kernelspecs") && r->method == HTTP_GET) {
                get_kernelspecs(r);
        } else if (rt.n == 3 && is(&rt, 1, "kernelspecs") && r->method == HTTP_GET) {
                get_kernelspec(r, rt.seg[2]);
        } else if (rt.n == 2 && is(&rt, 1, "kernels")) {
                if (r->method == HTTP_GET)
                        list_kernels(r);
                else if (r->method == HTTP_POST)
                        post_kernel(r);
                else
                        http_reply_error(r, 405, "Use GET or POST on /api/kernels");
        } else if ((rt.n == 3 || rt.n == 4) && is(&rt, 1, "kernels")) {
                kernel_action(r, &rt);
        } else if ((rt.n == 2 || rt.n == 3) && is(&rt, 1, "terminals")) {
                terminals_handle(r, rt.n == 3 ? rt.seg[2] : NULL);
        } else if ((rt.n == 2 || rt.n == 3) && is(&rt, 1, "fleet")) {
                fleet_handle(r, rt.n == 3 ? rt.seg[2] : NULL);
        } else if ((rt.n == 2 || rt.n == 3) && is(&rt, 1, "sessions")) {
                api_sessions_handle(r, rt.n == 3 ? rt.seg[2] : NULL);
        } else {
                http_reply_error(r, 404, "No route %s", r->path);
        }
}
