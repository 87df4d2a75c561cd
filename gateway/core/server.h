/* The libwebsockets context: listening socket, the protocols (HTTP and
 * the JSON WebSocket format, the v1 subprotocol, raw descriptors). */
#ifndef GLOVEBOX_SERVER_H
#define GLOVEBOX_SERVER_H

#include "gateway/core/config.h"

#include <libwebsockets.h>
#include <stdbool.h>
#include <stddef.h>

/* Bytes of one request's headers (the request line's included). */
#define SERVER_MAX_HEADER_DATA (16 * 1024)

/* What becomes of a connection's upgrade, told by the routes
 * (gateway/routes.c): core knows no WebSocket of its own. */
struct server_sockets {
        /* LWS_CALLBACK_HTTP_CONFIRM_UPGRADE: 0 lets it through, non-zero
         * refuses it (the refusal already written). */
        int (*confirm_upgrade)(struct lws *wsi);
        /* The upgraded connection's callbacks (ESTABLISHED, RECEIVE,
         * SERVER_WRITEABLE, CLOSED) in the JSON format (protocol 0) or the
         * v1 subprotocol; state is the connection's own, state_size bytes,
         * zeroed before ESTABLISHED. */
        int (*websocket)(struct lws *wsi, enum lws_callback_reasons reason, void *state,
                         void *in, size_t len, bool v1);
        size_t state_size;
        /* Every connection's end, raw ones (a port's relay) included. */
        void (*closed)(struct lws *wsi);
};

/* Creates the context listening on cfg's address, its upgrades handed to
 * sockets (kept by pointer); NULL on failure (logged). */
struct lws_context *server_create(const struct config *cfg, const struct server_sockets *sockets);

#endif
