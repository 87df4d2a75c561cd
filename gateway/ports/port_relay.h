/* The bytes of one client connection relayed to one connection into a
 * sandbox (ports.h decides which, and with what request head).
 *
 * The connection into the sandbox comes from the kernel-host
 * (host_connect). The request head goes first, then the request's body as
 * lws reads it; the answer goes back to the client's socket as it comes,
 * with a few header lines of ours put in after its first line (the head
 * is held until it is whole, at most 16 KiB). Each
 * direction holds at most the buffer bound: past it, the reader of that
 * direction stops (lws's reading of the body, or our reading of a socket),
 * so a side that reads slowly holds the other back instead of growing our
 * memory. An upgrade (WebSocket) takes the client's connection from lws
 * at once, and relays bytes both ways until both sides are done. */
#ifndef GLOVEBOX_PORT_RELAY_H
#define GLOVEBOX_PORT_RELAY_H

#include "protocol/buf.h"

#include <libwebsockets.h>
#include <stdbool.h>
#include <stddef.h>

#define PORT_RELAY_INJECT_MAX 1024 /* header lines put into the answer */
#define PORT_RELAY_PREFIX_MAX 256 /* the path form's prefix */

/* Bytes held per relay and direction (--port-buffer-bytes); how long an
 * upgraded relay may move nothing (--port-idle-timeout, seconds; 0:
 * forever); connections being made at once for one tenant's ports
 * (--port-max-connecting-per-tenant). */
void port_relay_init(size_t buffer_bytes, double idle_timeout, size_t connecting_per_tenant);
/* Starts relaying wsi's request to 127.0.0.1:port in the sandbox of
 * tenant (its owner, whose share of the kernel-host's connecting slots the
 * connect takes; -EBUSY, nothing started, when the share is taken): head
 * (the request head for the app) is taken over (and emptied), inject is
 * copied. app_prefix (the path form's, copied; NULL in the Host form)
 * confines the app's answer to it: Set-Cookie for other paths or with a
 * Domain, Clear-Site-Data and Service-Worker-Allowed are dropped. An
 * interim answer (1xx, but an upgrade's 101) is refused with 502: our
 * headers (the CSP) must reach the answer browsers render. key is the
 * name of the key that admitted the request (NULL or "": none, for a
 * public port or a sandbox's traffic token): a reload that removes that
 * key ends the relay. With wake, sandbox_id is instead the name
 * (kernels/sandboxes.h) of a sandbox asleep: the relay wakes it and
 * connects once it runs, or answers 502 saying why it did not. Returns 0
 * or -errno (nothing is left then). With
 * upgrade, the client's connection is the relay's on return: lws is to
 * hang up on its own descriptor, which no longer is the connection. */
int port_relay_start(struct lws *wsi, const char *sandbox_id, const char *tenant, int port,
                     struct buf *head, const char *inject, const char *app_prefix, bool upgrade,
                     bool body_done, const char *key, bool wake);
/* A piece of the body of wsi's relayed request (LWS_CALLBACK_HTTP_BODY). */
int port_relay_body(struct lws *wsi, const void *data, size_t len);
/* The body is complete (lws counted its Content-Length). */
void port_relay_body_done(struct lws *wsi);
/* Whether wsi's request is being relayed: its HTTP callbacks are ours. */
bool port_relay_active(struct lws *wsi);
/* Any wsi is gone (LWS_CALLBACK_WSI_DESTROY): its relay, if any, ends. */
void port_relay_closed(struct lws *wsi);
/* Relays whose client connection was taken from lws (upgrades). */
size_t port_relay_taken(void);

#endif
