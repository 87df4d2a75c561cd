#include "autoconf.h"

#include "protocol/wsv1.h"

#include <errno.h>
#include <string.h>

static uint64_t le64(const uint8_t *p)
{
        uint64_t v = 0;

        for (int i = 7; i >= 0; i--)
                v = (v << 8) | p[i];
        return v;
}

static void put_le64(uint8_t *p, uint64_t v)
{
        for (int i = 0; i < 8; i++) {
                p[i] = (uint8_t)v;
                v >>= 8;
        }
}

int jp_wsv1_decode(const uint8_t *data, size_t len, struct jp_msg *msg)
{
        struct jp_bytes *json_parts[4] = {&msg->header, &msg->parent_header, &msg->metadata,
                                          &msg->content};
        uint64_t count, prev, off;
        size_t nparts;

        jp_msg_init(msg);
        if (len < 8)
                return -EBADMSG;
        count = le64(data);
        if (count < 6 || count - 6 > JP_MAX_BUFFERS || 8 * (count + 1) > len)
                return -EBADMSG;
        nparts = (size_t)count - 1;

        prev = le64(data + 8);
        if (prev < 8 * (count + 1) || prev > len)
                return -EBADMSG;
        for (size_t i = 0; i < nparts; i++) {
                struct jp_bytes part;

                off = le64(data + 8 * (i + 2));
                if (off < prev || off > len)
                        return -EBADMSG;
                part = (struct jp_bytes){data + prev, (size_t)(off - prev)};
                if (i == 0) {
                        if (jp_channel_parse((const char *)part.ptr, part.len, &msg->channel) < 0)
                                return -EBADMSG;
                } else if (i <= 4) {
                        *json_parts[i - 1] = part;
                } else {
                        msg->buffers[msg->nbuffers++] = part;
                }
                prev = off;
        }
        return 0;
}

static int encode(const struct jp_msg *msg, struct buf *out, size_t *content_at)
{
        const struct jp_bytes *json_parts[4] = {&msg->header, &msg->parent_header, &msg->metadata,
                                                &msg->content};
        const char *channel = jp_channel_name(msg->channel);
        size_t count = 6 + msg->nbuffers;
        size_t start = out->len;
        uint64_t at = 8 * (count + 1);
        char *table;
        int rc;

        rc = buf_grow(out, 8 * (count + 1), &table);
        if (rc < 0)
                return rc;
        put_le64((uint8_t *)out->data + start, count);
        put_le64((uint8_t *)out->data + start + 8, at);
        at += strlen(channel);
        put_le64((uint8_t *)out->data + start + 16, at);
        rc = buf_append_str(out, channel);
        for (size_t i = 0; rc == 0 && i < 4 + msg->nbuffers; i++) {
                const struct jp_bytes *part = i < 4 ? json_parts[i] : &msg->buffers[i - 4];

                at += part->len;
                put_le64((uint8_t *)out->data + start + 8 * (i + 3), at);
                if (i == 3 && content_at)
                        *content_at = out->len - start;
                else
                        rc = buf_append(out, part->ptr, part->len);
        }
        return rc;
}

int jp_wsv1_encode(const struct jp_msg *msg, struct buf *out)
{
        return encode(msg, out, NULL);
}

int jp_wsv1_encode_envelope(const struct jp_msg *msg, struct buf *out, size_t *content_at)
{
        return encode(msg, out, content_at);
}
