#include "autoconf.h"

#include "gateway/jupyter/kernels_api.h"
#include "gateway/kernels/start.h"
#include "gateway/core/config.h"
#include "gateway/core/fleet.h"
#include "gateway/kernels/egress.h"
#include "gateway/kernels/host.h"
#include "gateway/kernels/pool.h"
#include "gateway/jupyter/pause_api.h"
#include "gateway/jupyter/snapshots_api.h"
#include "gateway/kernels/kernels.h"
#include "gateway/kernels/limits.h"
#include "gateway/kernels/templates.h"
#include "gateway/core/tenants.h"
#include "protocol/log.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

void jupyter_kernelspecs(struct http_request *r)
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

void jupyter_kernelspec(struct http_request *r, const char *name)
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
void jupyter_kernelspec_resource(struct http_request *r, const char *name, const char *file)
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

static void post_kernel(struct http_request *r)
{
        json_t *body = http_parse_body(r);
        struct kernel *k;

        if (body && !jupyter_kernel_from_snapshot(r, body))
                start_kernel_for_request(r, body, on_created, &k);
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

/* ---- fork --------------------------------------------------------------- */

/* The request waiting for a fork, NULL once its client left. */
struct fork_reply {
        struct http_request *r;
};

static void fork_client_gone(struct http_request *r)
{
        struct fork_reply *f = r->ctx;

        if (f)
                f->r = NULL;
}

static int fork_status(int rc)
{
        return rc == -EFBIG ? 507 : rc == -EDQUOT || rc == -EAGAIN ? 429 : 500;
}

static void on_forked(void *ctx, int status, const char *message,
                      const struct kernel_fork_result *results, unsigned count)
{
        struct fork_reply *f = ctx;
        struct http_request *r = f->r;
        json_t *list;

        free(f);
        if (!r)
                return;
        r->ctx = NULL;
        r->cleanup = NULL;
        if (status) {
                http_reply_error(r, fork_status(status), "Fork failed, the kernel runs on: %s",
                                 message && message[0] ? message : strerror(-status));
                return;
        }
        /* Each copy on its own: a kernel's model, or why it failed. */
        list = json_array();
        for (unsigned i = 0; list && i < count; i++)
                json_array_append_new(list, results[i].kernel
                                                ? kernel_model(results[i].kernel)
                                                : json_pack("{s:s}", "error", results[i].error));
        http_reply_json(r, 201, json_pack("{s:o}", "kernels", list));
}

/* POST /api/kernels/{id}/fork {"count": N}: N copies of the running
 * kernel, with its memory (kernels.h's kernel_fork). */
static void fork_kernel(struct http_request *r, struct kernel *k)
{
        json_t *body = http_parse_body(r), *count, *why = NULL;
        const struct config *cfg = config_get();
        struct fork_reply *f;
        const char *refusal;
        json_int_t n = 1;
        int rc;

        if (!body)
                return;
        count = json_object_get(body, "count");
        if (count)
                n = json_is_integer(count) ? json_integer_value(count) : 0;
        json_decref(body);
        if (n < 1 || n > KERNEL_FORK_MAX) {
                http_reply_error(r, 400, "count must be a whole number from 1 to %d",
                                 KERNEL_FORK_MAX);
                return;
        }
        if (k->phase != KERNEL_READY) {
                http_reply_error(r, 409, "Kernel is %s, not running: it cannot be forked",
                                 k->execution_state);
                return;
        }
        refusal = kernel_checkpoint_refusal(k);
        if (refusal || !kernel_reported_ipc(k)) {
                http_reply_error(r, 400, "Kernel cannot be forked: %s",
                                 refusal ? refusal : "its sockets cannot be named");
                return;
        }
        if (kernels_count() + (size_t)n > (size_t)cfg->max_kernels) {
                http_reply_error(r, 429, "Fork would pass --max-kernels (%lld)",
                                 (long long)cfg->max_kernels);
                return;
        }
        if (kernels_quota_check_many(&k->limits, (unsigned)n, &why) < 0) {
                http_reply_json(r, 429, why);
                return;
        }
        f = calloc(1, sizeof(*f));
        if (!f) {
                http_reply_error(r, 500, "Out of memory");
                return;
        }
        f->r = r;
        r->ctx = f;
        r->cleanup = fork_client_gone;
        rc = kernel_fork(k, (unsigned)n, on_forked, f);
        if (rc < 0) {
                r->ctx = NULL;
                r->cleanup = NULL;
                free(f);
                http_reply_error(r, fork_status(rc), "Kernel cannot be forked: %s",
                                 kernels_checkpoint_why(rc));
        }
}

void jupyter_kernel(struct http_request *r, const char *id, const char *action)
{
        struct kernel *k = kernel_find(id);

        /* Pause and resume, and a paused kernel's own routes. */
        if (kernel_pause_route(r, id, action))
                return;
        if (!k) {
                http_reply_error(r, 404, "Kernel does not exist: %.64s", id);
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
        } else if (strcmp(action, "fork") == 0 && r->method == HTTP_POST) {
                fork_kernel(r, k);
        } else if (strcmp(action, "snapshot") == 0 && r->method == HTTP_POST) {
                jupyter_kernel_snapshot(r, k);
        } else if (strcmp(action, "channels") == 0) {
                http_reply_error(r, 400, "This route needs a WebSocket upgrade");
        } else if (strcmp(action, "interrupt") == 0 || strcmp(action, "restart") == 0 ||
                   strcmp(action, "fork") == 0 || strcmp(action, "snapshot") == 0) {
                http_reply_error(r, 405, "Use POST to %s a kernel", action);
        } else {
                http_reply_error(r, 404, "No route %s", r->path);
        }
}

void jupyter_status(struct http_request *r)
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

void jupyter_version(struct http_request *r)
{
        http_reply_json(r, 200, json_pack("{s:s}", "version", PACKAGE_VERSION));
}

void jupyter_kernels(struct http_request *r)
{
        if (r->method == HTTP_GET)
                list_kernels(r);
        else if (r->method == HTTP_POST)
                post_kernel(r);
        else
                http_reply_error(r, 405, "Use GET or POST on /api/kernels");
}
