/* The access log: one line per HTTP request and per WebSocket (at its
 * end), as nginx's and Jupyter Server's operators expect one, and a
 * warning per failed authentication.
 *
 * A line names the request's method, its route class (metrics.h: never
 * the path, whose ids and file names are the callers', nor its query,
 * which may carry ?token=), its status, the bytes each way, its duration
 * and its tenant; never a credential. Failed authentications (401) are
 * logged whatever --access-log says, at most --log-rate-limit lines a
 * second, the rest counted in a "suppressed" line, so that a client
 * guessing keys cannot flood the log. */
#ifndef GLOVEBOX_ACCESS_LOG_H
#define GLOVEBOX_ACCESS_LOG_H

#include <libwebsockets.h>
#include <stdbool.h>
#include <stdint.h>

/* One request or WebSocket, at its end. */
struct access_record {
        const char *method; /* "GET", ...; a WebSocket's upgrade is a GET */
        const char *route;  /* its route class */
        int status;         /* 101 for a WebSocket; 499 when the client left before an answer */
        uint64_t bytes_in;  /* the body read (a WebSocket: bytes received on its connection) */
        uint64_t bytes_out; /* the body written (a WebSocket: bytes sent on its connection) */
        double started;     /* access_log_now() at its start */
        const char *tenant; /* NULL or "": not authenticated */
};

/* --access-log: "all", "errors" (statuses of 400 and above) or "off". */
void access_log_init(const char *mode);
/* Monotonic seconds, for access_record.started. */
double access_log_now(void);
/* Writes a's line (as --access-log says) and, for a 401, the failed
 * authentication's warning with the client's address (from wsi, when
 * given). */
void access_log_write(struct lws *wsi, const struct access_record *a);

#endif
