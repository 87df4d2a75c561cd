#include "autoconf.h"

#include "protocol/wsjson.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

size_t jp_utf8_sequence(const uint8_t *p, size_t left)
{
        uint8_t c = p[0];
        size_t n;
        uint32_t cp;

        if (c < 0x80)
                return 1;
        if (c >= 0xc2 && c <= 0xdf) {
                n = 2;
                cp = c & 0x1f;
        } else if (c >= 0xe0 && c <= 0xef) {
                n = 3;
                cp = c & 0x0f;
        } else if (c >= 0xf0 && c <= 0xf4) {
                n = 4;
                cp = c & 0x07;
        } else {
                return 0;
        }
        if (left < n)
                return 0;
        for (size_t i = 1; i < n; i++) {
                if ((p[i] & 0xc0) != 0x80)
                        return 0;
                cp = (cp << 6) | (p[i] & 0x3f);
        }
        /* Reject overlong forms, surrogates and code points past U+10FFFF. */
        if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) || cp > 0x10ffff ||
            (cp >= 0xd800 && cp <= 0xdfff))
                return 0;
        return n;
}

bool jp_utf8_valid(const uint8_t *data, size_t len)
{
        size_t i = 0;

        while (i < len) {
                size_t n = jp_utf8_sequence(data + i, len - i);

                if (n == 0)
                        return false;
                i += n;
        }
        return true;
}

/* Copies data into out with every ill-formed byte replaced by U+FFFD. */
static int utf8_repair(const uint8_t *data, size_t len, struct buf *out)
{
        size_t i = 0;
        int rc = 0;

        while (rc == 0 && i < len) {
                size_t n = jp_utf8_sequence(data + i, len - i);

                if (n == 0) {
                        rc = buf_append(out, "\xef\xbf\xbd", 3);
                        i++;
                } else {
                        rc = buf_append(out, data + i, n);
                        i += n;
                }
        }
        return rc;
}

static uint32_t be32(const uint8_t *p)
{
        return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void put_be32(uint8_t *p, uint32_t v)
{
        p[0] = (uint8_t)(v >> 24);
        p[1] = (uint8_t)(v >> 16);
        p[2] = (uint8_t)(v >> 8);
        p[3] = (uint8_t)v;
}

/* Splits a binary frame into its JSON part and buffer views. */
static int split_binary(const uint8_t *data, size_t len, struct jp_bytes *json, struct jp_msg *msg,
                        char *err, size_t errlen)
{
        uint32_t nbufs, start, end;

        if (len < 8) {
                snprintf(err, errlen, "binary frame shorter than its header");
                return -EBADMSG;
        }
        nbufs = be32(data);
        if (nbufs < 1 || nbufs - 1 > JP_MAX_BUFFERS) {
                snprintf(err, errlen, "binary frame declares %u parts", nbufs);
                return -EBADMSG;
        }
        if ((size_t)4 * (nbufs + 1) > len) {
                snprintf(err, errlen, "binary frame offsets run past its end");
                return -EBADMSG;
        }
        for (uint32_t i = 0; i < nbufs; i++) {
                start = be32(data + 4 * (i + 1));
                end = i + 1 < nbufs ? be32(data + 4 * (i + 2)) : (uint32_t)len;
                if (start < 4 * (nbufs + 1) || start > end || end > len) {
                        snprintf(err, errlen, "binary frame offset %u is out of range", i);
                        return -EBADMSG;
                }
                if (i == 0) {
                        *json = (struct jp_bytes){data + start, end - start};
                } else {
                        msg->buffers[i - 1] = (struct jp_bytes){data + start, end - start};
                }
        }
        msg->nbuffers = nbufs - 1;
        return 0;
}

/* Appends the compact encoding of value (or "{}" when absent) to out and
 * records where it starts. */
static int dump_part(json_t *value, struct buf *out, size_t *offset, size_t *length)
{
        size_t need;
        char *dst;
        int rc;

        *offset = out->len;
        if (!value) {
                *length = 2;
                return buf_append(out, "{}", 2);
        }
        need = json_dumpb(value, NULL, 0, JSON_COMPACT);
        if (need == 0)
                return -EBADMSG;
        rc = buf_grow(out, need, &dst);
        if (rc < 0)
                return rc;
        if (json_dumpb(value, dst, need, JSON_COMPACT) != need)
                return -EBADMSG;
        *length = need;
        return 0;
}

int jp_wsjson_decode(const uint8_t *data, size_t len, bool binary, struct jp_msg *msg, char *err,
                     size_t errlen)
{
        static const char *const part_names[4] = {"header", "parent_header", "metadata",
                                                  "content"};
        struct jp_bytes text = {data, len};
        struct jp_bytes *parts[4] = {&msg->header, &msg->parent_header, &msg->metadata,
                                     &msg->content};
        size_t offsets[4], lengths[4];
        struct buf repaired, dumped;
        json_error_t jerr;
        json_t *root = NULL;
        json_t *channel;
        int rc;

        jp_msg_init(msg);
        buf_init(&repaired, len * 3 + 16);
        buf_init(&dumped, 0);
        err[0] = '\0';
        if (binary) {
                rc = split_binary(data, len, &text, msg, err, errlen);
                if (rc < 0)
                        goto out;
        }
        if (!jp_utf8_valid(text.ptr, text.len)) {
                rc = utf8_repair(text.ptr, text.len, &repaired);
                if (rc < 0)
                        goto out;
                text = (struct jp_bytes){(const uint8_t *)repaired.data, repaired.len};
        }
        /* The bound follows the text actually parsed: a repaired byte has
         * tripled, and jansson writes every real with 17 significant digits
         * ("0.1" comes back as "0.10000000000000001", 19/3 as long), so a
         * valid message may grow that much when re-encoded, and no more. */
        buf_init(&dumped, text.len * 7 + 4096);
        root = json_loadb((const char *)text.ptr, text.len, 0, &jerr);
        if (!json_is_object(root)) {
                snprintf(err, errlen, "message is not a JSON object: %s",
                         root ? "wrong type" : jerr.text);
                rc = -EBADMSG;
                goto out;
        }
        channel = json_object_get(root, "channel");
        msg->channel = JP_SHELL;
        if (channel && !json_is_null(channel) &&
            (!json_is_string(channel) || jp_channel_parse(json_string_value(channel),
                                                          json_string_length(channel),
                                                          &msg->channel) < 0 ||
             msg->channel == JP_IOPUB || msg->channel == JP_HB)) {
                snprintf(err, errlen, "unknown or read-only channel");
                rc = -EBADMSG;
                goto out;
        }
        for (int i = 0; i < 4; i++) {
                json_t *v = json_object_get(root, part_names[i]);

                if (v && json_is_null(v) && i != 0)
                        v = NULL;
                if ((v || i == 0) && !json_is_object(v)) {
                        snprintf(err, errlen, "\"%s\" must be an object", part_names[i]);
                        rc = -EBADMSG;
                        goto out;
                }
                rc = dump_part(v, &dumped, &offsets[i], &lengths[i]);
                if (rc < 0) {
                        snprintf(err, errlen, "message too large");
                        goto out;
                }
        }
        for (int i = 0; i < 4; i++)
                *parts[i] = (struct jp_bytes){(const uint8_t *)dumped.data + offsets[i], lengths[i]};
        msg->owned = buf_steal(&dumped, NULL);
        rc = 0;
out:
        if (rc < 0 && !err[0])
                snprintf(err, errlen, "malformed message");
        json_decref(root);
        buf_free(&repaired);
        buf_free(&dumped);
        if (rc < 0)
                jp_msg_init(msg);
        return rc;
}

static int append_part(struct buf *out, const char *key, struct jp_bytes part)
{
        int rc = buf_append_str(out, key);

        if (rc < 0)
                return rc;
        /* An empty frame is not JSON; {} keeps the frame parseable. */
        if (part.len == 0)
                return buf_append(out, "{}", 2);
        return buf_append(out, part.ptr, part.len);
}

/* The frame, with the content's bytes left out when content_at is given
 * (their place is then *content_at bytes after the frame's start). */
static int encode(const struct jp_msg *msg, const char *msg_id, const char *msg_type,
                  struct buf *out, bool *binary, size_t *content_at)
{
        size_t start = out->len;
        size_t json_start;
        /* Bytes of the frame that are not in out: offsets past them move. */
        size_t skipped = content_at && msg->content.len ? msg->content.len : 0;
        uint32_t nbufs = (uint32_t)msg->nbuffers + 1;
        char *table = NULL;
        int rc = 0;

        *binary = msg->nbuffers > 0;
        if (*binary)
                rc = buf_grow(out, 4 * ((size_t)nbufs + 1), &table);
        json_start = out->len;
        if (rc == 0)
                rc = append_part(out, "{\"header\":", msg->header);
        if (rc == 0)
                rc = buf_append_str(out, ",\"msg_id\":");
        if (rc == 0)
                rc = buf_append_json_string(out, msg_id, strlen(msg_id));
        if (rc == 0)
                rc = buf_append_str(out, ",\"msg_type\":");
        if (rc == 0)
                rc = buf_append_json_string(out, msg_type, strlen(msg_type));
        if (rc == 0)
                rc = append_part(out, ",\"parent_header\":", msg->parent_header);
        if (rc == 0)
                rc = append_part(out, ",\"metadata\":", msg->metadata);
        if (rc == 0 && skipped) {
                rc = buf_append_str(out, ",\"content\":");
                *content_at = out->len - start;
        } else if (rc == 0) {
                rc = append_part(out, ",\"content\":", msg->content);
                if (content_at)
                        *content_at = out->len - start;
        }
        if (rc == 0)
                rc = buf_printf(out, ",\"buffers\":[],\"channel\":\"%s\"}",
                                jp_channel_name(msg->channel));
        if (rc < 0 || !*binary)
                return rc;

        /* Fill the offset table now that the JSON's length is known; the
         * table pointer may have moved when the buffer grew. */
        table = out->data + start;
        put_be32((uint8_t *)table, nbufs);
        put_be32((uint8_t *)table + 4, (uint32_t)(json_start - start));
        for (size_t i = 0; i < msg->nbuffers; i++) {
                put_be32((uint8_t *)out->data + start + 4 * (i + 2),
                         (uint32_t)(out->len - start + skipped));
                rc = buf_append(out, msg->buffers[i].ptr, msg->buffers[i].len);
                if (rc < 0)
                        return rc;
        }
        return 0;
}

int jp_wsjson_encode(const struct jp_msg *msg, const char *msg_id, const char *msg_type,
                     struct buf *out, bool *binary)
{
        return encode(msg, msg_id, msg_type, out, binary, NULL);
}

int jp_wsjson_encode_envelope(const struct jp_msg *msg, const char *msg_id, const char *msg_type,
                              struct buf *out, bool *binary, size_t *content_at)
{
        return encode(msg, msg_id, msg_type, out, binary, content_at);
}
