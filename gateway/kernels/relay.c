#include "autoconf.h"

#include "gateway/kernels/relay.h"
#include "protocol/ids.h"
#include "protocol/wsjson.h"
#include "protocol/wsv1.h"
#include "gateway/kernels/zio.h"

#include <errno.h>
#include <libwebsockets.h>
#include <stdlib.h>
#include <string.h>

/* Frames are built lazily and may be as large as the message. */
#define FRAME_MAX (((size_t)1 << 40))

static void set_view(struct jp_bytes *view, uint8_t **at, const struct jp_bytes *src)
{
        memcpy(*at, src->ptr, src->len);
        *view = (struct jp_bytes){*at, src->len};
        *at += src->len;
}

struct relay_msg *relay_msg_new(const struct jp_msg *msg, struct zio *from)
{
        size_t size =
            msg->header.len + msg->parent_header.len + msg->metadata.len + msg->content.len;
        char msg_id[JP_MSG_ID_SIZE], msg_type[JP_MSG_TYPE_SIZE];
        struct relay_msg *m;
        zmq_msg_t frame;
        size_t copied;
        bool kept;
        uint8_t *at;

        for (size_t i = 0; i < msg->nbuffers; i++)
                size += msg->buffers[i].len;
        if (jp_header_fields(msg->header, msg_id, msg_type) < 0)
                return NULL;
        /* A large content (a stream of output, an image) stays in the ZMQ
         * frame it came in: no copy, no fresh pages. */
        kept = from && msg->content.len >= RELAY_KEEP_MIN &&
               zio_take(from, msg->content.ptr, &frame) == 0;
        copied = size - (kept ? msg->content.len : 0);
        /* One allocation: the message and the copies of its parts. */
        m = malloc(sizeof(*m) + copied);
        if (!m) {
                if (kept)
                        zmq_msg_close(&frame);
                return NULL;
        }
        memset(m, 0, sizeof(*m)); /* (not the copies that follow it) */
        memcpy(m->msg_id, msg_id, sizeof(msg_id));
        memcpy(m->msg_type, msg_type, sizeof(msg_type));
        m->refs = 1;
        m->size = size;
        m->msg.channel = msg->channel;
        m->data = (uint8_t *)(m + 1);
        at = m->data;
        set_view(&m->msg.header, &at, &msg->header);
        set_view(&m->msg.parent_header, &at, &msg->parent_header);
        set_view(&m->msg.metadata, &at, &msg->metadata);
        m->kept = kept;
        if (kept) {
                zmq_msg_init(&m->content_frame);
                zmq_msg_move(&m->content_frame, &frame);
                m->msg.content = (struct jp_bytes){zmq_msg_data(&m->content_frame),
                                                   zmq_msg_size(&m->content_frame)};
        } else {
                set_view(&m->msg.content, &at, &msg->content);
        }
        for (size_t i = 0; i < msg->nbuffers; i++)
                set_view(&m->msg.buffers[i], &at, &msg->buffers[i]);
        m->msg.nbuffers = msg->nbuffers;
        for (int f = 0; f < RELAY_FORMATS; f++)
                buf_init(&m->envelope[f], FRAME_MAX);
        return m;
}

struct relay_msg *relay_msg_make(enum jp_channel channel, const char *msg_type,
                                 const char *parent_header, json_t *content)
{
        char msg_id[JP_UUID_SIZE], date[JP_TIMESTAMP_SIZE];
        struct relay_msg *m = NULL;
        char *header_text = NULL, *content_text = NULL;
        json_t *header;
        struct jp_msg msg;

        jp_uuid4(msg_id);
        jp_timestamp_now(date);
        header = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s}", "msg_id", msg_id, "msg_type", msg_type,
                           "session", "glovebox", "username", "glovebox", "date", date, "version",
                           "5.3");
        if (header)
                header_text = json_dumps(header, JSON_COMPACT);
        content_text = json_dumps(content, JSON_COMPACT);
        if (header_text && content_text) {
                if (!parent_header)
                        parent_header = "{}";
                jp_msg_init(&msg);
                msg.channel = channel;
                msg.header = (struct jp_bytes){(const uint8_t *)header_text, strlen(header_text)};
                msg.parent_header =
                    (struct jp_bytes){(const uint8_t *)parent_header, strlen(parent_header)};
                msg.metadata = (struct jp_bytes){(const uint8_t *)"{}", 2};
                msg.content =
                    (struct jp_bytes){(const uint8_t *)content_text, strlen(content_text)};
                m = relay_msg_new(&msg, NULL);
                if (m)
                        m->from_gateway = true;
        }
        json_decref(header);
        free(header_text);
        free(content_text);
        return m;
}

struct relay_msg *relay_msg_notice(const char *parent_header, const char *text)
{
        json_t *content = json_pack("{s:s, s:s}", "name", "stderr", "text", text);
        struct relay_msg *m =
            content ? relay_msg_make(JP_IOPUB, "stream",
                                     parent_header && *parent_header ? parent_header : NULL,
                                     content)
                    : NULL;

        json_decref(content);
        return m;
}

struct relay_msg *relay_msg_ref(struct relay_msg *m)
{
        m->refs++;
        return m;
}

void relay_msg_unref(struct relay_msg **mp)
{
        struct relay_msg *m = *mp;

        *mp = NULL;
        if (!m || --m->refs > 0)
                return;
        for (int f = 0; f < RELAY_FORMATS; f++)
                buf_free(&m->envelope[f]);
        if (m->kept)
                zmq_msg_close(&m->content_frame);
        free(m);
}

int relay_msg_frame(struct relay_msg *m, enum relay_format format, size_t *len, bool *binary)
{
        struct buf *b = &m->envelope[format];
        int rc = 0;

        if (!m->built[format]) {
                /* Everything but the content: small, built once per format
                 * (in one allocation) and shared by every client of that
                 * format. */
                rc = buf_reserve(b, m->size - m->msg.content.len + 512 + 8 * (m->msg.nbuffers + 8));
                if (rc < 0)
                        return rc;
                if (format == RELAY_V1) {
                        rc = jp_wsv1_encode_envelope(&m->msg, b, &m->content_at[format]);
                        m->binary[format] = true;
                } else {
                        rc = jp_wsjson_encode_envelope(&m->msg, m->msg_id, m->msg_type, b,
                                                       &m->binary[format], &m->content_at[format]);
                }
                if (rc < 0) {
                        buf_free(b);
                        return rc;
                }
                m->built[format] = true;
        }
        *len = b->len + m->msg.content.len;
        *binary = m->binary[format];
        return 0;
}

void relay_msg_frame_copy(const struct relay_msg *m, enum relay_format format, size_t from,
                          size_t len, uint8_t *out)
{
        const struct buf *b = &m->envelope[format];
        size_t at = m->content_at[format];
        const struct jp_bytes pieces[3] = {
            {(const uint8_t *)b->data, at},
            m->msg.content,
            {(const uint8_t *)b->data + at, b->len - at},
        };

        for (size_t i = 0; i < 3 && len > 0; i++) {
                size_t n;

                if (from >= pieces[i].len) {
                        from -= pieces[i].len;
                        continue;
                }
                n = pieces[i].len - from < len ? pieces[i].len - from : len;
                memcpy(out, pieces[i].ptr + from, n);
                out += n;
                len -= n;
                from = 0;
        }
}

const uint8_t *relay_msg_frame_span(const struct relay_msg *m, enum relay_format format,
                                    size_t from, size_t *len)
{
        const struct buf *b = &m->envelope[format];
        size_t at = m->content_at[format];

        if (from < at) {
                *len = at - from;
                return (const uint8_t *)b->data + from;
        }
        from -= at;
        if (from < m->msg.content.len) {
                *len = m->msg.content.len - from;
                return m->msg.content.ptr + from;
        }
        from -= m->msg.content.len;
        *len = b->len - at - from;
        return (const uint8_t *)b->data + at + from;
}

void outbox_init(struct outbox *o, size_t max_bytes, size_t max_count)
{
        memset(o, 0, sizeof(*o));
        o->max_bytes = max_bytes;
        o->max_count = max_count;
}

static struct relay_msg *ring_take(struct outbox *o)
{
        struct relay_msg *m = o->ring[o->head];

        o->ring[o->head] = NULL;
        o->head = (o->head + 1) % o->cap;
        o->count--;
        o->bytes -= m->size;
        return m;
}

static int ring_make_room(struct outbox *o)
{
        if (o->count == o->cap) {
                size_t cap = o->cap ? o->cap * 2 : 16;
                struct relay_msg **ring = calloc(cap, sizeof(*ring));

                if (!ring)
                        return -ENOMEM;
                for (size_t i = 0; i < o->count; i++)
                        ring[i] = o->ring[(o->head + i) % o->cap];
                free(o->ring);
                o->ring = ring;
                o->head = 0;
                o->cap = cap;
        }
        return 0;
}

int outbox_unpop(struct outbox *o, struct relay_msg *m)
{
        if (ring_make_room(o) < 0) {
                relay_msg_unref(&m);
                return -ENOMEM;
        }
        o->head = (o->head + o->cap - 1) % o->cap;
        o->ring[o->head] = m;
        o->count++;
        o->bytes += m->size;
        return 0;
}

int outbox_push(struct outbox *o, struct relay_msg *m)
{
        if (ring_make_room(o) < 0)
                return -ENOMEM;
        o->ring[(o->head + o->count) % o->cap] = relay_msg_ref(m);
        o->count++;
        o->bytes += m->size;
        while (o->count > 1 && (o->bytes > o->max_bytes || o->count > o->max_count)) {
                struct relay_msg *old = ring_take(o);

                if (o->dropped == 0 && !o->dropped_parent)
                        o->dropped_parent = strndup((const char *)old->msg.parent_header.ptr,
                                                    old->msg.parent_header.len);
                o->dropped++;
                relay_msg_unref(&old);
        }
        return 0;
}

struct relay_msg *outbox_pop(struct outbox *o)
{
        return o->count ? ring_take(o) : NULL;
}

uint64_t outbox_take_dropped(struct outbox *o, char **parent_header)
{
        uint64_t n = o->dropped;

        *parent_header = o->dropped_parent;
        o->dropped_parent = NULL;
        o->dropped = 0;
        return n;
}

void outbox_clear(struct outbox *o)
{
        struct relay_msg *m;

        while ((m = outbox_pop(o)) != NULL)
                relay_msg_unref(&m);
        free(o->ring);
        free(o->dropped_parent);
        memset(o, 0, sizeof(*o));
}
