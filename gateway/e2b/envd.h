/* E2B's envd (gateway/e2b/e2b.h) inside the gateway, in three files: envd.c
 * has the Connect framing all use, the acting user, the files and the
 * routes; envd_process.c the process RPCs (commands, terminals);
 * envd_watch.c the directory watchers. Only they include this. */
#ifndef GLOVEBOX_ENVD_H
#define GLOVEBOX_ENVD_H

#include "gateway/e2b/e2b.h"
#include "gateway/kernels/files.h"
#include "gateway/core/http.h"
#include "protocol/buf.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CONNECT_JSON "application/connect+json"
#define MAX_ENVELOPE (1024 * 1024) /* one Connect message */
#define ENVD_MAX_DEPTH 64          /* ListDir's depth, at most */

/* One envelope on a stream: a flags byte (2: the end), a big-endian
 * length, msg as JSON (stolen). Dropped, and said once in a while, when
 * the client is too far behind. */
void envd_write_frame(struct http_request *r, unsigned char flags, json_t *msg);
/* A unary call's error: an HTTP status and {"code", "message"}; a
 * streaming call's (stream true): 200, then an end-of-stream frame with
 * it. error is a negative errno, mapped to Connect's codes. */
void envd_reply_error(struct http_request *r, bool stream, int error, const char *message);
void envd_error(struct http_request *r, bool stream, int error, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* A request's JSON object, nulls dropped; NULL if it is not one. */
json_t *envd_parse_request(const char *data, size_t len);
/* The request of a streaming call: one envelope; NULL if it is not. */
json_t *envd_read_envelope(struct http_request *r);
/* A header's number name ("connect-timeout-ms:") within [min, max]; 0
 * when it is absent or outside. */
double envd_header_number(struct http_request *r, const char *name, double min, double max);
/* The Connect error body {"code", "message"} for -errno error. */
json_t *envd_error_body(int error, const char *message);
/* The user the request acts as ("Authorization: Basic" or ?username=):
 * 0, or -EINVAL / -EPERM with the reason in message. */
int envd_user_of(struct http_request *r, struct e2b_sandbox *s, enum files_user *who, char *message,
                 size_t size);

/* process.Process/Start, and the other process RPCs (List, Connect,
 * SendInput, Update, SendSignal, CloseStdin). */
void envd_process_start(struct http_request *r, struct e2b_sandbox *s);
void envd_process_rpc(struct http_request *r, struct e2b_sandbox *s, const char *method);

/* envd_watch.c: WatchDir, CreateWatcher, GetWatcherEvents, RemoveWatcher;
 * false for another method. */
bool envd_watch_rpc(struct http_request *r, struct e2b_sandbox *s, const char *method);
/* Ends the sandbox's watchers (it is going away). */
void envd_watch_forget(struct e2b_sandbox *s);

#endif
