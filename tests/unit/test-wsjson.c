/* protocol/wsjson.c: Jupyter's default WebSocket format, text and binary. */
#include "autoconf.h"

#include "protocol/wsjson.h"
#include "tests/unit/tap.h"

#include <errno.h>
#include <jansson.h>

static char err[256];

static struct jp_bytes str(const char *s)
{
        return (struct jp_bytes){(const uint8_t *)s, strlen(s)};
}

static int part_is(struct jp_bytes part, const char *expect)
{
        return part.len == strlen(expect) && memcmp(part.ptr, expect, part.len) == 0;
}

#define is_part(part, expect, ...)                                                                 \
        is_mem((part).ptr, (part).len, expect, strlen(expect), __VA_ARGS__)

static int decode_text(const char *text, struct jp_msg *msg)
{
        return jp_wsjson_decode((const uint8_t *)text, strlen(text), false, msg, err, sizeof(err));
}

static void put_be32(uint8_t *p, uint32_t v)
{
        p[0] = (uint8_t)(v >> 24);
        p[1] = (uint8_t)(v >> 16);
        p[2] = (uint8_t)(v >> 8);
        p[3] = (uint8_t)v;
}

static uint32_t get_be32(const uint8_t *p)
{
        return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Lays out a well-formed binary frame the way Jupyter's JavaScript client
 * does; returns its length. */
static size_t make_binary(uint8_t *out, const char *json, const struct jp_bytes *bufs, size_t nbufs)
{
        uint32_t n = (uint32_t)nbufs + 1;
        size_t at = 4 * ((size_t)n + 1);

        put_be32(out, n);
        put_be32(out + 4, (uint32_t)at);
        memcpy(out + at, json, strlen(json));
        at += strlen(json);
        for (size_t i = 0; i < nbufs; i++) {
                put_be32(out + 4 * (i + 2), (uint32_t)at);
                if (bufs[i].len)
                        memcpy(out + at, bufs[i].ptr, bufs[i].len);
                at += bufs[i].len;
        }
        return at;
}

static const char full_text[] =
    "{\"channel\":\"shell\",\"header\":{\"msg_id\":\"m1\",\"msg_type\":\"execute_request\","
    "\"session\":\"s\",\"username\":\"u\",\"date\":\"2024-01-01T00:00:00.000000Z\","
    "\"version\":\"5.3\"},\"parent_header\":{},\"metadata\":{\"cellId\":\"c1\"},"
    "\"content\":{\"code\":\"print(1)\",\"silent\":false},\"buffers\":[]}";

static void test_text_decode(void)
{
        struct jp_msg msg;

        is_int(decode_text(full_text, &msg), 0, "a full text frame decodes");
        is_int(msg.channel, JP_SHELL, "channel shell");
        is_part(msg.header,
                "{\"msg_id\":\"m1\",\"msg_type\":\"execute_request\",\"session\":\"s\","
                "\"username\":\"u\",\"date\":\"2024-01-01T00:00:00.000000Z\",\"version\":\"5.3\"}",
                "header, compact and in its original key order");
        is_part(msg.parent_header, "{}", "parent_header");
        is_part(msg.metadata, "{\"cellId\":\"c1\"}", "metadata");
        is_part(msg.content, "{\"code\":\"print(1)\",\"silent\":false}", "content");
        is_uint(msg.nbuffers, 0, "no buffers");
        ok(msg.owned != NULL, "re-encoded parts are owned by the message");
        jp_msg_release(&msg);

        is_int(decode_text("{ \"channel\" : \"control\" ,\n \"header\" : { \"msg_id\" : \"x\" , "
                           "\"n\" : [ 1 , 2 ] } }",
                           &msg),
               0, "whitespace is accepted");
        is_int(msg.channel, JP_CONTROL, "channel control");
        is_part(msg.header, "{\"msg_id\":\"x\",\"n\":[1,2]}", "parts are re-encoded compactly");
        jp_msg_release(&msg);

        is_int(decode_text("{\"channel\":\"stdin\",\"header\":{}}", &msg), 0, "stdin");
        is_int(msg.channel, JP_STDIN, "channel stdin");
        jp_msg_release(&msg);
}

static void test_lenient(void)
{
        struct jp_msg msg;

        is_int(decode_text("{\"header\":{\"msg_id\":\"a\"},\"content\":{}}", &msg), 0,
               "missing channel");
        is_int(msg.channel, JP_SHELL, "missing channel means shell");
        jp_msg_release(&msg);
        is_int(decode_text("{\"channel\":null,\"header\":{}}", &msg), 0, "null channel");
        is_int(msg.channel, JP_SHELL, "null channel means shell");
        jp_msg_release(&msg);

        is_int(decode_text("{\"header\":{}}", &msg), 0, "buffers absent");
        is_uint(msg.nbuffers, 0, "buffers absent: none");
        jp_msg_release(&msg);
        is_int(decode_text("{\"header\":{},\"buffers\":[]}", &msg), 0, "buffers []");
        jp_msg_release(&msg);
        is_int(decode_text("{\"header\":{},\"buffers\":{}}", &msg), 0, "buffers {}");
        is_uint(msg.nbuffers, 0, "buffers {}: none");
        jp_msg_release(&msg);

        is_int(decode_text("{\"header\":{},\"metadata\":null,\"parent_header\":null,"
                           "\"content\":null}",
                           &msg),
               0, "null metadata, parent_header and content");
        ok(part_is(msg.metadata, "{}") && part_is(msg.parent_header, "{}") &&
               part_is(msg.content, "{}"),
           "null parts become {}");
        jp_msg_release(&msg);
        is_int(decode_text("{\"header\":{\"msg_id\":\"a\"}}", &msg), 0, "only a header");
        ok(part_is(msg.metadata, "{}") && part_is(msg.parent_header, "{}") &&
               part_is(msg.content, "{}"),
           "missing parts become {}");
        jp_msg_release(&msg);

        is_int(decode_text("{\"header\":{\"msg_id\":\"a\",\"date\":1700000000.5},"
                           "\"parent_header\":{\"date\":1699999999.25}}",
                           &msg),
               0, "float dates");
        is_part(msg.header, "{\"msg_id\":\"a\",\"date\":1700000000.5}", "a float date is kept");
        is_part(msg.parent_header, "{\"date\":1699999999.25}", "a float parent date is kept");
        jp_msg_release(&msg);

        is_int(decode_text("{\"header\":{},\"extra\":[1,2,3],\"msg_id\":\"ignored\"}", &msg), 0,
               "unknown top-level members are ignored");
        jp_msg_release(&msg);
}

static void test_utf8_repair(void)
{
        struct jp_msg msg;
        struct buf big;
        json_t *j;
        size_t count = 0;
        const char *s;

        is_int(decode_text("{\"header\":{\"msg_id\":\"a\xff"
                           "b\"},\"content\":{\"t\":\"\xc3\"}}",
                           &msg),
               0, "a text frame with stray bytes");
        is_part(msg.header,
                "{\"msg_id\":\"a\xef\xbf\xbd"
                "b\"}",
                "0xff becomes U+FFFD");
        is_part(msg.content, "{\"t\":\"\xef\xbf\xbd\"}", "a truncated sequence becomes U+FFFD");
        jp_msg_release(&msg);

        is_int(decode_text("{\"header\":{\"o\":\"\xc0\xaf\",\"s\":\"\xed\xa0\x80\","
                           "\"ok\":\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"}}",
                           &msg),
               0, "overlong forms and surrogates");
        is_part(
            msg.header,
            "{\"o\":\"\xef\xbf\xbd\xef\xbf\xbd\",\"s\":\"\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\","
            "\"ok\":\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"}",
            "each ill-formed byte is replaced, well-formed characters are kept");
        jp_msg_release(&msg);

        /* A large payload of stray bytes (Jupyter Server's gateway proxy
         * sends Latin-1 output this way) must be repaired, not refused:
         * every byte triples in size. */
        buf_init(&big, 1 << 20);
        buf_append_str(&big, "{\"header\":{\"msg_id\":\"a\"},\"content\":{\"text\":\"");
        for (int i = 0; i < 20000; i++)
                buf_append(&big, "\xe9", 1);
        buf_append_str(&big, "\"}}");
        is_int(jp_wsjson_decode((const uint8_t *)big.data, big.len, false, &msg, err, sizeof(err)),
               0, "20000 Latin-1 bytes in a text frame are repaired (%s)", err);
        j = json_loadb((const char *)msg.content.ptr, msg.content.len, 0, NULL);
        s = json_string_value(json_object_get(j, "text"));
        for (size_t i = 0; s && s[i]; i += 3)
                count += memcmp(s + i, "\xef\xbf\xbd", 3) == 0;
        is_uint(count, 20000, "every one of them became U+FFFD");
        json_decref(j);
        jp_msg_release(&msg);
        buf_free(&big);
}

static void test_floats(void)
{
        struct jp_msg msg;
        struct buf big;
        json_t *j;

        /* Widgets send arrays of floats; jansson writes 0.1 as
         * 0.10000000000000001, five times as long. Such a message is valid
         * and must not be refused as too large. */
        buf_init(&big, 1 << 20);
        buf_append_str(&big, "{\"header\":{\"msg_id\":\"a\",\"msg_type\":\"comm_msg\"},"
                             "\"content\":{\"data\":[");
        for (int i = 0; i < 10000; i++)
                buf_append_str(&big, i ? ",0.1" : "0.1");
        buf_append_str(&big, "]}}");
        is_int(jp_wsjson_decode((const uint8_t *)big.data, big.len, false, &msg, err, sizeof(err)),
               0, "10000 floats in a comm message (%s)", err);
        j = json_loadb((const char *)msg.content.ptr, msg.content.len, 0, NULL);
        ok(json_array_size(json_object_get(j, "data")) == 10000 &&
               json_real_value(json_array_get(json_object_get(j, "data"), 9999)) == 0.1,
           "every float survives");
        json_decref(j);
        jp_msg_release(&msg);
        buf_free(&big);
}

static void expect_bad_text(const char *text, const char *name)
{
        struct jp_msg msg;

        memset(err, 0, sizeof(err));
        is_int(decode_text(text, &msg), -EBADMSG, "%s", name);
        ok(err[0] != '\0' && msg.owned == NULL && msg.header.ptr == NULL,
           "%s: a reason is given and the message is left empty (%s)", name, err);
}

static void test_malformed_text(void)
{
        struct jp_msg msg;
        char small[8];

        expect_bad_text("", "empty frame");
        expect_bad_text("{\"header\":{}", "truncated JSON");
        expect_bad_text("{'header':{}}", "single quotes");
        expect_bad_text("[{\"header\":{}}]", "an array");
        expect_bad_text("null", "null");
        expect_bad_text("{\"header\":{}} trailing", "trailing garbage");
        expect_bad_text("{\"channel\":\"shell\"}", "header missing");
        expect_bad_text("{\"header\":null}", "header null");
        expect_bad_text("{\"header\":\"{}\"}", "header a string");
        expect_bad_text("{\"header\":[]}", "header an array");
        expect_bad_text("{\"header\":{},\"parent_header\":\"x\"}", "parent_header a string");
        expect_bad_text("{\"header\":{},\"metadata\":[]}", "metadata an array");
        expect_bad_text("{\"header\":{},\"content\":5}", "content a number");
        expect_bad_text("{\"header\":{},\"channel\":1}", "channel a number");
        expect_bad_text("{\"header\":{},\"channel\":[\"shell\"]}", "channel an array");
        expect_bad_text("{\"header\":{},\"channel\":\"bogus\"}", "unknown channel");
        expect_bad_text("{\"header\":{},\"channel\":\"Shell\"}", "channel in the wrong case");
        expect_bad_text("{\"header\":{},\"channel\":\"iopub\"}", "iopub from a client");
        expect_bad_text("{\"header\":{},\"channel\":\"hb\"}", "hb from a client");
        expect_bad_text("{\"header\":{\"a\":\"\\u0000\"}}", "an escaped NUL");

        is_int(jp_wsjson_decode((const uint8_t *)"x", 1, false, &msg, small, sizeof(small)),
               -EBADMSG, "a small error buffer");
        ok(memchr(small, '\0', sizeof(small)) != NULL, "the reason is cut to fit: \"%s\"", small);
}

static void test_binary_decode(void)
{
        static const uint8_t b1[] = {0x00, 0x01, 0xff, 0xfe};
        struct jp_bytes bufs[3] = {{b1, sizeof(b1)}, {NULL, 0}, {(const uint8_t *)"xyz", 3}};
        const char *json = "{\"channel\":\"shell\",\"header\":{\"msg_id\":\"b\"},\"content\":{},"
                           "\"buffers\":[{},{},{}]}";
        uint8_t frame[512];
        struct jp_msg msg;
        size_t len;

        len = make_binary(frame, json, bufs, 3);
        is_int(jp_wsjson_decode(frame, len, true, &msg, err, sizeof(err)), 0,
               "a binary frame with three buffers");
        is_uint(msg.nbuffers, 3, "three buffers");
        is_mem(msg.buffers[0].ptr, msg.buffers[0].len, b1, sizeof(b1), "buffer 0");
        is_uint(msg.buffers[1].len, 0, "buffer 1 is empty");
        is_mem(msg.buffers[2].ptr, msg.buffers[2].len, "xyz", 3, "buffer 2");
        ok(msg.buffers[0].ptr == frame + 4 * 5 + strlen(json), "buffers are views into the frame");
        is_part(msg.header, "{\"msg_id\":\"b\"}", "header of the binary frame");
        jp_msg_release(&msg);

        len = make_binary(frame, "{\"header\":{}}", NULL, 0);
        is_int(jp_wsjson_decode(frame, len, true, &msg, err, sizeof(err)), 0,
               "a binary frame without buffers (nbufs = 1)");
        is_uint(msg.nbuffers, 0, "no buffers");
        jp_msg_release(&msg);

        len = make_binary(frame, "{\"header\":{\"t\":\"\xff\"}}", bufs, 1);
        is_int(jp_wsjson_decode(frame, len, true, &msg, err, sizeof(err)), 0,
               "stray bytes in a binary frame's JSON");
        is_part(msg.header, "{\"t\":\"\xef\xbf\xbd\"}", "are repaired too");
        is_mem(msg.buffers[0].ptr, msg.buffers[0].len, b1, sizeof(b1),
               "while buffers stay untouched");
        jp_msg_release(&msg);
}

static void expect_bad_binary(const uint8_t *frame, size_t len, const char *name)
{
        struct jp_msg msg;

        memset(err, 0, sizeof(err));
        is_int(jp_wsjson_decode(frame, len, true, &msg, err, sizeof(err)), -EBADMSG, "%s", name);
        ok(err[0] != '\0' && msg.nbuffers == 0 && msg.owned == NULL,
           "%s: refused with a reason (%s)", name, err);
}

static void test_malformed_binary(void)
{
        struct jp_bytes bufs[2] = {{(const uint8_t *)"AAAA", 4}, {(const uint8_t *)"BBBB", 4}};
        const char *json = "{\"header\":{}}";
        uint8_t frame[4096], copy[4096];
        size_t len, json_at;

        len = make_binary(frame, json, bufs, 2);
        json_at = 4 * 4;
        {
                struct jp_msg msg;

                is_int(jp_wsjson_decode(frame, len, true, &msg, err, sizeof(err)), 0,
                       "the baseline binary frame decodes");
                jp_msg_release(&msg);
        }

        for (size_t cut = 0; cut < 8; cut++)
                expect_bad_binary(frame, cut,
                                  cut == 0  ? "binary frame of 0 bytes"
                                  : cut < 4 ? "binary frame shorter than nbufs"
                                            : "binary frame shorter than 8 bytes");
        expect_bad_binary(frame, 12, "truncated inside the offset table");
        expect_bad_binary(frame, json_at + strlen(json) - 1, "truncated inside the JSON");
        expect_bad_binary(frame, json_at + strlen(json) + 2,
                          "truncated before the last buffer's offset");

        memcpy(copy, frame, len);
        put_be32(copy, 0);
        expect_bad_binary(copy, len, "nbufs 0");
        memcpy(copy, frame, len);
        put_be32(copy, JP_MAX_BUFFERS + 2);
        expect_bad_binary(copy, len, "one buffer more than allowed");
        memcpy(copy, frame, len);
        put_be32(copy, 0xffffffffu);
        expect_bad_binary(copy, len, "nbufs 0xffffffff");
        memcpy(copy, frame, len);
        put_be32(copy, 0x40000000u);
        expect_bad_binary(copy, len, "nbufs 2^30");
        memcpy(copy, frame, len);
        put_be32(copy, 10);
        expect_bad_binary(copy, len, "an offset table longer than the frame");

        memcpy(copy, frame, len);
        put_be32(copy + 4, 8);
        expect_bad_binary(copy, len, "offset_0 inside the offset table");
        memcpy(copy, frame, len);
        put_be32(copy + 4, 0);
        expect_bad_binary(copy, len, "offset_0 zero");
        memcpy(copy, frame, len);
        put_be32(copy + 8, get_be32(copy + 12) + 1);
        expect_bad_binary(copy, len, "offsets out of order");
        memcpy(copy, frame, len);
        put_be32(copy + 12, (uint32_t)len + 1);
        expect_bad_binary(copy, len, "last offset past the end");
        memcpy(copy, frame, len);
        put_be32(copy + 8, 0xfffffff0u);
        expect_bad_binary(copy, len, "offset far past the end");
        memcpy(copy, frame, len);
        put_be32(copy + 8, (uint32_t)json_at + 1);
        expect_bad_binary(copy, len, "JSON cut short by a wrong offset");

        len = make_binary(frame, "[1,2]", bufs, 1);
        expect_bad_binary(frame, len, "binary JSON not an object");
        len = make_binary(frame, "{\"header\":{},\"channel\":\"iopub\"}", bufs, 1);
        expect_bad_binary(frame, len, "binary frame on iopub");
}

/* The envelope with the content put back in its place is the whole frame. */
static void check_envelope(const struct jp_msg *in, const struct buf *whole, size_t prefix,
                           const char *name)
{
        struct buf env, joined;
        size_t at = 0;
        bool binary = false;

        buf_init(&env, 1 << 20);
        buf_init(&joined, 1 << 20);
        buf_append(&env, "PRE", 3);
        is_int(jp_wsjson_encode_envelope(in, "id-1", "kind", &env, &binary, &at), 0,
               "%s: envelope encodes", name);
        is_int(binary, in->nbuffers > 0, "%s: envelope binary as the frame", name);
        buf_append(&joined, env.data + 3, at);
        buf_append(&joined, in->content.ptr, in->content.len);
        buf_append(&joined, env.data + 3 + at, env.len - 3 - at);
        is_mem(joined.data, joined.len, whole->data + prefix, whole->len - prefix,
               "%s: envelope + content = the frame", name);
        buf_free(&env);
        buf_free(&joined);
}

static void check_round_trip(const struct jp_msg *in, const char *name)
{
        struct buf out;
        struct jp_msg back;
        bool binary = !in->nbuffers;
        size_t prefix = 7;

        /* A prefix in the buffer (headroom for a WebSocket library) must not
         * shift the offsets: they count from the start of the frame. */
        buf_init(&out, 1 << 20);
        buf_append(&out, "HEADROM", prefix);
        is_int(jp_wsjson_encode(in, "id-1", "kind", &out, &binary), 0, "%s: encodes", name);
        is_int(binary, in->nbuffers > 0, "%s: binary exactly when there are buffers", name);
        is_mem(out.data, prefix, "HEADROM", prefix, "%s: the prefix is kept", name);
        check_envelope(in, &out, prefix, name);
        is_int(jp_wsjson_decode((const uint8_t *)out.data + prefix, out.len - prefix, binary, &back,
                                err, sizeof(err)),
               0, "%s: decodes again (%s)", name, err);
        is_int(back.channel, in->channel, "%s: channel", name);
        ok(part_is(back.header, (const char *)in->header.ptr) &&
               part_is(back.parent_header, (const char *)in->parent_header.ptr) &&
               part_is(back.metadata, (const char *)in->metadata.ptr) &&
               part_is(back.content, (const char *)in->content.ptr),
           "%s: JSON parts round-trip byte for byte", name);
        is_uint(back.nbuffers, in->nbuffers, "%s: buffer count", name);
        for (size_t i = 0; i < in->nbuffers && i < back.nbuffers; i++)
                is_mem(back.buffers[i].ptr, back.buffers[i].len, in->buffers[i].ptr,
                       in->buffers[i].len, "%s: buffer %zu", name, i);
        jp_msg_release(&back);
        buf_free(&out);
}

static void test_encode(void)
{
        static const uint8_t raw[] = {0, 1, 2, 0xff, '"', '\\'};
        struct jp_msg msg;
        struct buf out;
        bool binary = true;
        json_t *j;

        jp_msg_init(&msg);
        msg.channel = JP_CONTROL;
        msg.header = str("{\"msg_id\":\"m\",\"msg_type\":\"t\"}");
        msg.parent_header = str("{}");
        msg.metadata = str("{\"x\":[1,2]}");
        msg.content = str("{\"s\":\"h\xc3\xa9\"}");
        check_round_trip(&msg, "text");

        msg.nbuffers = 3;
        msg.buffers[0] = (struct jp_bytes){raw, sizeof(raw)};
        msg.buffers[1] = (struct jp_bytes){NULL, 0};
        msg.buffers[2] = str("third");
        msg.channel = JP_STDIN;
        check_round_trip(&msg, "binary with buffers");

        msg.nbuffers = JP_MAX_BUFFERS;
        for (size_t i = 0; i < JP_MAX_BUFFERS; i++)
                msg.buffers[i] = (struct jp_bytes){raw, i % sizeof(raw)};
        check_round_trip(&msg, "the most buffers allowed");

        /* Server to client: the frame names iopub and carries msg_id and
         * msg_type at the top level, with JSON-escaped values. */
        jp_msg_init(&msg);
        msg.channel = JP_IOPUB;
        msg.header = str("{\"msg_id\":\"m\"}");
        msg.content = str("{\"name\":\"stdout\"}");
        buf_init(&out, 4096);
        is_int(jp_wsjson_encode(&msg, "a\"b", "stream\n", &out, &binary), 0, "encode for iopub");
        is_int(binary, false, "text frame");
        j = json_loadb(out.data, out.len, 0, NULL);
        ok(j != NULL, "the frame is valid JSON");
        is_str(json_string_value(json_object_get(j, "channel")), "iopub", "channel member");
        is_str(json_string_value(json_object_get(j, "msg_id")), "a\"b", "msg_id member, escaped");
        is_str(json_string_value(json_object_get(j, "msg_type")), "stream\n",
               "msg_type member, escaped");
        ok(json_is_object(json_object_get(j, "parent_header")) &&
               json_object_size(json_object_get(j, "parent_header")) == 0 &&
               json_is_object(json_object_get(j, "metadata")),
           "empty parts are sent as {}");
        ok(json_is_array(json_object_get(j, "buffers")) &&
               json_array_size(json_object_get(j, "buffers")) == 0,
           "buffers is []");
        json_decref(j);
        buf_free(&out);

        /* Layout of a binary frame, checked by hand. */
        jp_msg_init(&msg);
        msg.header = str("{}");
        msg.parent_header = str("{}");
        msg.metadata = str("{}");
        msg.content = str("{}");
        msg.nbuffers = 2;
        msg.buffers[0] = str("AB");
        msg.buffers[1] = str("CDE");
        buf_init(&out, 4096);
        is_int(jp_wsjson_encode(&msg, "i", "t", &out, &binary), 0, "encode two buffers");
        {
                const uint8_t *f = (const uint8_t *)out.data;
                uint32_t o0 = get_be32(f + 4), o1 = get_be32(f + 8), o2 = get_be32(f + 12);

                is_uint(get_be32(f), 3, "nbufs = 1 + #buffers");
                is_uint(o0, 16, "offset_0 = 4 * (nbufs + 1)");
                is_uint(o2 - o1, 2, "buffer 1 spans its length");
                is_uint(out.len - o2, 3, "the last buffer runs to the end");
                is_mem(f + o1, 2, "AB", 2, "buffer 1 bytes");
                is_mem(f + o2, 3, "CDE", 3, "buffer 2 bytes");
                ok(f[o0] == '{' && f[o1 - 1] == '}', "the JSON lies between offset_0 and offset_1");
        }
        buf_free(&out);

        buf_init(&out, 16);
        is_int(jp_wsjson_encode(&msg, "i", "t", &out, &binary), -E2BIG,
               "encode past the buffer's maximum fails");
        buf_free(&out);
}

static void test_utf8_valid(void)
{
        static const struct {
                const char *s;
                size_t len;
                bool valid;
                const char *name;
        } cases[] = {
            {"", 0, true, "empty"},
            {"ascii \x7f", 7, true, "ASCII with DEL"},
            {"a\0b", 3, true, "NUL is ASCII"},
            {"\xc3\xa9", 2, true, "U+00E9"},
            {"\xe2\x82\xac", 3, true, "U+20AC"},
            {"\xf0\x9f\x98\x80", 4, true, "U+1F600"},
            {"\xef\xbf\xbf", 3, true, "U+FFFF"},
            {"\xf4\x8f\xbf\xbf", 4, true, "U+10FFFF"},
            {"\xf4\x90\x80\x80", 4, false, "past U+10FFFF"},
            {"\xc0\x80", 2, false, "overlong NUL"},
            {"\xc1\xbf", 2, false, "overlong two-byte"},
            {"\xe0\x80\xaf", 3, false, "overlong three-byte"},
            {"\xf0\x80\x80\xaf", 4, false, "overlong four-byte"},
            {"\xed\xa0\x80", 3, false, "high surrogate"},
            {"\xed\xbf\xbf", 3, false, "low surrogate"},
            {"\xe2\x82", 2, false, "truncated sequence"},
            {"\x80", 1, false, "lone continuation byte"},
            {"\xc3\x28", 2, false, "bad continuation byte"},
            {"\xf5\x80\x80\x80", 4, false, "0xf5 lead byte"},
            {"\xff", 1, false, "0xff"},
        };

        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
                is_int(jp_utf8_valid((const uint8_t *)cases[i].s, cases[i].len), cases[i].valid,
                       "UTF-8 %s: %s", cases[i].valid ? "valid" : "invalid", cases[i].name);
}

int main(void)
{
        test_text_decode();
        test_lenient();
        test_utf8_repair();
        test_floats();
        test_malformed_text();
        test_binary_decode();
        test_malformed_binary();
        test_encode();
        test_utf8_valid();
        return done_testing();
}
