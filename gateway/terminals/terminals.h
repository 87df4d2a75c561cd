/* Jupyter Server's terminals: GET/POST /api/terminals, GET/DELETE
 * /api/terminals/{name}, and the WebSocket /terminals/websocket/{name}
 * that speaks terminado's protocol (JSON arrays: ["stdin", text],
 * ["set_size", rows, cols, ...] in; ["setup", {}], ["stdout", text],
 * ["disconnect", 1] out), as JupyterLab's TerminalManager uses them.
 *
 * A terminal is a login shell on a pseudo-terminal of a sandbox (the
 * kernel-host's HOSTMSG_START with pty): the sandbox of the kernel the
 * POST body names ({"kernel_id"}, a Glovebox extension) or a new one of
 * its own. It ends when its shell exits, on DELETE, or with its sandbox. */
#ifndef GLOVEBOX_TERMINALS_H
#define GLOVEBOX_TERMINALS_H

#include "gateway/core/http.h"
#include "gateway/core/tenants.h"
#include "protocol/buf.h"

#include <libwebsockets.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct terminal;
struct terminal_frame;

/* One WebSocket client of a terminal (the per-connection data lws keeps). */
struct terminal_conn {
        struct terminal_conn *next; /* the terminal's other clients */
        struct lws *wsi;
        struct terminal *term;
        struct buf rx;                      /* the message being received, bounded */
        bool rx_oversized;                  /* past the bound: discarding to its end */
        struct terminal_frame *head, *tail; /* text frames to write, in order */
        size_t queued;                      /* their bytes */
        bool closing;
        int close_code;
        char close_reason[100];
        struct tenant_watch key; /* the key that opened it: its removal closes it */
};

/* Whether path (below the base URL) is a terminal's WebSocket. */
bool terminals_is_socket_path(const char *path);
/* At LWS_CALLBACK_HTTP_CONFIRM_UPGRADE of such a path, after the checks
 * every upgrade gets: whether the terminal exists. */
bool terminals_socket_exists(const char *path);
/* The WebSocket reasons of a terminal's connection. */
int terminals_callback(struct lws *wsi, enum lws_callback_reasons reason, struct terminal_conn *c,
                       void *in, size_t len);
/* /api/terminals (name NULL) and /api/terminals/{name}. */
void terminals_handle(struct http_request *r, const char *name);
/* Adds what the terminals in sandboxes of their own that owner started
 * hold (their sandboxes' limits) to *memory_mb and *cpu_millicores. */
void terminals_usage(const char *owner, int64_t *memory_mb, int64_t *cpu_millicores);
/* Ends every terminal (at shutdown). */
void terminals_shutdown(void);

#endif
