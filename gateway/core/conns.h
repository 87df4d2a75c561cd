/* Client connections: counted per client address and in total, so that
 * one client cannot take every connection (and descriptor) the gateway
 * has; and a deadline for a connection until it makes a request with
 * credentials, so that a client without the token cannot hold one open (a
 * slow TLS handshake, slow headers, refused requests one after another). */
#ifndef GLOVEBOX_CONNS_H
#define GLOVEBOX_CONNS_H

#include "gateway/core/config.h"

#include <libwebsockets.h>
#include <stddef.h>

/* Reads the caps and the deadline from cfg (kept, not copied). */
void conns_init(const struct config *cfg);
/* A client connection was accepted (LWS_CALLBACK_SERVER_NEW_CLIENT_
 * INSTANTIATED): counts it and starts its deadline. Returns 0, or -EMFILE
 * when its address already holds twice its cap (the caller closes it at
 * once, without an answer: that client has had its refusals). */
int conns_accepted(struct lws *wsi);
/* Any wsi is gone (LWS_CALLBACK_WSI_DESTROY); those not counted are
 * ignored. */
void conns_closed(struct lws *wsi);
/* 0 when the connection of wsi may be served; else the status it is to be
 * refused with (429: its address is at --max-connections-per-address; 503:
 * the gateway is at --max-connections), with a message in msg. */
int conns_refusal(struct lws *wsi, char *msg, size_t size);
/* A request on wsi's connection carried credentials (the token, E2B's
 * API key, a sandbox's access token): its deadline ends. */
void conns_admitted(struct lws *wsi);
/* A request on wsi's connection was served without credentials (one of
 * the page's public files): its deadline starts again, so that a browser
 * fetching the page keeps its connection, while requests that are refused
 * never extend it. */
void conns_public(struct lws *wsi);
/* Forgets every connection (at exit). */
void conns_free(void);

#endif
