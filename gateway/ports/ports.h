/* Ports: a server listening inside a sandbox, reached through the gateway.
 *
 *   /api/kernels/{id}/ports/{port}/{path}   the kernel's sandbox, port, /{path}
 *   Host: {port}-{id}.{ports domain}         the same, for the whole path; id is a
 *                                            kernel's or an E2B sandbox's (getHost)
 *
 * Only 127.0.0.1:{port} in the sandbox's own network namespace is reached:
 * the kernel-host makes that connection (ports.h there) and hands the
 * socket over; the gateway relays bytes both ways, HTTP requests and
 * WebSocket upgrades alike, each direction within --port-buffer-bytes
 * (a peer that stops reading stops the other side, it does not grow our
 * memory). The request head is rebuilt from what libwebsockets parsed: the
 * path without the prefix, the gateway's credentials taken out, and
 * "Connection: close" (one request per client connection). Needs plain
 * HTTP: over TLS the relay cannot write the client's socket itself. */
#ifndef GLOVEBOX_PORTS_H
#define GLOVEBOX_PORTS_H

#include "gateway/core/http.h"
#include "gateway/kernels/kernels.h"
#include "gateway/kernels/sandboxes.h"

#include <libwebsockets.h>
#include <stdbool.h>

/* At start: the relay's buffers, and the ports domain said once. */
int ports_init(const struct config *cfg);

/* Whether wsi's request is for a sandbox's port (either form). */
bool ports_wanted(struct lws *wsi);
/* At LWS_CALLBACK_HTTP of such a request: checks it (Host, token, Origin)
 * and starts relaying it, or replies with the error through r. */
void ports_begin(struct lws *wsi, struct http_request *r);
/* At LWS_CALLBACK_HTTP_CONFIRM_UPGRADE of such a request: its result. */
int ports_confirm_upgrade(struct lws *wsi);

/* GET and PUT /api/kernels/{id}/ports: the ports of the kernel's sandbox
 * that need no token ({"public": [8000, ...]}). */
void ports_api(struct http_request *r, struct kernel *k);

#endif
