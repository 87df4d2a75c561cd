/* The libwebsockets context: listening socket, the protocols (HTTP and
 * the JSON WebSocket format, the v1 subprotocol, raw descriptors). */
#ifndef GLOVEBOX_SERVER_H
#define GLOVEBOX_SERVER_H

#include "gateway/core/config.h"

#include <libwebsockets.h>

/* Bytes of one request's headers (the request line's included). */
#define SERVER_MAX_HEADER_DATA (16 * 1024)

/* Creates the context listening on cfg's address; NULL on failure (logged). */
struct lws_context *server_create(const struct config *cfg);

#endif
