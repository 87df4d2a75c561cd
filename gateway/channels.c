#include "autoconf.h"

#include "gateway/channels.h"
#include "gateway/http.h"
#include "gateway/kernels.h"
#include "protocol/log.h"
#include "protocol/wsjson.h"
#include "protocol/wsv1.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

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

/* An Origin header, when present, must be the gateway's own origin or one
 * of --allow-origin: a web page elsewhere must not drive a kernel with the
 * user's credentials. Clients that are not browsers send none. */
static bool origin_allowed(struct lws *wsi)
{
        const char *allowed = kernels_config()->allow_origin;
        char origin[256], host[256];
        const char *o, *p;
        size_t olen;

        if (lws_hdr_copy(wsi, origin, sizeof(origin), WSI_TOKEN_ORIGIN) <= 0)
                return true;
        if (strcmp(allowed, "*") == 0)
                return true;
        o = strstr(origin, "://");
        if (o && lws_hdr_copy(wsi, host, sizeof(host), WSI_TOKEN_HOST) > 0 &&
            strcasecmp(o + 3, host) == 0)
                return true;
        olen = strlen(origin);
        for (p = allowed; *p;) {
                const char *comma = strchr(p, ',');
                size_t n = comma ? (size_t)(comma - p) : strlen(p);

                if (n == olen && strncasecmp(p, origin, n) == 0)
                        return true;
                p = comma ? comma + 1 : p + n;
        }
        return false;
}

int channels_confirm_upgrade(struct lws *wsi)
{
        char path[HTTP_PATH_MAX];

        if (http_route_path(wsi, path, sizeof(path)) < 0 || !kernel_of_path(path)) {
                http_write_error_now(wsi, 404, "No such kernel");
                return 1;
        }
        if (!http_authorized(wsi)) {
                http_write_error_now(wsi, 401, "Missing or wrong token");
                return 1;
        }
        if (!origin_allowed(wsi)) {
                http_write_error_now(wsi, 403, "Origin not allowed");
                return 1;
        }
        return 0;
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
        lws_callback_on_writable(c->wsi);
}

static void conn_closing(struct session_sink *sink, int code, const char *reason)
{
        struct channel_conn *c = lws_container_of(sink, struct channel_conn, sink);

        c->session = NULL;
        close_later(c, code, reason);
}

static int on_established(struct lws *wsi, struct channel_conn *c, enum relay_format format)
{
        char path[HTTP_PATH_MAX], arg[256];
        const char *session_id;
        struct kernel *k;

        memset(c, 0, sizeof(*c));
        c->wsi = wsi;
        c->format = format;
        c->sink.wake = conn_wake;
        c->sink.closing = conn_closing;
        buf_init(&c->rx, (size_t)kernels_config()->max_message_bytes);
        k = http_route_path(wsi, path, sizeof(path)) == 0 ? kernel_of_path(path) : NULL;
        if (!k)
                return -1;
        session_id = lws_get_urlarg_by_name(wsi, "session_id=", arg, sizeof(arg));
        if (session_id && strlen(session_id) > SESSION_ID_MAX)
                session_id = NULL;
        c->session = session_open(k, session_id);
        if (!c->session)
                return -1;
        klog_debug(k->id, "client connected (%s format, session %.8s)",
                   format == RELAY_V1 ? "v1" : "json", c->session->id);
        session_attach(c->session, &c->sink);
        return 0;
}

static void handle_frame(struct channel_conn *c)
{
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
                rc = jp_wsjson_decode((const uint8_t *)c->rx.data, c->rx.len, c->rx_binary, &msg,
                                      err, sizeof(err));
        }
        if (rc < 0) {
                klog_warn(c->session->kernel->id, "closing a client that sent a bad frame: %s",
                          err);
                close_later(c, LWS_CLOSE_STATUS_INVALID_PAYLOAD, err);
                return;
        }
        rc = session_send(c->session, &msg);
        if (rc < 0)
                klog_warn(c->session->kernel->id, "could not pass a %s message to the kernel: %s",
                          jp_channel_name(msg.channel), strerror(-rc));
        jp_msg_release(&msg);
}

static int on_receive(struct channel_conn *c, void *in, size_t len)
{
        if (c->closing || !c->session)
                return 0;
        if (c->rx.len == 0)
                c->rx_binary = lws_frame_is_binary(c->wsi);
        if (buf_append(&c->rx, in, len) < 0) {
                buf_reset(&c->rx);
                close_later(c, LWS_CLOSE_STATUS_MESSAGE_TOO_LARGE, "message too large");
                return 0;
        }
        if (!lws_is_final_fragment(c->wsi) || lws_remaining_packet_payload(c->wsi))
                return 0;
        handle_frame(c);
        buf_reset(&c->rx);
        return 0;
}

static int on_writeable(struct channel_conn *c)
{
        struct relay_msg *m;
        uint8_t *payload;
        size_t len;
        bool binary;
        int rc;

        if (c->closing) {
                lws_close_reason(c->wsi, (enum lws_close_status)c->close_code,
                                 (unsigned char *)c->close_reason, strlen(c->close_reason));
                return -1;
        }
        if (!c->session)
                return 0;
        m = session_next(c->session);
        if (!m)
                return 0;
        rc = relay_msg_frame(m, c->format, &payload, &len, &binary);
        if (rc == 0 && lws_write(c->wsi, payload, len,
                                 binary ? LWS_WRITE_BINARY : LWS_WRITE_TEXT) < (int)len)
                rc = -1;
        relay_msg_unref(&m);
        if (rc < 0)
                return -1;
        if (c->session->outbox.count || c->session->outbox.dropped)
                lws_callback_on_writable(c->wsi);
        return 0;
}

int channels_callback(struct lws *wsi, enum lws_callback_reasons reason, struct channel_conn *c,
                      void *in, size_t len, enum relay_format format)
{
        switch (reason) {
        case LWS_CALLBACK_ESTABLISHED:
                return on_established(wsi, c, format);
        case LWS_CALLBACK_RECEIVE:
                return on_receive(c, in, len);
        case LWS_CALLBACK_SERVER_WRITEABLE:
                return on_writeable(c);
        case LWS_CALLBACK_CLOSED:
                if (c->session)
                        session_detach(c->session, &c->sink);
                c->session = NULL;
                buf_free(&c->rx);
                return 0;
        default:
                return 0;
        }
}
