/* /api/sessions: Jupyter's association of a notebook (path, name, type)
 * with a kernel, with the shapes Jupyter Server 1.23/2.x answer. A session
 * whose kernel is gone (deleted directly, or failed) is dropped. */
#include "autoconf.h"

#include "gateway/jupyter/kernels_api.h"
#include "gateway/kernels/start.h"
#include "gateway/core/fleet.h"
#include "gateway/kernels/kernels.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_FIELD 4096

struct nbsession {
        struct nbsession *next;
        char id[JP_UUID_SIZE];
        char owner[KEYS_NAME_MAX]; /* the tenant that made it (tenants.h) */
        char *path, *name, *type;
        char kernel_id[JP_UUID_SIZE];
        char old_kernel_id[JP_UUID_SIZE]; /* shut down once a PATCH's new kernel is ready */
        bool ready;                       /* its kernel has been ready at least once */
};

static struct nbsession *nbsessions;
/* The session whose kernel post_session is starting now: a kernel from the
 * warm pool is ready at once, before its id is in the session. */
static struct nbsession *starting;

static void nbsession_free(struct nbsession *s)
{
        free(s->path);
        free(s->name);
        free(s->type);
        free(s);
}

static void nbsession_remove(struct nbsession *s)
{
        for (struct nbsession **link = &nbsessions; *link; link = &(*link)->next) {
                if (*link == s) {
                        *link = s->next;
                        nbsession_free(s);
                        return;
                }
        }
}

/* Drops sessions whose kernel no longer exists. */
static void prune(void)
{
        struct nbsession **link = &nbsessions;

        while (*link) {
                struct nbsession *s = *link;

                if (s->ready && !kernel_find_any(s->kernel_id)) {
                        *link = s->next;
                        nbsession_free(s);
                } else {
                        link = &s->next;
                }
        }
}

static struct nbsession *find(const char *id)
{
        prune();
        for (struct nbsession *s = nbsessions; s; s = s->next) {
                /* Another tenant's session is not found. */
                if (s->ready && strcmp(s->id, id) == 0 && tenants_may_reach(s->owner))
                        return s;
        }
        return NULL;
}

static json_t *model(const struct nbsession *s)
{
        struct kernel *k = kernel_find_any(s->kernel_id);

        return json_pack("{s:s, s:s, s:s, s:s, s:o, s:{s:s, s:s}}", "id", s->id, "path", s->path,
                         "name", s->name, "type", s->type, "kernel",
                         k ? kernel_model(k) : json_null(), "notebook", "path", s->path, "name",
                         s->name);
}

/* Copies an optional string member; -EINVAL (after replying) when it is
 * there but not a string of at most MAX_FIELD bytes. */
static int take_string(struct http_request *r, json_t *body, const char *key, char **out)
{
        json_t *v = json_object_get(body, key);

        if (!v || json_is_null(v))
                return 0;
        if (!json_is_string(v) || json_string_length(v) > MAX_FIELD ||
            strlen(json_string_value(v)) != json_string_length(v)) {
                http_reply_error(r, 400, "\"%s\" must be a string", key);
                return -EINVAL;
        }
        free(*out);
        *out = strdup(json_string_value(v));
        return *out ? 0 : -ENOMEM;
}

static struct http_request *request_of(struct waiter *w)
{
        return lws_container_of(w, struct http_request, waiter);
}

static struct nbsession *by_kernel(const char *kernel_id, bool ready)
{
        for (struct nbsession *s = nbsessions; s; s = s->next) {
                if (s->ready == ready && strcmp(s->kernel_id, kernel_id) == 0)
                        return s;
        }
        return NULL;
}

/* A POST's answer: s, its kernel ready. */
static void reply_ready(struct http_request *r, struct nbsession *s)
{
        s->ready = true;
        snprintf(r->location, sizeof(r->location), "%sapi/sessions/%s", config_get()->base_url,
                 s->id);
        http_reply_json(r, 201, model(s));
}

static void on_kernel_ready(struct waiter *w, void *subject, int status,
                            const char *message)
{
        struct kernel *k = subject;
        struct http_request *r = request_of(w);
        struct nbsession *s = by_kernel(k->id, false);

        /* A second tab's request for the same path may have heard first. */
        if (!s)
                s = by_kernel(k->id, true);
        if (!s && starting) {
                s = starting;
                snprintf(s->kernel_id, sizeof(s->kernel_id), "%s", k->id);
        }
        if (!s) {
                http_reply_error(r, 404, "Session was deleted");
                return;
        }
        if (status) {
                if (s == starting)
                        starting = NULL;
                nbsession_remove(s);
                http_reply_error(r, status, "%s", message);
                return;
        }
        reply_ready(r, s);
}

/* A POST for a path whose session's kernel was still starting: that
 * session, once its kernel is ready (or the error it failed with). */
static void on_pending_ready(struct waiter *w, void *subject, int status, const char *message)
{
        struct kernel *k = subject;
        struct http_request *r = request_of(w);
        struct nbsession *s = by_kernel(k->id, true);

        if (status) {
                http_reply_error(r, status, "%s", message);
                return;
        }
        if (!s)
                s = by_kernel(k->id, false);
        if (!s) {
                http_reply_error(r, 404, "Session was deleted");
                return;
        }
        reply_ready(r, s);
}

static void post_session(struct http_request *r)
{
        json_t *body = http_parse_body(r);
        json_t *kernel;
        struct nbsession *s = NULL;
        struct kernel *k;

        if (!body)
                return;
        kernel = json_object_get(body, "kernel");
        if (kernel && !json_is_null(kernel) && !json_is_object(kernel)) {
                http_reply_error(r, 400, "\"kernel\" must be an object");
                goto out;
        }
        s = calloc(1, sizeof(*s));
        if (!s || fleet_new_uuid(s->id) < 0) {
                http_reply_error(r, 500, "out of memory");
                goto out;
        }
        snprintf(s->owner, sizeof(s->owner), "%s", tenants_owner_now());
        if (take_string(r, body, "path", &s->path) < 0 ||
            take_string(r, body, "name", &s->name) < 0 ||
            take_string(r, body, "type", &s->type) < 0)
                goto out;
        if (!s->path) {
                http_reply_error(r, 400, "Missing field in JSON data: path");
                goto out;
        }
        if (!s->name)
                s->name = strdup("");
        if (!s->type)
                s->type = strdup("notebook");
        /* Jupyter Server hands back the existing session of a path. */
        prune();
        for (struct nbsession *e = nbsessions; e; e = e->next) {
                if (e->ready && strcmp(e->path, s->path) == 0 && tenants_may_reach(e->owner)) {
                        snprintf(r->location, sizeof(r->location), "%sapi/sessions/%s",
                                 config_get()->base_url, e->id);
                        http_reply_json(r, 201, model(e));
                        goto out;
                }
        }
        /* One whose kernel is still starting (a second tab opened on the
         * notebook meanwhile) is handed back too, once that kernel is
         * ready: one kernel per path, not one per tab. */
        for (struct nbsession *e = nbsessions; e; e = e->next) {
                if (e->ready || !e->kernel_id[0] || strcmp(e->path, s->path) != 0 ||
                    !tenants_may_reach(e->owner))
                        continue;
                k = kernel_find(e->kernel_id);
                /* One whose kernel failed while nobody waited is no session. */
                if (!k || k->phase == KERNEL_DEAD || k->phase == KERNEL_STOPPING)
                        continue;
                r->waiter.done = on_pending_ready;
                kernel_when_ready(k, &r->waiter);
                goto out;
        }
        if (json_is_string(json_object_get(kernel, "id"))) {
                k = kernel_find(json_string_value(json_object_get(kernel, "id")));
                if (!k) {
                        http_reply_error(r, 404, "Kernel does not exist: %.64s",
                                         json_string_value(json_object_get(kernel, "id")));
                        goto out;
                }
                snprintf(s->kernel_id, sizeof(s->kernel_id), "%s", k->id);
                s->ready = true;
                s->next = nbsessions;
                nbsessions = s;
                snprintf(r->location, sizeof(r->location), "%sapi/sessions/%s",
                         config_get()->base_url, s->id);
                http_reply_json(r, 201, model(s));
                s = NULL;
                goto out;
        }
        s->next = nbsessions;
        nbsessions = s;
        starting = s;
        s = NULL;
        if (start_kernel_for_request(r, kernel ? kernel : body, on_kernel_ready, &k) == 0) {
                if (starting)
                        snprintf(starting->kernel_id, sizeof(starting->kernel_id), "%s", k->id);
        } else if (starting) {
                nbsession_remove(starting);
        }
        starting = NULL;
out:
        if (s)
                nbsession_free(s);
        json_decref(body);
}

static void on_patched_kernel_ready(struct waiter *w, void *subject, int status,
                                    const char *message)
{
        struct kernel *k = subject;
        struct http_request *r = request_of(w);
        struct nbsession *s = NULL;
        struct kernel *old;

        for (struct nbsession *e = nbsessions; e; e = e->next) {
                if (strcmp(e->old_kernel_id, k->id) != 0 && e->ready &&
                    strcmp(e->kernel_id, k->id) == 0)
                        s = e;
        }
        if (!s) {
                http_reply_error(r, 404, "Session was deleted");
                return;
        }
        if (status) {
                /* Keep the old kernel. */
                snprintf(s->kernel_id, sizeof(s->kernel_id), "%s", s->old_kernel_id);
                s->old_kernel_id[0] = '\0';
                http_reply_error(r, status, "%s", message);
                return;
        }
        old = kernel_find_any(s->old_kernel_id);
        s->old_kernel_id[0] = '\0';
        if (old)
                kernel_shutdown(old, NULL);
        http_reply_json(r, 200, model(s));
}

static void patch_session(struct http_request *r, struct nbsession *s)
{
        json_t *body = http_parse_body(r);
        json_t *kernel;
        struct kernel *k;

        if (!body)
                return;
        kernel = json_object_get(body, "kernel");
        if (kernel && !json_is_null(kernel) && !json_is_object(kernel)) {
                http_reply_error(r, 400, "\"kernel\" must be an object");
                goto out;
        }
        if (take_string(r, body, "path", &s->path) < 0 ||
            take_string(r, body, "name", &s->name) < 0 ||
            take_string(r, body, "type", &s->type) < 0)
                goto out;
        if (json_is_string(json_object_get(kernel, "id"))) {
                k = kernel_find(json_string_value(json_object_get(kernel, "id")));
                if (!k) {
                        http_reply_error(r, 404, "Kernel does not exist: %.64s",
                                         json_string_value(json_object_get(kernel, "id")));
                        goto out;
                }
                snprintf(s->kernel_id, sizeof(s->kernel_id), "%s", k->id);
        } else if (json_is_string(json_object_get(kernel, "name"))) {
                /* A new kernel for the session; the old one is shut down
                 * once it is ready, as Jupyter Server does. */
                snprintf(s->old_kernel_id, sizeof(s->old_kernel_id), "%s", s->kernel_id);
                if (start_kernel_for_request(r, kernel, on_patched_kernel_ready, &k) == 0)
                        snprintf(s->kernel_id, sizeof(s->kernel_id), "%s", k->id);
                else
                        s->old_kernel_id[0] = '\0';
                goto out;
        }
        http_reply_json(r, 200, model(s));
out:
        json_decref(body);
}

static void on_session_kernel_gone(struct waiter *w, void *subject, int status,
                                   const char *message)
{
        (void)subject;
        http_reply_empty(request_of(w), 204);
}

void jupyter_sessions(struct http_request *r, const char *id)
{
        struct nbsession *s;
        struct kernel *k;
        json_t *list;

        if (!id) {
                if (r->method == HTTP_POST) {
                        post_session(r);
                } else if (r->method == HTTP_GET) {
                        prune();
                        list = json_array();
                        for (s = nbsessions; list && s; s = s->next) {
                                if (s->ready && tenants_may_reach(s->owner))
                                        json_array_append_new(list, model(s));
                        }
                        fleet_reply_list(r, list);
                } else {
                        http_reply_error(r, 405, "Use GET or POST on /api/sessions");
                }
                return;
        }
        s = find(id);
        if (!s) {
                http_reply_error(r, 404, "Session not found: %.64s", id);
                return;
        }
        switch (r->method) {
        case HTTP_GET:
                http_reply_json(r, 200, model(s));
                break;
        case HTTP_PATCH:
                patch_session(r, s);
                break;
        case HTTP_DELETE:
                k = kernel_find(s->kernel_id);
                nbsession_remove(s);
                if (k) {
                        r->waiter.done = on_session_kernel_gone;
                        kernel_shutdown(k, &r->waiter);
                } else {
                        http_reply_empty(r, 204);
                }
                break;
        default:
                http_reply_error(r, 405, "Use GET, PATCH or DELETE on a session");
        }
}

json_t *jupyter_sessions_keep_record(void)
{
        json_t *list = json_array();

        prune();
        for (struct nbsession *s = nbsessions; list && s; s = s->next) {
                /* One in the middle of a PATCH is kept with the kernel it
                 * has now; the client repeats the PATCH. */
                if (!s->ready)
                        continue;
                if (json_array_append_new(list, json_pack("{s:s, s:s, s:s, s:s, s:s, s:s}", "id",
                                                          s->id, "owner", s->owner, "path", s->path,
                                                          "name", s->name, "type", s->type,
                                                          "kernel", s->kernel_id)) < 0) {
                        json_decref(list);
                        return NULL;
                }
        }
        return list;
}

void jupyter_sessions_adopt(json_t *list)
{
        json_t *entry;
        size_t i;

        json_array_foreach(list, i, entry) {
                const char *id, *owner, *path, *name, *type, *kernel;
                struct nbsession *s;

                if (json_unpack(entry, "{s:s, s:s, s:s, s:s, s:s, s:s}", "id", &id, "owner", &owner,
                                "path", &path, "name", &name, "type", &type, "kernel",
                                &kernel) < 0 ||
                    strlen(id) >= JP_UUID_SIZE || strlen(kernel) >= JP_UUID_SIZE ||
                    strlen(owner) >= KEYS_NAME_MAX)
                        continue;
                /* A session whose kernel was not kept goes with it. */
                if (!kernel_find_any(kernel))
                        continue;
                s = calloc(1, sizeof(*s));
                if (!s)
                        return;
                snprintf(s->id, sizeof(s->id), "%s", id);
                snprintf(s->owner, sizeof(s->owner), "%s", owner);
                snprintf(s->kernel_id, sizeof(s->kernel_id), "%s", kernel);
                s->path = strdup(path);
                s->name = strdup(name);
                s->type = strdup(type);
                if (!s->path || !s->name || !s->type) {
                        nbsession_free(s);
                        return;
                }
                s->ready = true;
                s->next = nbsessions;
                nbsessions = s;
        }
}
