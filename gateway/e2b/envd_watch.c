/* E2B's envd directory watchers: WatchDir, a server stream (the JS SDK's
 * files.watchDir), and CreateWatcher / GetWatcherEvents / RemoveWatcher,
 * polled (the Python SDK's files.watch_dir). gateway/kernels/watch.c does the
 * watching; here they meet their clients. A stream's watcher ends with its
 * client, at its Connect-Timeout-Ms or when the watched directory goes; a
 * polled one when removed; both with their sandbox. */
#include "autoconf.h"

#include "gateway/e2b/envd.h"
#include "gateway/core/loop.h"
#include "gateway/kernels/watch.h"
#include "protocol/ids.h"
#include "protocol/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_KEEPALIVE_S 50
#define RETRY_MS            50   /* a stream whose client is behind is tried again */
#define MAX_POLLED_EVENTS   4096 /* per GetWatcherEvents answer */

struct watcher {
        struct watcher *next;
        struct e2b_sandbox *owner;
        char id[JP_UUID_SIZE];
        struct watch *watch;
        struct http_request *r; /* the WatchDir stream; NULL when polled */
        double keepalive_ms;
        lws_sorted_usec_list_t keepalive, deadline, retry;
};

static struct watcher *watchers;

static void watcher_free(struct watcher *w)
{
        for (struct watcher **link = &watchers; *link; link = &(*link)->next) {
                if (*link == w) {
                        *link = w->next;
                        break;
                }
        }
        loop_timer_stop(&w->keepalive);
        loop_timer_stop(&w->deadline);
        loop_timer_stop(&w->retry);
        watch_destroy(&w->watch);
        if (w->r) {
                w->r->ctx = NULL;
                w->r->cleanup = NULL;
        }
        free(w);
}

/* Ends the stream (with error when not NULL) and the watcher. */
static void end_stream(struct watcher *w, int error, const char *message)
{
        if (w->r) {
                envd_write_frame(w->r, 2,
                                 error
                                     ? json_pack("{s:o}", "error", envd_error_body(error, message))
                                     : json_object());
                http_stream_end(w->r);
        }
        watcher_free(w);
}

static void on_retry(lws_sorted_usec_list_t *sul);

/* Sends what is queued while the client keeps up; the rest waits. */
static void flush(struct watcher *w)
{
        json_t *one = json_array();

        while (one && w->r && watch_pending(w->watch) > 0 &&
               http_stream_pending(w->r) < w->r->out.max / 2) {
                json_array_clear(one);
                if (watch_take(w->watch, one, 1) == 0)
                        break;
                envd_write_frame(w->r, 0, json_pack("{s:O}", "filesystem", json_array_get(one, 0)));
        }
        json_decref(one);
        if (w->r && watch_pending(w->watch) > 0)
                loop_timer_start(&w->retry, on_retry, RETRY_MS);
}

static void on_events(void *arg);

static void on_retry(lws_sorted_usec_list_t *sul)
{
        on_events(lws_container_of(sul, struct watcher, retry));
}

static void on_events(void *arg)
{
        struct watcher *w = arg;

        if (w->r)
                flush(w);
        /* The watched directory is gone: the stream ends once all is sent. */
        if (w->r && watch_gone(w->watch) && watch_pending(w->watch) == 0)
                end_stream(w, 0, NULL);
}

static void on_keepalive(lws_sorted_usec_list_t *sul)
{
        struct watcher *w = lws_container_of(sul, struct watcher, keepalive);

        envd_write_frame(w->r, 0, json_pack("{s:{}}", "keepalive"));
        loop_timer_start(&w->keepalive, on_keepalive, w->keepalive_ms);
}

/* At Connect-Timeout-Ms the stream ends as envd's does. */
static void on_deadline(lws_sorted_usec_list_t *sul)
{
        struct watcher *w = lws_container_of(sul, struct watcher, deadline);

        flush(w);
        end_stream(w, -ETIMEDOUT, "the watch reached its timeout");
}

static void on_client_gone(struct http_request *r)
{
        struct watcher *w = r->ctx;

        r->ctx = NULL;
        r->cleanup = NULL;
        if (w) {
                w->r = NULL;
                watcher_free(w);
        }
}

/* Creates a watcher of req's path as the request's user: a stream's when
 * stream, else a polled one. Replies with the error itself. */
static struct watcher *watcher_new(struct http_request *r, struct e2b_sandbox *s, json_t *req,
                                   bool stream)
{
        char path[PATH_MAX], message[PATH_MAX + 128];
        const char *given = json_string_value(json_object_get(req, "path"));
        json_t *recursive = json_object_get(req, "recursive");
        /* Protobuf's JSON takes a field by either of its names. */
        json_t *with_entry = json_object_get(req, "includeEntry")
                                 ? json_object_get(req, "includeEntry")
                                 : json_object_get(req, "include_entry");
        json_t *network_mounts = json_object_get(req, "allowNetworkMounts")
                                     ? json_object_get(req, "allowNetworkMounts")
                                     : json_object_get(req, "allow_network_mounts");
        enum files_user who;
        struct watcher *w;
        int rc;

        if (!req) {
                envd_error(r, stream, -EINVAL, "the request is not a JSON object");
                return NULL;
        }
        if (envd_user_of(r, s, &who, message, sizeof(message)) < 0) {
                envd_error(r, stream, -EINVAL, "%s", message);
                return NULL;
        }
        /* allowNetworkMounts lifts envd's refusal of NFS, SMB and FUSE
         * directories; a sandbox can mount none, so it changes nothing. */
        if (!given || files_normalize(given, path, sizeof(path)) < 0 ||
            (recursive && !json_is_boolean(recursive)) ||
            (with_entry && !json_is_boolean(with_entry)) ||
            (network_mounts && !json_is_boolean(network_mounts))) {
                envd_error(r, stream, -EINVAL,
                           "path must be a directory's path; recursive, includeEntry and "
                           "allowNetworkMounts booleans");
                return NULL;
        }
        w = calloc(1, sizeof(*w));
        if (!w || jp_uuid4(w->id) < 0) {
                free(w);
                envd_error(r, stream, -ENOMEM, "out of memory");
                return NULL;
        }
        rc = watch_new(e2b_box(s), e2b_owner(s), who, path, json_is_true(recursive),
                       json_is_true(with_entry), on_events, w, &w->watch, message, sizeof(message));
        if (rc < 0) {
                free(w);
                if (rc == -ENOENT)
                        envd_error(r, stream, rc, "path %s not found", path);
                else if (rc == -ENOTDIR)
                        envd_error(r, stream, rc, "path %s is not a directory", path);
                else
                        envd_error(r, stream, rc, "%s", message);
                return NULL;
        }
        w->owner = s;
        w->next = watchers;
        watchers = w;
        return w;
}

static struct watcher *watcher_find(struct e2b_sandbox *s, json_t *req)
{
        const char *id = json_string_value(json_object_get(req, "watcherId"));

        if (!id)
                id = json_string_value(json_object_get(req, "watcher_id"));
        for (struct watcher *w = watchers; id && w; w = w->next) {
                if (w->owner == s && !w->r && strcmp(w->id, id) == 0)
                        return w;
        }
        return NULL;
}

static void watch_dir(struct http_request *r, struct e2b_sandbox *s)
{
        json_t *req = envd_read_envelope(r);
        struct watcher *w = watcher_new(r, s, req, true);
        double timeout_ms = envd_header_number(r, "connect-timeout-ms:", 1, 1e10);
        double keepalive_s = envd_header_number(r, "keepalive-ping-interval:", 1, 3600);

        json_decref(req);
        if (!w)
                return;
        w->r = r;
        r->ctx = w;
        r->cleanup = on_client_gone;
        w->keepalive_ms = 1000.0 * (keepalive_s > 0 ? keepalive_s : DEFAULT_KEEPALIVE_S);
        http_stream_start(r, 200, CONNECT_JSON);
        envd_write_frame(r, 0, json_pack("{s:{}}", "start"));
        loop_timer_start(&w->keepalive, on_keepalive, w->keepalive_ms);
        if (timeout_ms > 0)
                loop_timer_start(&w->deadline, on_deadline, timeout_ms);
}

bool envd_watch_rpc(struct http_request *r, struct e2b_sandbox *s, const char *method)
{
        json_t *req = NULL, *events;
        struct watcher *w;

        if (strcmp(method, "WatchDir") == 0) {
                watch_dir(r, s);
                return true;
        }
        if (strcmp(method, "CreateWatcher") != 0 && strcmp(method, "GetWatcherEvents") != 0 &&
            strcmp(method, "RemoveWatcher") != 0)
                return false;
        req = envd_parse_request(r->body.data, r->body.len);
        if (strcmp(method, "CreateWatcher") == 0) {
                w = watcher_new(r, s, req, false);
                if (w)
                        http_reply_json(r, 200, json_pack("{s:s}", "watcherId", w->id));
        } else if (!(w = watcher_find(s, req))) {
                envd_error(r, false, -ENOENT, "watcher not found");
        } else if (strcmp(method, "GetWatcherEvents") == 0) {
                events = json_array();
                if (events)
                        watch_take(w->watch, events, MAX_POLLED_EVENTS);
                http_reply_json(r, 200, json_pack("{s:o}", "events", events));
        } else {
                watcher_free(w);
                http_reply_json(r, 200, json_object());
        }
        json_decref(req);
        return true;
}

void envd_watch_forget(struct e2b_sandbox *s)
{
        struct watcher *w = watchers;

        while (w) {
                struct watcher *next = w->next;

                if (w->owner != s) {
                        w = next;
                        continue;
                }
                /* The sandbox went: the stream is cut short, as the
                 * connection to a sandbox that died is. */
                if (w->r)
                        http_stream_abort(w->r);
                watcher_free(w);
                w = next;
        }
}
