/* What the parts of E2B's envd (envd.c: files and processes; envd_watch.c:
 * directory watchers) share: Connect framing, requests, the acting user. */
#ifndef GLOVEBOX_ENVD_H
#define GLOVEBOX_ENVD_H

#include "gateway/e2b.h"
#include "gateway/files.h"
#include "gateway/http.h"

#include <jansson.h>
#include <stdbool.h>

#define ENVD_CONNECT_JSON "application/connect+json"

/* Queues one Connect envelope (flags 2: the end of the stream) with msg,
 * which it takes; dropped, with a warning, when the client is too far
 * behind. */
void envd_write_frame(struct http_request *r, unsigned char flags, json_t *msg);
/* Replies with a Connect error: a unary call's status and body, or a
 * streaming call's (stream true) whole stream, its end frame the error. */
void envd_connect_error(struct http_request *r, bool stream, int error, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* The Connect error body {"code", "message"} for -errno error. */
json_t *envd_error_body(int error, const char *message);
/* A unary request's JSON object, nulls dropped; NULL if not an object. */
json_t *envd_parse_request(const char *data, size_t len);
/* A streaming request's one envelope, parsed; NULL if malformed. */
json_t *envd_read_envelope(struct http_request *r);
/* The user the request acts as ("Authorization: Basic" or ?username=):
 * 0, or -EINVAL / -EPERM with the reason in message. */
int envd_user_of(struct http_request *r, struct e2b_sandbox *s, enum files_user *who, char *message,
                 size_t size);

/* envd_watch.c: WatchDir, CreateWatcher, GetWatcherEvents, RemoveWatcher;
 * false for another method. */
bool envd_watch_rpc(struct http_request *r, struct e2b_sandbox *s, const char *method);
/* Ends the sandbox's watchers (it is going away). */
void envd_watch_forget(struct e2b_sandbox *s);

#endif
