#include "autoconf.h"

#include "gateway/jupyter/channels.h"
#include "gateway/core/conns.h"
#include "gateway/core/hostcheck.h"
#include "gateway/core/http.h"
#include "gateway/kernels/kernels.h"
#include "gateway/core/metrics.h"
#include "protocol/fleetid.h"
#include "protocol/log.h"
#include "protocol/request.h"
#include "protocol/wsjson.h"
#include "protocol/wsv1.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

/* Finds the kernel of ".../api/kernels/{id}/channels"; NULL if none. */
static struct kernel *kernel_of_path(const char *path)
{
        static const char prefix[] = "api/kernels/";
        static const char suffix[] = "/channels";
        size_t len = strlen(path);
        char id[JP_UUID_SIZE];

        if (len != strlen(prefix) + 36 + strlen(suffix) || strncmp(path, prefix, 12) != 0 ||
            strcmp(path + 12 + 36, suffix) != 0)
                return NULL;
        memcpy(id, path + 12, 36);
        id[36] = '\0';
        return kernel_find(id);
}

bool channels_exists(const char *path)
{
        return kernel_of_path(path) != NULL;
}

static void conn_wake(struct session_sink *sink)
{
        struct channel_conn *c = lws_container_of(sink, struct channel_conn, sink);

        lws_callback_on_writable(c->wsi);
}

static void close_later(struct channel_conn *c, int code, const char *reason)
{
        c->closing = true;
        c->close_code = code;
        snprintf(c->close_reason, sizeof(c->close_reason), "%s", reason);
        /* Mid-frame, or while libwebsockets still holds part of a write,
         * no close frame can go before the client reads what is ahead of
         * it, and libwebsockets calls back for writing only once what it
         * holds has left: a client that reads nothing more (one replaced
         * by a newer connection, one whose key was removed) would keep the
         * connection, its socket and what lws holds for ever. It ends now,
         * without a close frame: a socket shut down both ways reads as hung
         * up, and lws closes it. (Not on HTTP/2, where the socket is every
         * stream's; a stream is never written raw.) */
        if (lws_get_network_wsi(c->wsi) == c->wsi &&
            (c->raw || lws_send_pipe_choked(c->wsi))) {
                shutdown(lws_get_socket_fd(c->wsi), SHUT_RDWR);
                return;
        }
        lws_callback_on_writable(c->wsi);
}

/* A message cut off mid-frame goes back to the head of the session's
 * queue, so that the next connection of the session gets it whole. */
static void requeue_sending(struct channel_conn *c)
{
        if (c->sending && c->session)
                outbox_unpop(&c->session->outbox, c->sending);
        else
                relay_msg_unref(&c->sending);
        c->sending = NULL;
}

static void conn_closing(struct session_sink *sink, int code, const char *reason)
{
        struct channel_conn *c = lws_container_of(sink, struct channel_conn, sink);

        /* (The session is being replaced or destroyed: a replacement gets
         * the message; a destroyed session drops it with its queue.) */
        requeue_sending(c);
        c->session = NULL;
        close_later(c, code, reason);
}

/* The query's last_msg_id (a Glovebox extension: the last message the
 * client handled, to be replayed from), or NULL when absent or unfit: it
 * must be a message id's size and printable ASCII. An unfit one is ignored
 * rather than refused: the connection works as it would without it. */
static const char *last_msg_id_of(struct lws *wsi, char *arg, size_t size)
{
        const char *id = lws_get_urlarg_by_name(wsi, "last_msg_id=", arg, (int)size);
        size_t len = id ? strlen(id) : 0;

        if (!id || len == 0 || len >= JP_MSG_ID_SIZE)
                return NULL;
        for (size_t i = 0; i < len; i++) {
                unsigned char ch = (unsigned char)id[i];

                if (ch < 0x21 || ch > 0x7e)
                        return NULL;
        }
        return id;
}

/* Removed keys stop working at once, open connections included. */
static void on_key_removed(struct tenant_watch *w)
{
        close_later(lws_container_of(w, struct channel_conn, key), 1008,
                    "The key of this connection was removed");
}

static int on_established(struct lws *wsi, struct channel_conn *c, enum relay_format format)
{
        char path[HTTP_PATH_MAX], arg[256], last_arg[256];
        const char *session_id, *last_msg_id;
        struct kernel *k;

        memset(c, 0, sizeof(*c));
        c->wsi = wsi;
        c->format = format;
        c->sink.wake = conn_wake;
        c->sink.closing = conn_closing;
        buf_init(&c->rx, (size_t)config_get()->max_message_bytes);
        /* A callback of its own: the key is checked again to know the
         * caller (the upgrade was refused without one). */
        if (!http_authorized(wsi))
                return -1;
        k = http_route_path(wsi, path, sizeof(path)) == 0 ? kernel_of_path(path) : NULL;
        if (!k)
                return -1;
        session_id = lws_get_urlarg_by_name(wsi, "session_id=", arg, sizeof(arg));
        if (session_id && strlen(session_id) > SESSION_ID_MAX)
                session_id = NULL;
        c->session = session_open(k, session_id);
        /* Without a session_id nobody can come back for it: it ends with
         * its connection instead of lingering. */
        if (c->session && !session_id)
                c->session->private = true;
        if (!c->session)
                return -1;
        klog_debug(k->id, "client connected (%s format, session %s)",
                   format == RELAY_V1 ? "v1" : "json", fleetid_short(c->session->id).s);
        /* Only a session that existed can have delivered it. */
        last_msg_id = session_id ? last_msg_id_of(wsi, last_arg, sizeof(last_arg)) : NULL;
        session_attach(c->session, &c->sink, last_msg_id);
        tenants_watch(&c->key, tenants_caller()->name, on_key_removed);
        return 0;
}

/* Is msg_type in --allowed-message-types (all are when it is empty)? */
static bool type_allowed(const char *msg_type)
{
        const char *list = config_get()->allowed_message_types;
        size_t len = strlen(msg_type);

        if (!*list)
                return true;
        for (const char *p = list; *p;) {
                const char *comma = strchr(p, ',');
                size_t n = comma ? (size_t)(comma - p) : strlen(p);

                while (n && *p == ' ') {
                        p++;
                        n--;
                }
                while (n && p[n - 1] == ' ')
                        n--;
                if (n == len && strncmp(p, msg_type, n) == 0)
                        return true;
                p = comma ? comma + 1 : p + n;
        }
        return false;
}

/* Delivers a message the gateway makes in the parent of a client's
 * message (header, its JSON) to that client alone. */
static void deliver_made(struct channel_conn *c, enum jp_channel channel, const char *msg_type,
                         const char *parent, json_t *content)
{
        struct relay_msg *m = content ? relay_msg_make(channel, msg_type, parent, content) : NULL;

        if (m)
                session_deliver(c->session, m);
        relay_msg_unref(&m);
        json_decref(content);
}

/* Answers a request that no kernel will answer, so that its client does not
 * wait for ever: an error reply (and for a cell, its error output), then
 * the idle status clients wait for to call a request done. */
static void answer_error(struct channel_conn *c, const struct jp_msg *msg,
                         const struct jp_request *req, const char *ename, const char *evalue)
{
        char *parent = strndup((const char *)msg->header.ptr, msg->header.len);
        bool cell = strcmp(req->msg_type, "execute_request") == 0;
        char line[JP_REQUEST_REASON_SIZE + 64];

        if (!parent)
                return;
        snprintf(line, sizeof(line), "%s: %s", ename, evalue);
        if (cell)
                deliver_made(c, JP_IOPUB, "error", parent,
                             json_pack("{s:s, s:s, s:[s]}", "ename", ename, "evalue", evalue,
                                       "traceback", line));
        deliver_made(c, msg->channel, req->reply_type, parent,
                     cell ? json_pack("{s:s, s:s, s:s, s:[s], s:n}", "status", "error", "ename",
                                      ename, "evalue", evalue, "traceback", line, "execution_count")
                          : json_pack("{s:s, s:s, s:s, s:[s]}", "status", "error", "ename", ename,
                                      "evalue", evalue, "traceback", line));
        deliver_made(c, JP_IOPUB, "status", parent, json_pack("{s:s}", "execution_state", "idle"));
        free(parent);
}

/* Answers a message the allow-list refuses, in the cell that sent it. */
static void refuse_type(struct channel_conn *c, const struct jp_msg *msg,
                        const struct jp_request *req)
{
        char *parent = strndup((const char *)msg->header.ptr, msg->header.len);
        char text[256];

        snprintf(text, sizeof(text),
                 "[glovebox] message type %s is not allowed by this gateway "
                 "(--allowed-message-types)\n",
                 req->msg_type);
        if (parent)
                deliver_made(c, JP_IOPUB, "stream", parent,
                             json_pack("{s:s, s:s}", "name", "stderr", "text", text));
        free(parent);
        answer_error(c, msg, req, "MessageTypeNotAllowed",
                     "this message type is not allowed by the gateway (--allowed-message-types)");
}

static void handle_frame(struct channel_conn *c)
{
        struct kernel *k = c->session->kernel;
        struct jp_request req = {.content = NULL}; /* released on every path */
        struct jp_msg msg;
        char err[160] = "";
        int rc;

        if (c->format == RELAY_V1) {
                rc = c->rx_binary ? jp_wsv1_decode((const uint8_t *)c->rx.data, c->rx.len, &msg)
                                  : -EBADMSG;
                if (rc == 0 && (msg.channel == JP_IOPUB || msg.channel == JP_HB))
                        rc = -EBADMSG;
                if (rc < 0)
                        snprintf(err, sizeof(err), "not a v1 kernel message");
        } else {
                /* (A message without a channel goes to shell, as DESIGN.md
                 * and Jupyter Server read it; it is then checked like any.) */
                rc = jp_wsjson_decode((const uint8_t *)c->rx.data, c->rx.len, c->rx_binary, &msg,
                                      err, sizeof(err));
        }
        /* What a kernel would drop without a word is settled here: a
         * message it cannot read closes the connection, a request it cannot
         * serve gets an error reply. */
        if (rc == 0) {
                rc = jp_request_check(&msg, c->format == RELAY_V1, &req);
                if (rc == -EBADMSG)
                        snprintf(err, sizeof(err), "%s", req.reason);
        }
        if (rc == -EBADMSG || rc == -ENOMEM) {
                klog_warn_limited(&k->log_bad_frame, k->id,
                                  "closing a client that sent a bad frame: %s",
                                  err[0] ? err : "out of memory");
                close_later(c, LWS_CLOSE_STATUS_INVALID_PAYLOAD, err[0] ? err : "out of memory");
                goto out;
        }
        if (rc == -EPROTO) {
                klog_warn_limited(&k->log_refused, k->id, "refused a %s message from a client: %s",
                                  req.msg_type, req.reason);
                answer_error(c, &msg, &req, req.ename, req.reason);
                goto out;
        }
        if (*config_get()->allowed_message_types && !type_allowed(req.msg_type)) {
                klog_warn_limited(&k->log_refused, k->id, "refused a %s message from a client",
                                  req.msg_type);
                refuse_type(c, &msg, &req);
                goto out;
        }
        if (req.content)
                msg.content = (struct jp_bytes){(const uint8_t *)req.content, strlen(req.content)};
        rc = session_send(c->session, &msg);
        if (rc < 0)
                klog_warn_limited(&k->log_send_failed, k->id,
                                  "could not pass a %s message to the kernel: %s",
                                  jp_channel_name(msg.channel), strerror(-rc));
out:
        jp_request_release(&req);
        jp_msg_release(&msg);
}

static int on_receive(struct channel_conn *c, void *in, size_t len)
{
        if (c->closing || !c->session)
                return 0;
        if (c->rx.len == 0 && !c->rx_oversized)
                c->rx_binary = lws_frame_is_binary(c->wsi);
        if (!c->rx_oversized && buf_append(&c->rx, in, len) < 0) {
                /* Read the rest of it away, then close, so that the client
                 * sees the close code rather than a broken pipe. */
                buf_free(&c->rx);
                c->rx_oversized = true;
        }
        if (!lws_is_final_fragment(c->wsi) || lws_remaining_packet_payload(c->wsi))
                return 0;
        if (c->rx_oversized)
                close_later(c, LWS_CLOSE_STATUS_MESSAGE_TOO_LARGE, "message too large");
        else
                handle_frame(c);
        metrics_ws_frame(true, c->rx.len);
        buf_reset(&c->rx);
        return 0;
}

/* A message is written as one WebSocket message (every Jupyter client
 * expects one per kernel message), copied straight from where its parts lie,
 * and only while the socket takes it: a client that stops reading holds its
 * queue (bounded by the session's outbox) and at most one fragment that
 * libwebsockets keeps of what the socket did not take, never more, and costs
 * the loop nothing until its socket is writable again. A large frame goes in
 * two fragments of at most WRITE_PIECE_MAX (more for frames beyond twice
 * that), or in what the socket has room for if that is more: clients that
 * gather fragments by appending (Python's websocket-client, tornado) pay a
 * copy of everything before each one, so few and large is what they read
 * fastest. After WRITE_TURN bytes a connection yields to the rest of the
 * loop (other clients, the kernels' sockets); it is more than a turn brings
 * in, so that a client that reads keeps up. The copy is made in one buffer
 * shared by all connections and kept between writes (up to SCRATCH_KEEP,
 * one largest fragment): fresh pages for every large fragment cost more
 * than the copy itself. */
#define WRITE_PIECE_MIN (256 * 1024)
#define WRITE_PIECE_MAX (16 * 1024 * 1024)
#define WRITE_TURN      (16 * 1024 * 1024) /* twice what a kernel's socket gives per turn (zio.c) */
/* (A buf doubles as it grows: a largest fragment with its headroom gets
 * twice its size, of which only what is written is ever touched.) */
#define SCRATCH_KEEP    (2 * WRITE_PIECE_MAX)

/* Bytes the connection's socket can take now, within the bounds. */
static size_t piece_size(struct lws *wsi)
{
        int fd = lws_get_socket_fd(wsi), sndbuf = 0, queued = 0;
        socklen_t len = sizeof(sndbuf);
        size_t room;

        /* (Under TLS the socket carries records, not our bytes.) */
        if (fd < 0 || lws_is_ssl(wsi) || getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, &len) < 0 ||
            ioctl(fd, SIOCOUTQ, &queued) < 0)
                return WRITE_PIECE_MIN;
        /* Linux reports twice the payload it holds (the rest is its own
         * bookkeeping). */
        room = sndbuf / 2 > queued ? (size_t)(sndbuf / 2 - queued) : 0;
        if (room < WRITE_PIECE_MIN)
                return WRITE_PIECE_MIN;
        return room > WRITE_PIECE_MAX ? WRITE_PIECE_MAX : room;
}

/* A frame of RAW_FRAME_MIN or more goes out as one WebSocket frame whose
 * header the gateway writes itself, followed by the frame's bytes straight
 * from where they lie (the envelope, the ZMQ frame the content came in),
 * each time only as much as the socket takes. Nothing is copied on the way
 * (no write buffer, no libwebsockets copy of what the socket did not take),
 * nothing more is held for a client that stops reading, and clients get the
 * message in one piece, with nothing to append. While such a frame is
 * under way the connection's input is not read: libwebsockets answers a
 * ping with a pong of its own, which must not land inside the frame. */
#define RAW_FRAME_MIN (1024 * 1024)
#define RAW_PIECE_MIN (64 * 1024)

/* Under TLS the socket carries records, on HTTP/2 a stream's frames: only
 * libwebsockets may write there. */
static bool can_write_raw(struct lws *wsi)
{
        return !lws_is_ssl(wsi) && lws_get_network_wsi(wsi) == wsi;
}

/* Bytes the connection's socket takes now without blocking, as far as its
 * counters tell. */
static size_t socket_room(struct lws *wsi)
{
        int fd = lws_get_socket_fd(wsi), sndbuf = 0, queued = 0;
        socklen_t len = sizeof(sndbuf);

        if (fd < 0 || getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, &len) < 0 ||
            ioctl(fd, SIOCOUTQ, &queued) < 0)
                return WRITE_PIECE_MIN;
        /* (Linux reports twice the payload it holds.) */
        return sndbuf / 2 > queued ? (size_t)(sndbuf / 2 - queued) : 0;
}

/* RFC 6455 5.2: FIN, the opcode, the payload length in the shortest form;
 * a server's frames are not masked. */
static void raw_begin(struct channel_conn *c)
{
        uint64_t len = c->frame_len;
        uint8_t *h = c->raw_head;

        h[0] = 0x80 | (c->frame_binary ? 0x2 : 0x1);
        if (len < 126) {
                h[1] = (uint8_t)len;
                c->raw_head_len = 2;
        } else if (len < 65536) {
                h[1] = 126;
                h[2] = (uint8_t)(len >> 8);
                h[3] = (uint8_t)len;
                c->raw_head_len = 4;
        } else {
                h[1] = 127;
                for (int i = 0; i < 8; i++)
                        h[2 + i] = (uint8_t)(len >> (56 - 8 * i));
                c->raw_head_len = 10;
        }
        c->raw_head_sent = 0;
        c->raw = true;
        lws_rx_flow_control(c->wsi, 0);
}

/* Writes what the socket takes of the raw frame under way, up to budget
 * bytes of it; adds them to *written. 0, or -1 when the connection failed. */
static int raw_write(struct channel_conn *c, size_t budget, size_t *written)
{
        while (c->frame_sent < c->frame_len && budget > 0) {
                const uint8_t *at;
                size_t n, room;

                /* Whatever libwebsockets keeps of a write the socket did
                 * not take goes first; adding to it would copy. */
                if (lws_send_pipe_choked(c->wsi))
                        return 0;
                /* (The socket polls writable: it takes at least some, even
                 * when its accounting and ours disagree about how much.) */
                room = socket_room(c->wsi);
                if (room < RAW_PIECE_MIN)
                        room = RAW_PIECE_MIN;
                if (c->raw_head_sent < c->raw_head_len) {
                        at = c->raw_head + c->raw_head_sent;
                        n = c->raw_head_len - c->raw_head_sent;
                } else {
                        at = relay_msg_frame_span(c->sending, c->format, c->frame_sent, &n);
                        if (n > room)
                                n = room;
                        if (n > budget)
                                n = budget;
                }
                /* (LWS_WRITE_HTTP: the bytes as they are. libwebsockets
                 * does not write to them.) */
                if (lws_write(c->wsi, (unsigned char *)(uintptr_t)at, n, LWS_WRITE_HTTP) < (int)n)
                        return -1;
                if (c->raw_head_sent < c->raw_head_len) {
                        c->raw_head_sent += n;
                        continue;
                }
                c->frame_sent += n;
                *written += n;
                budget -= n;
        }
        if (c->frame_sent == c->frame_len) {
                c->raw = false;
                lws_rx_flow_control(c->wsi, 1);
        }
        return 0;
}

static int on_writeable(struct channel_conn *c)
{
        static struct buf scratch = {.max = LWS_PRE + WRITE_PIECE_MAX};
        size_t written = 0;
        uint8_t *piece;
        int rc = 0;

        if (c->closing && c->raw) {
                /* A close frame now would land inside the frame under way:
                 * the connection ends without one (the message goes, whole,
                 * to the session's next connection). */
                shutdown(lws_get_socket_fd(c->wsi), SHUT_RDWR);
                return -1;
        }
        if (c->closing) {
                lws_close_reason(c->wsi, (enum lws_close_status)c->close_code,
                                 (unsigned char *)c->close_reason, strlen(c->close_reason));
                return -1;
        }
        if (!c->session)
                return 0;
        while (written < WRITE_TURN) {
                size_t n;
                int flags;

                if (!c->sending) {
                        c->sending = session_next(c->session);
                        if (!c->sending)
                                break;
                        c->frame_sent = 0;
                        if (relay_msg_frame(c->sending, c->format, &c->frame_len,
                                            &c->frame_binary) < 0)
                                return -1;
                        if (c->frame_len >= RAW_FRAME_MIN && can_write_raw(c->wsi))
                                raw_begin(c);
                }
                if (c->raw) {
                        rc = raw_write(c, WRITE_TURN - written, &written);
                        if (rc < 0 || c->raw)
                                break;
                        metrics_ws_frame(false, c->frame_len);
                        session_delivered(c->session, c->sending);
                        relay_msg_unref(&c->sending);
                        /* Never a write while libwebsockets holds part of
                         * the last one: it would be appended to that, and
                         * lws_write would report what left from there. */
                        if (lws_send_pipe_choked(c->wsi))
                                break;
                        continue;
                }
                n = c->frame_len - c->frame_sent;
                if (n > WRITE_PIECE_MIN) {
                        /* Two fragments a frame, up to frames of twice
                         * WRITE_PIECE_MAX: each fragment costs the clients
                         * that append them a copy of all before it. */
                        size_t room = piece_size(c->wsi), half = (c->frame_len + 1) / 2;

                        if (room < half)
                                room = half < WRITE_PIECE_MAX ? half : WRITE_PIECE_MAX;
                        if (n > room)
                                n = room;
                }
                scratch.len = 0;
                rc = buf_reserve(&scratch, LWS_PRE + n);
                if (rc < 0)
                        break;
                piece = (uint8_t *)scratch.data + LWS_PRE;
                relay_msg_frame_copy(c->sending, c->format, c->frame_sent, n, piece);
                flags = c->frame_sent > 0 ? LWS_WRITE_CONTINUATION
                        : c->frame_binary ? LWS_WRITE_BINARY
                                          : LWS_WRITE_TEXT;
                if (c->frame_sent + n < c->frame_len)
                        flags |= LWS_WRITE_NO_FIN;
                if (lws_write(c->wsi, piece, n, (enum lws_write_protocol)flags) < (int)n) {
                        rc = -1;
                        break;
                }
                c->frame_sent += n;
                written += n;
                if (c->frame_sent == c->frame_len) {
                        metrics_ws_frame(false, c->frame_len);
                        session_delivered(c->session, c->sending);
                        relay_msg_unref(&c->sending);
                }
                if (lws_send_pipe_choked(c->wsi))
                        break;
        }
        if (scratch.cap > SCRATCH_KEEP)
                buf_free(&scratch);
        if (rc < 0)
                return -1;
        if (c->sending || c->session->outbox.count || c->session->outbox.dropped)
                lws_callback_on_writable(c->wsi);
        return 0;
}

int channels_callback(struct lws *wsi, enum lws_callback_reasons reason, struct channel_conn *c,
                      void *in, size_t len, enum relay_format format)
{
        switch (reason) {
        case LWS_CALLBACK_ESTABLISHED:
                metrics_ws_opened();
                return on_established(wsi, c, format);
        case LWS_CALLBACK_RECEIVE:
                return on_receive(c, in, len);
        case LWS_CALLBACK_SERVER_WRITEABLE:
                return on_writeable(c);
        case LWS_CALLBACK_CLOSED:
                metrics_ws_closed();
                tenants_unwatch(&c->key);
                requeue_sending(c);
                if (c->session)
                        session_detach(c->session, &c->sink);
                c->session = NULL;
                buf_free(&c->rx);
                return 0;
        default:
                return 0;
        }
}
