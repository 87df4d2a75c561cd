/* protocol/message.c: channel names and the two header fields the gateway reads. */
#include "autoconf.h"

#include "protocol/message.h"
#include "tests/unit/tap.h"

#include <errno.h>
#include <stdio.h>

static void test_channels(void)
{
        static const char *const names[JP_CHANNEL_COUNT] = {"shell", "control", "stdin", "iopub",
                                                            "hb"};
        enum jp_channel ch;

        for (int i = 0; i < JP_CHANNEL_COUNT; i++) {
                ch = (enum jp_channel) - 1;
                is_str(jp_channel_name((enum jp_channel)i), names[i], "name of channel %d", i);
                is_int(jp_channel_parse(names[i], strlen(names[i]), &ch), 0, "parse %s", names[i]);
                is_int(ch, i, "%s parses to its own channel", names[i]);
        }
        is_str(jp_channel_name(JP_CHANNEL_COUNT), "unknown", "out-of-range channel name");
        is_str(jp_channel_name((enum jp_channel)1000), "unknown", "far out-of-range channel name");

        ch = JP_HB;
        is_int(jp_channel_parse("Shell", 5, &ch), -EINVAL, "names are case-sensitive");
        is_int(ch, JP_HB, "a failed parse leaves the output alone");
        is_int(jp_channel_parse("shel", 4, &ch), -EINVAL, "a prefix is not a channel");
        is_int(jp_channel_parse("shell", 4, &ch), -EINVAL, "the length is honoured (short)");
        is_int(jp_channel_parse("shells", 6, &ch), -EINVAL, "a longer word is not a channel");
        is_int(jp_channel_parse("iopub\0", 6, &ch), -EINVAL, "a trailing NUL is part of the name");
        is_int(jp_channel_parse("", 0, &ch), -EINVAL, "the empty name");
        is_int(jp_channel_parse("controlXYZ", 7, &ch), 0, "a name need not be NUL-terminated");
        is_int(ch, JP_CONTROL, "which is control");
}

static void test_msg_init_release(void)
{
        struct jp_msg msg;

        memset(&msg, 0xa5, sizeof(msg));
        jp_msg_init(&msg);
        ok(msg.channel == JP_SHELL && msg.header.ptr == NULL && msg.header.len == 0 &&
               msg.nbuffers == 0 && msg.nidentities == 0 && msg.owned == NULL,
           "jp_msg_init clears every field");
        msg.owned = malloc(16);
        msg.nbuffers = 3;
        msg.channel = JP_IOPUB;
        jp_msg_release(&msg);
        ok(msg.owned == NULL && msg.nbuffers == 0 && msg.channel == JP_SHELL,
           "jp_msg_release frees owned storage and re-initialises");
}

static int header_fields(const char *json, size_t len, char *id, char *type)
{
        struct jp_bytes h = {(const uint8_t *)json, len};

        return jp_header_fields(h, id, type);
}

static void test_header_fields(void)
{
        const char *good = "{\"msg_id\":\"abc-123\",\"session\":\"s\",\"username\":\"u\","
                           "\"date\":\"2024-01-01T00:00:00.000000Z\","
                           "\"msg_type\":\"execute_request\",\"version\":\"5.3\"}";
        char id[JP_MSG_ID_SIZE], type[JP_MSG_TYPE_SIZE];
        char big[512];
        int n;

        is_int(header_fields(good, strlen(good), id, type), 0, "a full header");
        is_str(id, "abc-123", "msg_id");
        is_str(type, "execute_request", "msg_type");

        /* A view into a larger frame: only len bytes belong to the header. */
        n = snprintf(big, sizeof(big), "%s{\"garbage", "{\"msg_type\":\"t\",\"msg_id\":\"i\"}");
        is_int(header_fields(big, (size_t)n - strlen("{\"garbage"), id, type), 0,
               "a header that is not NUL-terminated");
        ok(strcmp(id, "i") == 0 && strcmp(type, "t") == 0, "fields of the unterminated header");

        is_int(header_fields("{\"msg_id\":\"a\\u00e9\",\"msg_type\":\"x\"}", 35, id, type), 0,
               "escapes are decoded");
        is_str(id, "a\xc3\xa9", "msg_id with an escaped character");

#define BAD(json, name)                                                                            \
        do {                                                                                       \
                memset(id, 'Z', sizeof(id));                                                       \
                memset(type, 'Z', sizeof(type));                                                   \
                is_int(header_fields(json, strlen(json), id, type), -EBADMSG, name);               \
                ok(memchr(id, 0, sizeof(id)) && memchr(type, 0, sizeof(type)),                     \
                   name ": outputs stay NUL-terminated");                                          \
        } while (0)
        BAD("", "empty header");
        BAD("not json", "not JSON");
        BAD("[\"msg_id\",\"msg_type\"]", "an array");
        BAD("\"msg_id\"", "a string");
        BAD("{\"msg_type\":\"x\"}", "msg_id missing");
        BAD("{\"msg_id\":\"x\"}", "msg_type missing");
        BAD("{\"msg_id\":7,\"msg_type\":\"x\"}", "msg_id a number");
        BAD("{\"msg_id\":\"x\",\"msg_type\":null}", "msg_type null");
        BAD("{\"msg_id\":\"x\",\"msg_type\":\"y\"", "truncated object");
#undef BAD

        /* The scan that reads headers without parsing them must find the
         * top-level fields only, whatever surrounds them. */
        {
                static const struct {
                        const char *json, *id, *type, *name;
                } cases[] = {
                        {"{\"x\":{\"msg_id\":\"inner\",\"msg_type\":\"in\"},\"msg_id\":\"outer\","
                         "\"msg_type\":\"out\"}",
                         "outer", "out", "fields of a nested object are not the header's"},
                        {"{\"a\":[\"}\",\"{\",\"\\\"\"],\"msg_type\":\"t\",\"msg_id\":\"i\"}", "i", "t",
                         "brackets and quotes inside strings"},
                        {" {\n\t\"msg_id\" : \"i\" ,\r\n \"n\": -1.5e3, \"b\": true, \"z\": null,"
                         "\"msg_type\":\"t\" } \n",
                         "i", "t", "whitespace, numbers and literals"},
                        {"{\"msg_id\":\"first\",\"msg_type\":\"t\",\"msg_id\":\"last\"}", "last", "t",
                         "a repeated key: the last one, as jansson"},
                        {"{\"m\\u0073g_id\":\"escaped-key\",\"msg_type\":\"t\"}", "escaped-key", "t",
                         "an escaped key"},
                        {"{\"msg_id\":\"i\",\"msg_type\":\"t\",\"parent\":{\"msg_id\":\"p\","
                         "\"deep\":[{\"msg_type\":\"q\"}]}}",
                         "i", "t", "a header with nesting after the fields"},
                };

                for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                        int rc = header_fields(cases[i].json, strlen(cases[i].json), id, type);

                        is_int(rc, 0, "%s: read", cases[i].name);
                        ok(rc == 0 && strcmp(id, cases[i].id) == 0 &&
                               strcmp(type, cases[i].type) == 0,
                           "%s: %s / %s", cases[i].name, id, type);
                }
                static const char trailing[] = "{\"msg_id\":\"i\",\"msg_type\":\"t\"} trailing";
                static const char nested[] = "{\"x\":{\"msg_id\":\"i\",\"msg_type\":\"t\"}}";

                is_int(header_fields(trailing, strlen(trailing), id, type), -EBADMSG,
                       "text after the object");
                is_int(header_fields(nested, strlen(nested), id, type), -EBADMSG,
                       "fields only in a nested object are not there");
        }

        /* Size limits: a value must fit with its terminator. */
        {
                char longid[JP_MSG_ID_SIZE + 1], longtype[JP_MSG_TYPE_SIZE + 1], json[1024];

                memset(longid, 'i', sizeof(longid));
                memset(longtype, 't', sizeof(longtype));
                n = snprintf(json, sizeof(json), "{\"msg_id\":\"%.*s\",\"msg_type\":\"t\"}",
                             JP_MSG_ID_SIZE - 1, longid);
                is_int(header_fields(json, (size_t)n, id, type), 0, "msg_id of %d characters",
                       JP_MSG_ID_SIZE - 1);
                is_uint(strlen(id), JP_MSG_ID_SIZE - 1, "the longest msg_id is kept whole");
                n = snprintf(json, sizeof(json), "{\"msg_id\":\"%.*s\",\"msg_type\":\"t\"}",
                             JP_MSG_ID_SIZE, longid);
                is_int(header_fields(json, (size_t)n, id, type), -EBADMSG,
                       "msg_id of %d characters is refused", JP_MSG_ID_SIZE);
                n = snprintf(json, sizeof(json), "{\"msg_id\":\"i\",\"msg_type\":\"%.*s\"}",
                             JP_MSG_TYPE_SIZE - 1, longtype);
                is_int(header_fields(json, (size_t)n, id, type), 0, "msg_type of %d characters",
                       JP_MSG_TYPE_SIZE - 1);
                n = snprintf(json, sizeof(json), "{\"msg_id\":\"i\",\"msg_type\":\"%.*s\"}",
                             JP_MSG_TYPE_SIZE, longtype);
                is_int(header_fields(json, (size_t)n, id, type), -EBADMSG,
                       "msg_type of %d characters is refused", JP_MSG_TYPE_SIZE);
        }
}

static int token(const char *json, const char *key, char *out, size_t size)
{
        struct jp_bytes t = {0};
        int rc =
            jp_json_string_token((struct jp_bytes){(const uint8_t *)json, strlen(json)}, key, &t);

        snprintf(out, size, "%.*s", (int)t.len, (const char *)t.ptr);
        return rc;
}

static void test_string_token(void)
{
        char t[256];

        is_int(token("{\"name\": \"stdout\", \"text\": \"hi\\n\"}", "text", t, sizeof(t)), 0,
               "ipykernel's stream content");
        is_str(t, "\"hi\\n\"", "the token keeps its quotes and escapes");
        is_int(token("{\"a\":{\"text\":\"inner\"},\"b\":[1,\"}\"],\"text\":\"x\"}", "text", t,
                     sizeof(t)),
               0, "nested values are skipped, not searched");
        is_str(t, "\"x\"", "the top-level one is found");
        is_int(token("{\"text\":\"a\",\"text\":\"b\"}", "text", t, sizeof(t)), 0, "duplicates");
        is_str(t, "\"b\"", "the last counts, as in jansson");
        is_int(token("{\"text\":\"\\u00e9\\\"\\/\\b\\f\\r\\t\"}", "text", t, sizeof(t)), 0,
               "every valid escape");
        is_int(token("{\"text\":\"caf\xc3\xa9\"}", "text", t, sizeof(t)), 0, "UTF-8");
        is_int(token("{\"name\":\"stdout\"}", "text", t, sizeof(t)), -ENOENT, "absent");
        is_int(token("{}", "text", t, sizeof(t)), -ENOENT, "an empty object");
        is_int(token("{\"text\":\"\\x\"}", "text", t, sizeof(t)), -EBADMSG, "a bad escape");
        is_int(token("{\"text\":\"\\u12G4\"}", "text", t, sizeof(t)), -EBADMSG, "a bad \\u");
        is_int(token("{\"text\":\"\\u12\"}", "text", t, sizeof(t)), -EBADMSG, "a short \\u");
        /* Surrogates as jansson reads them (a fuzzer found the lone low one). */
        is_int(token("{\"text\":\"\\ud83d\\ude00\"}", "text", t, sizeof(t)), 0,
               "a surrogate pair");
        is_str(t, "\"\\ud83d\\ude00\"", "the pair is one token");
        is_int(token("{\"text\":\"\\udddd\"}", "text", t, sizeof(t)), -EBADMSG,
               "a lone low surrogate");
        is_int(token("{\"text\":\"\\ud83dx\"}", "text", t, sizeof(t)), -EBADMSG,
               "a high surrogate without its low one");
        is_int(token("{\"text\":\"\\ud83d\\u0041\"}", "text", t, sizeof(t)), -EBADMSG,
               "a high surrogate before another escape");
        is_int(token("{\"text\":\"\\ud83d\"}", "text", t, sizeof(t)), -EBADMSG,
               "a high surrogate at the end");
        is_int(token("{\"text\":\"a\nb\"}", "text", t, sizeof(t)), -EBADMSG,
               "a raw control character");
        is_int(token("{\"text\":\"\xff\"}", "text", t, sizeof(t)), -EBADMSG, "bytes not UTF-8");
        is_int(token("{\"text\":42}", "text", t, sizeof(t)), -EBADMSG, "not a string: unsure");
        is_int(token("{\"text\":\"open", "text", t, sizeof(t)), -EBADMSG, "cut off");
        is_int(token("[\"text\"]", "text", t, sizeof(t)), -EBADMSG, "not an object");
        is_int(token("{\"t\\u0065xt\":\"x\"}", "text", t, sizeof(t)), -EBADMSG,
               "an escaped key: unsure");
        {
                static const char json[] = "{\"name\": \"stderr\", \"text\": \"oops\"}";
                static const char *const keys[2] = {"name", "text"};
                struct jp_bytes got[2] = {{0}};
                struct jp_bytes obj = {(const uint8_t *)json, sizeof(json) - 1};

                is_int(jp_json_string_tokens(obj, keys, got, 2), 0, "two keys in one pass");
                is_mem(got[0].ptr, got[0].len, "\"stderr\"", 8, "the first");
                is_mem(got[1].ptr, got[1].len, "\"oops\"", 6, "the second");
                obj.len = 18; /* {"name": "stderr", */
                is_int(jp_json_string_tokens(obj, keys, got, 2), -EBADMSG, "cut short: unsure");
        }
        {
                static const char json[] = "{\"name\": \"stdout\"}";
                static const char *const keys[2] = {"name", "text"};
                struct jp_bytes got[2];

                is_int(
                    jp_json_string_tokens(
                        (struct jp_bytes){(const uint8_t *)json, sizeof(json) - 1}, keys, got, 2),
                    -ENOENT, "one of two absent");
        }
}

int main(void)
{
        test_channels();
        test_msg_init_release();
        test_header_fields();
        test_string_token();
        return done_testing();
}
