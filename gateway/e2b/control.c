#include "autoconf.h"

#include "gateway/core/ports_domain.h"
#include "gateway/e2b/e2b.h"
#include "gateway/e2b/builds.h"
#include "gateway/e2b/e2b_internal.h"
#include "gateway/e2b/snapshots.h"
#include "gateway/e2b/volumes.h"
#include "gateway/e2b/list.h"
#include "gateway/e2b/metrics.h"
#include "gateway/e2b/sandbox.h"
#include "gateway/core/fleet.h"
#include "gateway/core/http.h"
#include "gateway/core/tenants.h"
#include "gateway/kernels/egress.h"
#include "gateway/kernels/pause.h"
#include "gateway/kernels/volumes.h"
#include "protocol/kernelspec.h"
#include "protocol/log.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The envd whose features are served (docs/e2b-protocol.md §7): octet-stream
 * and gzip uploads (0.5.7), file metadata (0.6.2), watch events with their
 * entry (0.6.3), allowNetworkMounts (0.6.4). */
#define E2B_ENVD_VERSION "0.6.4"

static void format_time(time_t t, char *out, size_t size)
{
        struct tm tm;

        gmtime_r(&t, &tm);
        strftime(out, size, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* E2B's volumeMounts: [{name, path}] (a volume destroyed since shows
 * its id). */
static json_t *volume_mounts_json(const struct e2b_sandbox *s)
{
        json_t *list = json_array();

        for (size_t i = 0; list && s->volumes && s->volumes[i]; i++) {
                char id[JP_UUID_SIZE];
                const char *path;
                const struct volume *v;

                if (!hostmsg_volume_mount_split(s->volumes[i], id, &path))
                        continue;
                v = volume_by_id(id);
                json_array_append_new(
                    list, json_pack("{s:s, s:s}", "name", v ? v->name : id, "path", path));
        }
        return list;
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
                 * (see create.c's create_network), and death at its timeout. */
                json_object_set_new(o, "allowInternetAccess", json_boolean(networked));
                if (networked)
                        json_object_set_new(o, "network", egress_describe(&s->box->network));
                json_object_set_new(o, "lifecycle",
                                    json_pack("{s:s, s:b}", "onTimeout",
                                              s->on_timeout_pause ? "pause" : "kill", "autoResume",
                                              s->auto_resume));
                json_object_set_new(o, "volumeMounts", volume_mounts_json(s));
                /* A pause keeps the files only: said wherever the pause
                 * shows, so that no variable is lost unannounced. */
                if (s->phase == E2B_PAUSED && s->checkpoint[0])
                        json_object_set_new(o, "glovebox", json_pack("{s:b}", "memoryKept", true));
                else if (s->phase == E2B_PAUSED)
                        json_object_set_new(o, "glovebox",
                                            json_pack("{s:b, s:s}", "memoryKept", false,
                                                      "pauseNotice", e2b_pause_notice(s)));
        }
        if (o && detail) {
                json_object_set_new(o, "envdAccessToken", json_string(s->token));
                json_object_set_new(o, "domain", json_string(ports_domain()));
        }
        return o;
}

/* What create and connect answer: where and how to reach the sandbox. */
json_t *e2b_created_json(const struct e2b_sandbox *s)
{
        /* E2B's getHost(port) is "{port}-{sandboxID}.{domain}": the
         * ports domain makes that a name the gateway serves (ports.h). */
        return json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:s}", "sandboxID", s->id,
                         "templateID", s->template_id, "alias", s->template_id, "clientID",
                         "glovebox", "envdVersion", E2B_ENVD_VERSION, "envdAccessToken", s->token,
                         "trafficAccessToken", s->traffic_token, "domain", ports_domain());
}

/* A lifetime in seconds from body's "timeout" (dflt when absent); false
 * after replying 400 when it is not a number within the server's maximum,
 * from 1 second, or from 0 when zero_ok (E2B's setTimeout(0): end now). */
bool e2b_timeout_of(struct http_request *r, json_t *body, double dflt, bool zero_ok,
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

/* A sandbox the caller may reach (tenants.h); another tenant's is not
 * found, as if it did not exist. */
static struct e2b_sandbox *find(const char *id)
{
        struct e2b_sandbox *s = e2b_find_any(id);

        return s && tenants_may_reach(s->owner) ? s : NULL;
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
        for (struct e2b_sandbox *s = e2b_sandboxes(); s; s = s->next)
                count++;
        found = calloc(count + 1, sizeof(*found));
        list = json_array();
        if (!found || !list) {
                e2b_reply_error(r, 500, "out of memory");
                goto out;
        }
        for (struct e2b_sandbox *s = e2b_sandboxes(); s; s = s->next) {
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

/* E2B's features that Glovebox lacks, named in the 400 each gets, so that
 * an SDK call reaching one says what it cannot do, never "not found": the
 * top-level routes, and the actions on a sandbox. */
static const char *lacking_route(const char *route)
{
        static const char *const routes[] = {"sandboxes/metrics", "v2/sandboxes/metrics", "teams",
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
        static const char *const actions[] = {"network", "logs", "refreshes", NULL};

        return jp_strv_contains(actions, action);
}

/* A connect that waited for a resume (wake.c): asked again, now that
 * the sandbox runs. The control plane's paths are below "e2b/". */
static void connect_woken(struct http_request *r)
{
        const char *route = r->path + 4;

        e2b_control_plane(r, route + strspn(route, "/"));
}

void e2b_control_plane(struct http_request *r, const char *route)
{
        char id[64], rest[64];
        struct e2b_sandbox *s;
        json_t *body;

        if (!e2b_authorized_api(r)) {
                e2b_reply_error(r, 401, "Invalid API key");
                return;
        }
        if (e2b_snapshots_handle(r, route) || builds_handle(r, route) ||
            e2b_volumes_handle(r, route))
                return;
        if (lacking_route(route)) {
                e2b_reply_error(r, 400, "%s: not supported by Glovebox", lacking_route(route));
                return;
        }
        if (strcmp(route, "v2/sandboxes") == 0 || strcmp(route, "sandboxes") == 0) {
                if (r->method == HTTP_POST)
                        e2b_create_sandbox(r);
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
                e2b_sandbox_kill(s);
                http_reply_empty(r, 204);
        } else if (strcmp(rest, "pause") == 0 && r->method == HTTP_POST) {
                /* {"memory": false} keeps the files only; true (the SDKs'
                 * default) the memory too when a checkpoint can take it
                 * (pause_memory.c), else the files, and its info says why. */
                body = http_parse_body(r);
                if (!body)
                        return; /* 400 */
                e2b_pause_begin(s, r, !json_is_false(json_object_get(body, "memory")));
                json_decref(body);
        } else if ((strcmp(rest, "timeout") == 0 || strcmp(rest, "connect") == 0 ||
                    strcmp(rest, "resume") == 0) &&
                   r->method == HTTP_POST) {
                double t; /* negative: none given */

                body = http_parse_body(r);
                if (!body || !e2b_timeout_of(r, body, -1, true, &t)) {
                        json_decref(body);
                        return;
                }
                json_decref(body);
                /* A connect resumes a paused sandbox, as E2B's does. */
                if (strcmp(rest, "resume") == 0 ||
                    (strcmp(rest, "connect") == 0 && s->phase == E2B_PAUSED)) {
                        e2b_resume_begin(s, r, t > 0 ? t : 0);
                        return;
                }
                /* A connect while its timeout pauses it (no request waits
                 * for that pause) resumes it once paused, as E2B's waits. */
                if (strcmp(rest, "connect") == 0 && s->phase == E2B_PAUSING && !s->pending) {
                        e2b_pending_set(s, r);
                        s->pending_connect = true;
                        s->pending_timeout = t > 0 ? t : 0;
                        return;
                }
                /* A connect while a request's resume (autoResume) runs
                 * waits for it as that request does. */
                if (strcmp(rest, "connect") == 0 && s->phase == E2B_RESUMING && e2b_wakeable(s)) {
                        e2b_wake_request(s, r, connect_woken);
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
                        e2b_set_timeout(s, 0);
                else if (t > 0 &&
                         (strcmp(rest, "timeout") == 0 || time(NULL) + (time_t)t > s->end_at))
                        e2b_set_timeout(s, t);
                if (strcmp(rest, "connect") == 0)
                        http_reply_json(r, 200, e2b_created_json(s));
                else
                        http_reply_empty(r, 204);
        } else if (strcmp(rest, "snapshots") == 0 && r->method == HTTP_POST) {
                e2b_snapshot_begin(s, r);
        } else if (strcmp(rest, "fork") == 0 && r->method == HTTP_POST) {
                e2b_fork_begin(s, r);
        } else if (strcmp(rest, "metrics") == 0 && r->method == HTTP_GET) {
                e2b_metrics_reply(r, &s->metrics);
        } else if (lacking_action(rest)) {
                e2b_reply_error(r, 400, "%s: not supported by Glovebox", rest);
        } else {
                e2b_reply_error(r, 404, "no route %s", route);
        }
}
