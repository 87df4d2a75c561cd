#include "autoconf.h"

#include "gateway/core/http.h"
#include "gateway/e2b/build_internal.h"
#include "gateway/e2b/e2b.h"
#include "gateway/kernels/host.h"
#include "gateway/kernels/templates.h"
#include "gateway/core/tenants.h"
#include "protocol/fleetid.h"
#include "protocol/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* E2B's template API (the routes the SDK's Template calls), on the
 * store of builds.c: requests for builds, the files to upload, starting a
 * build (build_run.c), its status and logs, aliases, tags. */

/* ---- the API -------------------------------------------------------------------- */

static const char *owner_now(void)
{
        return tenants_owner_now();
}

static const char *status_name(enum build_status s)
{
        return s == BUILD_WAITING    ? "waiting"
               : s == BUILD_BUILDING ? "building"
               : s == BUILD_READY    ? "ready"
                                     : "error";
}

/* POST /v3/templates: a new build of a template (made if new). */
static void request_build(struct http_request *r)
{
        json_t *body = http_parse_body(r), *tags = NULL, *v;
        char alias[BUILD_ALIAS_MAX], tag[BUILD_ALIAS_MAX], err[256];
        const char *name;
        struct build_tpl *t;
        struct build *b;
        size_t i;

        if (!body)
                return;
        name = json_string_value(json_object_get(body, "name"));
        if (!name)
                name = json_string_value(json_object_get(body, "alias"));
        if (!name) {
                e2b_reply_error(r, 400, "Name is required");
                goto out;
        }
        if (build_parse_name(name, alias, tag, err, sizeof(err)) < 0) {
                e2b_reply_error(r, 400, "Invalid name: %s", err);
                goto out;
        }
        if (build_builtin_name(alias)) {
                e2b_reply_error(r, 400, "'%s' is a template of this gateway's: choose another name",
                                alias);
                goto out;
        }
        tags = json_array();
        if (tags && tag[0])
                json_array_append_new(tags, json_string(tag));
        if (json_object_get(body, "tags") && !json_is_array(json_object_get(body, "tags"))) {
                e2b_reply_error(r, 400, "tags must be an array of strings");
                goto out;
        }
        json_array_foreach(json_object_get(body, "tags"), i, v) {
                char clean[BUILD_ALIAS_MAX];

                if (!json_is_string(v) || build_check_tag(json_string_value(v), clean, err, sizeof(err)) < 0) {
                        e2b_reply_error(r, 400, "Invalid tag: %s", json_is_string(v) ? err : "not a string");
                        goto out;
                }
                if (json_array_size(tags) >= BUILD_MAX_TAGS) {
                        e2b_reply_error(r, 400, "at most %d tags", BUILD_MAX_TAGS);
                        goto out;
                }
                json_array_append_new(tags, json_string(clean));
        }
        if (!tags || json_array_size(tags) == 0)
                json_array_append_new(tags ?: (tags = json_array()), json_string(BUILD_DEFAULT_TAG));
        if (build_disabled()) {
                e2b_reply_error(r, 400, "%s", build_disabled());
                goto out;
        }
        t = build_tpl_by_alias(alias);
        if (t && strcmp(t->owner, owner_now()) != 0)
                t = NULL; /* an admin builds its own */
        if (build_runs_of(owner_now()) >= (unsigned)build_config()->template_max_builds) {
                e2b_reply_error(r, 429, "this key runs %lld template builds already "
                                "(--template-max-builds)",
                                (long long)build_config()->template_max_builds);
                goto out;
        }
        if (build_owner_bytes(owner_now()) + ((uint64_t)build_config()->template_build_disk_mb << 20) >
            (uint64_t)build_config()->template_quota_mb << 20) {
                e2b_reply_error(r, 429, "this key's built templates have no room for another "
                                "build (--template-quota-mb %lld, a build takes up to %lld)",
                                (long long)build_config()->template_quota_mb,
                                (long long)build_config()->template_build_disk_mb);
                goto out;
        }
        if (!t && (build_owner_templates(owner_now()) >= (size_t)build_config()->template_max_templates ||
                   build_tpl_count() >= BUILD_MAX_TEMPLATES)) {
                e2b_reply_error(r, 429, "this key has %lld built templates already "
                                "(--template-max-templates)",
                                (long long)build_config()->template_max_templates);
                goto out;
        }
        if (!t) {
                t = calloc(1, sizeof(*t));
                if (!t || jp_random_hex(t->id, (BUILD_TEMPLATE_ID_SIZE - 1) / 2) < 0 ||
                    !(t->tags = json_object())) {
                        free(t);
                        e2b_reply_error(r, 500, "out of memory");
                        goto out;
                }
                snprintf(t->alias, sizeof(t->alias), "%s", alias);
                snprintf(t->owner, sizeof(t->owner), "%s", owner_now());
                build_tpl_add(t);
        }
        b = build_new(t);
        if (!b) {
                e2b_reply_error(r, 500, "out of memory");
                goto out;
        }
        json_decref(b->tags);
        b->tags = json_incref(tags);
        b->cpu_count = json_integer_value(json_object_get(body, "cpuCount"));
        b->memory_mb = json_integer_value(json_object_get(body, "memoryMB"));
        http_reply_json(r, 202, json_pack("{s:s, s:s, s:b, s:[s], s:[s], s:O}", "templateID",
                                          t->id, "buildID", b->id, "public", 0, "aliases",
                                          t->alias, "names", t->alias, "tags", tags));
out:
        json_decref(tags);
        json_decref(body);
}

/* The base a build starts from (E2B's fromImage / fromTemplate): *base
 * (an operator template, "" for the host's) and the layers below the
 * build's own. 0 or -errno with err. */
static int resolve_base(json_t *spec, char *base, size_t size, json_t *layers, char *err,
                        size_t errlen)
{
        const char *image = json_string_value(json_object_get(spec, "fromImage"));
        const char *from = json_string_value(json_object_get(spec, "fromTemplate"));
        char alias[BUILD_ALIAS_MAX], tag[BUILD_ALIAS_MAX];
        const struct build *parent = NULL;
        struct build_tpl *t;
        const char *mapped;

        if (from) {
                if (strcmp(from, "base") == 0 || strcmp(from, "code-interpreter-v1") == 0) {
                        snprintf(base, size, "%s", "");
                        return 0;
                }
                if (templates_find(from)) {
                        snprintf(base, size, "%s", from);
                        return 0;
                }
                t = build_parse_name(from, alias, tag, err, errlen) == 0 ? build_tpl_by_alias(alias) : NULL;
                if (!t)
                        t = build_tpl_by_id(from);
                parent = t ? build_by_tag(t, tag) : NULL;
                if (!parent) {
                        snprintf(err, errlen, "template '%.128s' not found", from);
                        return -ENOENT;
                }
                if (json_array_size(parent->layers) >= HOSTMSG_MAX_LAYERS) {
                        snprintf(err, errlen, "template '%.128s' stacks %d layers already: "
                                 "build from its base instead", from, HOSTMSG_MAX_LAYERS);
                        return -E2BIG;
                }
                snprintf(base, size, "%s", parent->base);
                json_array_extend(layers, parent->layers);
                return 0;
        }
        if (!image) {
                snprintf(err, errlen, "give fromImage or fromTemplate");
                return -EINVAL;
        }
        mapped = builds_image_template(image);
        if (!mapped || (mapped[0] && !templates_find(mapped))) {
                snprintf(err, errlen,
                         "base image '%.200s' is not available here: Glovebox pulls from no "
                         "registry; the operator maps an image to a template with "
                         "--template-image IMAGE=TEMPLATE (" BUILD_BASE_IMAGE " is the host's)",
                         image);
                return -ENOENT;
        }
        snprintf(base, size, "%s", mapped);
        return 0;
}

/* POST /v2/templates/{tid}/builds/{bid}: runs the build. */
static void start_build(struct http_request *r, struct build_tpl *t, struct build *b)
{
        json_t *spec = http_parse_body(r);
        char err[512];
        int rc;

        if (!spec)
                return;
        if (b->status != BUILD_WAITING) {
                e2b_reply_error(r, 400, "build %s was started already", b->id);
                goto out;
        }
        if (!json_is_array(json_object_get(spec, "steps")) &&
            json_object_get(spec, "steps") != NULL) {
                e2b_reply_error(r, 400, "steps must be an array");
                goto out;
        }
        if (json_array_size(json_object_get(spec, "steps")) > BUILD_MAX_STEPS) {
                e2b_reply_error(r, 400, "at most %d steps", BUILD_MAX_STEPS);
                goto out;
        }
        rc = resolve_base(spec, b->base, sizeof(b->base), b->layers, err, sizeof(err));
        if (rc == 0)
                rc = json_array_insert_new(b->layers, 0, json_string(b->id)) < 0 ? -ENOMEM : 0;
        if (rc == 0)
                rc = build_run_start(b, spec, err, sizeof(err));
        if (rc < 0) {
                e2b_reply_error(r, rc == -ENOMEM ? 500 : 400, "%s", err);
                goto out;
        }
        log_info("template %s: build %s started (%s)", t->alias, fleetid_short(b->id).s,
                 b->base[0] ? b->base : "the host's /usr");
        http_reply_empty(r, 202);
out:
        json_decref(spec);
}

static json_t *log_entries(const struct build *b, size_t offset, size_t limit, json_t **strings)
{
        json_t *out = json_array();
        size_t n = json_array_size(b->logs);

        *strings = json_array();
        for (size_t i = offset; out && i < n && i < offset + limit; i++) {
                json_t *e = json_array_get(b->logs, i);

                json_array_append(out, e);
                json_array_append_new(*strings,
                                      json_sprintf("[%s] %s",
                                                   json_string_value(json_object_get(e, "timestamp")),
                                                   json_string_value(json_object_get(e, "message"))));
        }
        return out;
}

static size_t urlarg_size(struct http_request *r, const char *name, size_t dflt, size_t max)
{
        const char *value;
        char text[48];
        char *end;
        long long v;

        /* (lws gives the value's start within text) */
        value = lws_get_urlarg_by_name(r->wsi, name, text, sizeof(text));
        if (!value)
                return dflt;
        v = strtoll(value, &end, 10);
        if (*end || end == value || v < 0)
                return dflt;
        return (size_t)v > max ? max : (size_t)v;
}

/* GET /templates/{tid}/builds/{bid}/status */
static void build_status(struct http_request *r, struct build_tpl *t, struct build *b)
{
        size_t offset = urlarg_size(r, "logsOffset=", 0, (size_t)-1);
        size_t limit = urlarg_size(r, "limit=", BUILD_LOG_PAGE, BUILD_LOG_PAGE);
        json_t *strings, *entries = log_entries(b, offset, limit, &strings);
        json_t *o = json_pack("{s:s, s:s, s:s, s:o, s:o}", "templateID", t->id, "buildID", b->id,
                              "status", status_name(b->status), "logEntries", entries, "logs",
                              strings);

        if (o && b->reason)
                json_object_set(o, "reason", b->reason);
        http_reply_json(r, 200, o);
}

static json_t *tags_json(const struct build_tpl *t)
{
        json_t *list = json_array(), *v;
        const char *tag;

        json_object_foreach(t->tags, tag, v) {
                json_array_append_new(list, json_pack("{s:s, s:s, s:s}", "tag", tag, "buildID",
                                                      json_string_value(json_object_get(v, "build")),
                                                      "createdAt",
                                                      json_string_value(json_object_get(v, "at"))));
        }
        return list;
}

/* POST /templates/tags {target: "alias:tag", tags} */
static void assign_tags(struct http_request *r)
{
        json_t *body = http_parse_body(r), *tags, *v, *clean = json_array();
        char alias[BUILD_ALIAS_MAX], tag[BUILD_ALIAS_MAX], err[256];
        const char *target;
        struct build_tpl *t;
        struct build *b;
        size_t i;

        if (!body)
                goto out;
        target = json_string_value(json_object_get(body, "target"));
        tags = json_object_get(body, "tags");
        if (!target || !json_is_array(tags) || json_array_size(tags) == 0) {
                e2b_reply_error(r, 400, "give target (\"name:tag\") and at least one tag");
                goto out;
        }
        if (build_parse_name(target, alias, tag, err, sizeof(err)) < 0) {
                e2b_reply_error(r, 400, "Invalid target template format: %s", err);
                goto out;
        }
        json_array_foreach(tags, i, v) {
                char c[BUILD_ALIAS_MAX];

                if (!json_is_string(v) || build_check_tag(json_string_value(v), c, err, sizeof(err)) < 0) {
                        e2b_reply_error(r, 400, "Invalid tag: %s", json_is_string(v) ? err : "not a string");
                        goto out;
                }
                json_array_append_new(clean, json_string(c));
        }
        t = build_tpl_by_alias(alias);
        b = t ? build_by_tag(t, tag) : NULL;
        if (!b) {
                e2b_reply_error(r, 404, "Template '%s' with tag '%s' not found", alias,
                                tag[0] ? tag : BUILD_DEFAULT_TAG);
                goto out;
        }
        if (json_object_size(t->tags) + json_array_size(clean) > BUILD_MAX_TAGS) {
                e2b_reply_error(r, 400, "a template has at most %d tags", BUILD_MAX_TAGS);
                goto out;
        }
        json_array_foreach(clean, i, v) {
                char now[JP_TIMESTAMP_SIZE];

                jp_timestamp_now(now);
                json_object_set_new(t->tags, json_string_value(v),
                                    json_pack("{s:s, s:s}", "build", b->id, "at", now));
        }
        build_save();
        http_reply_json(r, 201, json_pack("{s:s, s:O}", "buildID", b->id, "tags", clean));
out:
        json_decref(clean);
        json_decref(body);
}

/* DELETE /templates/tags {name, tags} */
static void delete_tags(struct http_request *r)
{
        json_t *body = http_parse_body(r), *tags, *v;
        char alias[BUILD_ALIAS_MAX], tag[BUILD_ALIAS_MAX], err[256], c[BUILD_ALIAS_MAX];
        const char *name;
        struct build_tpl *t;
        size_t i;

        if (!body)
                return;
        name = json_string_value(json_object_get(body, "name"));
        tags = json_object_get(body, "tags");
        if (!name || !json_is_array(tags) || json_array_size(tags) == 0) {
                e2b_reply_error(r, 400, "give name and at least one tag");
                goto out;
        }
        if (build_parse_name(name, alias, tag, err, sizeof(err)) < 0 || tag[0]) {
                e2b_reply_error(r, 400, "Invalid template name: %s",
                                tag[0] ? "it should not contain a tag, use the 'tags' field" : err);
                goto out;
        }
        json_array_foreach(tags, i, v) {
                if (!json_is_string(v) || build_check_tag(json_string_value(v), c, err, sizeof(err)) < 0 ||
                    strcmp(c, BUILD_DEFAULT_TAG) == 0) {
                        e2b_reply_error(r, 400, "Invalid tag: %s",
                                        !json_is_string(v) ? "not a string"
                                        : strcmp(c, BUILD_DEFAULT_TAG) == 0 ? "cannot delete the 'default' tag"
                                                                      : err);
                        goto out;
                }
        }
        t = build_tpl_by_alias(alias);
        if (!t) {
                e2b_reply_error(r, 404, "Template '%s' not found", alias);
                goto out;
        }
        json_array_foreach(tags, i, v) {
                build_check_tag(json_string_value(v), c, err, sizeof(err));
                json_object_del(t->tags, c);
        }
        build_save();
        http_reply_empty(r, 204);
out:
        json_decref(body);
}

static void delete_template(struct http_request *r, struct build_tpl *t)
{
        build_tpl_remove(t);
        for (struct build *b = t->builds; b; b = b->next) {
                build_run_abort(b);
                /* A running build's layer goes once its sandbox has (sealed). */
                if (b->status == BUILD_READY && !build_layer_in_use(b->id, t))
                        host_layer_delete(b->id);
        }
        build_tpl_free(t);
        build_save();
        http_reply_empty(r, 204);
}

static json_t *tpl_json(const struct build_tpl *t)
{
        const struct build *latest = NULL;

        for (const struct build *b = t->builds; b && !latest; b = b->next)
                latest = b;
        return json_pack("{s:s, s:s?, s:b, s:[s], s:[s], s:s?, s:s, s:i, s:i}", "templateID",
                         t->id, "buildID", latest ? latest->id : NULL, "public", 0, "aliases",
                         t->alias, "names", t->alias, "buildStatus",
                         latest ? status_name(latest->status) : NULL, "createdAt",
                         latest ? latest->created_at : "", "cpuCount",
                         latest ? (int)latest->cpu_count : 0, "memoryMB",
                         latest ? (int)latest->memory_mb : 0);
}

/* /templates/{tid}/...: the template's routes. */
static void template_routes(struct http_request *r, const char *rest)
{
        char tid[BUILD_ALIAS_MAX], bid[64], what[32], hash[80];
        struct build_tpl *t;
        struct build *b;
        int n = 0;

        if (sscanf(rest, "%127[^/]%n", tid, &n) != 1) {
                e2b_reply_error(r, 404, "no route templates/%s", rest);
                return;
        }
        rest += n;
        t = build_tpl_by_id(tid);
        if (!t)
                t = build_tpl_by_alias(tid);
        if (!t) {
                e2b_reply_error(r, 404, "template '%s' not found", tid);
                return;
        }
        if (!rest[0] && r->method == HTTP_GET) {
                http_reply_json(r, 200, tpl_json(t));
        } else if (!rest[0] && r->method == HTTP_DELETE) {
                delete_template(r, t);
        } else if (strcmp(rest, "/tags") == 0 && r->method == HTTP_GET) {
                http_reply_json(r, 200, tags_json(t));
        } else if (sscanf(rest, "/files/%79s", hash) == 1 && r->method == HTTP_GET) {
                char *url;

                if (!build_hash_valid(hash)) {
                        e2b_reply_error(r, 400, "a files hash is 64 hex digits");
                        return;
                }
                url = build_upload_url(r, t->owner, hash);
                if (!url) {
                        e2b_reply_error(r, 500, "out of memory");
                        return;
                }
                http_reply_json(r, 201, json_pack("{s:b, s:s}", "present",
                                                  build_upload_present(t->owner, hash), "url", url));
                free(url);
        } else if (sscanf(rest, "/builds/%63[^/]/%31s", bid, what) == 2 &&
                   (b = build_by_id(t, bid)) != NULL && r->method == HTTP_GET &&
                   (strcmp(what, "status") == 0 || strcmp(what, "logs") == 0)) {
                build_status(r, t, b);
        } else {
                e2b_reply_error(r, 404, "no route templates/%s%s", tid, rest);
        }
}

bool builds_handle(struct http_request *r, const char *route)
{
        char tid[BUILD_ALIAS_MAX], bid[64], alias[BUILD_ALIAS_MAX * 2];
        struct build_tpl *t;
        struct build *b;

        if (strcmp(route, "v3/templates") == 0 && r->method == HTTP_POST) {
                request_build(r);
        } else if (sscanf(route, "v2/templates/%127[^/]/builds/%63s", tid, bid) == 2 &&
                   r->method == HTTP_POST) {
                t = build_tpl_by_id(tid);
                b = build_by_id(t, bid);
                if (!b)
                        e2b_reply_error(r, 404, "build %s of template %s not found", bid, tid);
                else
                        start_build(r, t, b);
        } else if (strcmp(route, "templates") == 0 && r->method == HTTP_GET) {
                json_t *list = json_array();

                for (t = build_templates(); list && t; t = t->next) {
                        if (tenants_may_reach(t->owner))
                                json_array_append_new(list, tpl_json(t));
                }
                http_reply_json(r, 200, list);
        } else if (sscanf(route, "templates/aliases/%255s", alias) == 1 &&
                   r->method == HTTP_GET) {
                if (build_builtin_name(alias))
                        http_reply_json(r, 200, json_pack("{s:s, s:b}", "templateID", alias,
                                                          "public", 1));
                else if ((t = build_tpl_by_alias(alias)) != NULL && build_by_tag(t, ""))
                        http_reply_json(r, 200, json_pack("{s:s, s:b}", "templateID", t->id,
                                                          "public", 0));
                else
                        e2b_reply_error(r, 404, "template '%s' not found", alias);
        } else if (strcmp(route, "templates/tags") == 0 && r->method == HTTP_POST) {
                assign_tags(r);
        } else if (strcmp(route, "templates/tags") == 0 && r->method == HTTP_DELETE) {
                delete_tags(r);
        } else if (strncmp(route, "templates/", 10) == 0) {
                template_routes(r, route + 10);
        } else if (strcmp(route, "templates") == 0 || strncmp(route, "v2/templates", 12) == 0 ||
                   strncmp(route, "v3/templates", 12) == 0) {
                e2b_reply_error(r, 405, "no such method on %s", route);
        } else {
                return false;
        }
        return true;
}

