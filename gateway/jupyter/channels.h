/* The kernel channels WebSocket, GET /api/kernels/{id}/channels, in both
 * wire formats: every client frame becomes a signed ZMQ message on the
 * client session's socket, every message for the session becomes a frame. */
#ifndef GLOVEBOX_CHANNELS_H
#define GLOVEBOX_CHANNELS_H

#include "gateway/kernels/relay.h"
#include "gateway/kernels/session.h"
#include "gateway/core/tenants.h"
#include "protocol/buf.h"

#include <libwebsockets.h>
#include <stdbool.h>

struct channel_conn {
        struct session_sink sink;
        struct lws *wsi;
        struct session *session;
        enum relay_format format;
        struct buf rx;
        bool rx_binary;
        bool rx_oversized; /* past --max-message-bytes: discarding to its end */
        /* The message being written, in pieces, and how far. */
        struct relay_msg *sending;
        size_t frame_len, frame_sent;
        bool frame_binary;
        /* A large frame written by the gateway itself (channels.c): its
         * header, and how much of it went. */
        bool raw;
        uint8_t raw_head[10];
        size_t raw_head_len, raw_head_sent;
        bool closing;
        int close_code;
        char close_reason[100];
        /* The key that opened it: a reload that removes the key closes it. */
        struct tenant_watch key;
};

/* Whether path (below the base URL) is the channels of a kernel the
 * caller may reach: the upgrade's 404 when not (gateway/routes.c). */
bool channels_exists(const char *path);
/* The WebSocket reasons for a connection of format. */
int channels_callback(struct lws *wsi, enum lws_callback_reasons reason, struct channel_conn *c,
                      void *in, size_t len, enum relay_format format);

#endif
