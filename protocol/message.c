#include "autoconf.h"

#include "protocol/message.h"
#include "protocol/wsjson.h"

#include <errno.h>
#include <stdbool.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static const char *const channel_names[JP_CHANNEL_COUNT] = {"shell", "control", "stdin", "iopub",
                                                            "hb"};

void jp_msg_init(struct jp_msg *msg)
{
        /* The arrays (1.3 KB) are read only up to their counts, and every
         * relayed message is initialised at least once: not cleared. */
        msg->channel = JP_SHELL;
        msg->header = msg->parent_header = msg->metadata = msg->content = (struct jp_bytes){0};
        msg->nbuffers = 0;
        msg->nidentities = 0;
        msg->owned = NULL;
}

void jp_msg_release(struct jp_msg *msg)
{
        free(msg->owned);
        jp_msg_init(msg);
}

const char *jp_channel_name(enum jp_channel channel)
{
        if ((unsigned)channel >= JP_CHANNEL_COUNT)
                return "unknown";
        return channel_names[channel];
}

int jp_channel_parse(const char *name, size_t len, enum jp_channel *out)
{
        for (int i = 0; i < JP_CHANNEL_COUNT; i++) {
                if (strlen(channel_names[i]) == len && memcmp(channel_names[i], name, len) == 0) {
                        *out = (enum jp_channel)i;
                        return 0;
                }
        }
        return -EINVAL;
}

static int copy_string_field(json_t *obj, const char *key, char *out, size_t size)
{
        json_t *v = json_object_get(obj, key);
        size_t len;

        if (!json_is_string(v))
                return -EBADMSG;
        len = json_string_length(v);
        if (len >= size)
                return -EBADMSG;
        memcpy(out, json_string_value(v), len);
        out[len] = '\0';
        return 0;
}

/* The general way: jansson parses the whole header. */
static int header_fields_parsed(struct jp_bytes header, char msg_id[JP_MSG_ID_SIZE],
                                char msg_type[JP_MSG_TYPE_SIZE])
{
        json_t *root;
        int rc = -EBADMSG;

        msg_id[0] = '\0';
        msg_type[0] = '\0';
        root = json_loadb((const char *)header.ptr, header.len, 0, NULL);
        if (!json_is_object(root))
                goto out;
        rc = copy_string_field(root, "msg_id", msg_id, JP_MSG_ID_SIZE);
        if (rc == 0)
                rc = copy_string_field(root, "msg_type", msg_type, JP_MSG_TYPE_SIZE);
out:
        json_decref(root);
        return rc;
}

/* ---- the fast way, for the headers every message carries ----------------
 * A scan of the top-level object that finds the two fields without building
 * anything. It handles the headers kernels and clients send (plain strings,
 * any values elsewhere); anything it is not sure about (an escape in a key
 * or in one of the two values, an odd structure) is left to jansson, so the
 * answer is always jansson's. */

#define SCAN_UNSURE 1

static bool is_ws(char c);

static const char *skip_ws(const char *p, const char *end)
{
        while (p < end && is_ws(*p))
                p++;
        return p;
}

/* A string without escapes at p: its bytes in [*str, *str + *len); returns
 * what follows the closing quote, or NULL. */
static const char *plain_string(const char *p, const char *end, const char **str, size_t *len)
{
        const char *q;

        if (p >= end || *p != '"')
                return NULL;
        for (q = p + 1; q < end && *q != '"'; q++) {
                if (*q == '\\' || (unsigned char)*q < 0x20)
                        return NULL;
        }
        if (q >= end)
                return NULL;
        *str = p + 1;
        *len = (size_t)(q - p - 1);
        return q + 1;
}

static bool is_ws(char c)
{
        return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* Skips the value at p (any JSON, strings with escapes, nesting): returns
 * what follows it, or NULL when it runs off the end. */
static const char *skip_value(const char *p, const char *end)
{
        int depth = 0;

        while (p < end) {
                char c = *p;

                if (c == '"') {
                        for (p++; p < end && *p != '"'; p++) {
                                if (*p == '\\')
                                        p++;
                        }
                        if (p >= end)
                                return NULL;
                        p++;
                } else if (c == '{' || c == '[') {
                        depth++;
                        p++;
                } else if (c == '}' || c == ']') {
                        if (depth == 0)
                                return p; /* closes the enclosing object */
                        depth--;
                        p++;
                } else if (depth == 0 && (c == ',' || is_ws(c))) {
                        return p; /* the end of a number or literal */
                } else {
                        p++;
                }
                if (depth == 0 && (c == '"' || c == '}' || c == ']'))
                        return p; /* a string, object or array ended */
        }
        return NULL;
}

static int header_fields_scanned(struct jp_bytes header, char msg_id[JP_MSG_ID_SIZE],
                                 char msg_type[JP_MSG_TYPE_SIZE])
{
        const char *p = (const char *)header.ptr, *end = p + header.len;
        bool have_id = false, have_type = false;

        p = skip_ws(p, end);
        if (p >= end || *p != '{')
                return SCAN_UNSURE;
        p = skip_ws(p + 1, end);
        if (p < end && *p == '}')
                p = NULL; /* empty: no fields */
        while (p) {
                const char *key, *value;
                size_t klen, vlen;
                char *out = NULL;
                size_t size = 0;

                p = plain_string(p, end, &key, &klen);
                if (!p)
                        return SCAN_UNSURE;
                p = skip_ws(p, end);
                if (p >= end || *p != ':')
                        return SCAN_UNSURE;
                p = skip_ws(p + 1, end);
                if (klen == 6 && memcmp(key, "msg_id", 6) == 0) {
                        out = msg_id;
                        size = JP_MSG_ID_SIZE;
                        have_id = false;
                } else if (klen == 8 && memcmp(key, "msg_type", 8) == 0) {
                        out = msg_type;
                        size = JP_MSG_TYPE_SIZE;
                        have_type = false;
                }
                if (out && p < end && *p == '"') {
                        p = plain_string(p, end, &value, &vlen);
                        if (!p)
                                return SCAN_UNSURE;
                        if (vlen < size) {
                                memcpy(out, value, vlen);
                                out[vlen] = '\0';
                                have_id |= out == msg_id;
                                have_type |= out == msg_type;
                        }
                } else {
                        p = skip_value(p, end);
                        if (!p)
                                return SCAN_UNSURE;
                }
                p = skip_ws(p, end);
                if (p < end && *p == ',') {
                        p = skip_ws(p + 1, end);
                        continue;
                }
                if (p >= end || *p != '}')
                        return SCAN_UNSURE;
                p = skip_ws(p + 1, end);
                if (p != end)
                        return SCAN_UNSURE; /* something after the object */
                break;
        }
        return have_id && have_type ? 0 : SCAN_UNSURE;
}

int jp_header_fields(struct jp_bytes header, char msg_id[JP_MSG_ID_SIZE],
                     char msg_type[JP_MSG_TYPE_SIZE])
{
        msg_id[0] = '\0';
        msg_type[0] = '\0';
        if (header_fields_scanned(header, msg_id, msg_type) == 0)
                return 0;
        return header_fields_parsed(header, msg_id, msg_type);
}

/* The code unit of a "\uXXXX" escape at p (p[0] is the backslash), or -1
 * when the escape is not one. */
static long unicode_escape(const char *p, const char *end)
{
        long v = 0;

        if (end - p < 6 || p[0] != '\\' || p[1] != 'u')
                return -1;
        for (int i = 2; i < 6; i++) {
                char c = p[i];
                int d = c >= '0' && c <= '9'   ? c - '0'
                        : c >= 'a' && c <= 'f' ? c - 'a' + 10
                        : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                               : -1;

                if (d < 0)
                        return -1;
                v = v * 16 + d;
        }
        return v;
}

/* A JSON string token at p, checked (escapes, control characters, UTF-8,
 * in one pass) as jansson checks it: returns what follows its closing
 * quote, or NULL when it is not a well-formed string. A surrogate escape
 * must be a high one followed by a low one. */
static const char *checked_string(const char *p, const char *end)
{
        if (p >= end || *p != '"')
                return NULL;
        for (p++; p < end && *p != '"'; p++) {
                unsigned char c = (unsigned char)*p;

                if (c >= 0x80) {
                        size_t n = jp_utf8_sequence((const uint8_t *)p, (size_t)(end - p));

                        if (n == 0)
                                return NULL;
                        p += n - 1;
                        continue;
                }
                if (c < 0x20)
                        return NULL;
                if (c != '\\')
                        continue;
                if (p + 1 >= end)
                        return NULL;
                if (p[1] == 'u') {
                        long unit = unicode_escape(p, end);

                        if (unit < 0 || (unit >= 0xDC00 && unit <= 0xDFFF))
                                return NULL;
                        if (unit >= 0xD800 && unit <= 0xDBFF) {
                                long low = unicode_escape(p + 6, end);

                                if (low < 0xDC00 || low > 0xDFFF)
                                        return NULL;
                                p += 6;
                        }
                        p += 5;
                } else if (!*++p || !strchr("\"\\/bfnrt", *p)) {
                        return NULL;
                }
        }
        return p < end ? p + 1 : NULL;
}

int jp_json_string_tokens(struct jp_bytes object, const char *const *keys, struct jp_bytes *tokens,
                          size_t n)
{
        const char *p = (const char *)object.ptr, *end = p + object.len;
        size_t found = 0;
        bool seen[8] = {false};

        if (n > sizeof(seen) / sizeof(seen[0]))
                return -EINVAL;
        p = skip_ws(p, end);
        if (p >= end || *p != '{')
                return -EBADMSG;
        p = skip_ws(p + 1, end);
        if (p < end && *p == '}')
                return -ENOENT;
        for (;;) {
                const char *k, *value;
                size_t klen, i;

                p = plain_string(p, end, &k, &klen);
                if (!p)
                        return -EBADMSG;
                p = skip_ws(p, end);
                if (p >= end || *p != ':')
                        return -EBADMSG;
                value = skip_ws(p + 1, end);
                for (i = 0; i < n; i++) {
                        if (strlen(keys[i]) == klen && memcmp(k, keys[i], klen) == 0)
                                break;
                }
                if (i < n) {
                        p = checked_string(value, end);
                        if (!p)
                                return -EBADMSG;
                        tokens[i] = (struct jp_bytes){(const uint8_t *)value, (size_t)(p - value)};
                        found += !seen[i];
                        seen[i] = true;
                } else {
                        p = skip_value(value, end);
                        if (!p)
                                return -EBADMSG;
                }
                p = skip_ws(p, end);
                if (p < end && *p == ',') {
                        p = skip_ws(p + 1, end);
                        continue;
                }
                if (p >= end || *p != '}')
                        return -EBADMSG;
                break;
        }
        return found == n ? 0 : -ENOENT;
}

int jp_json_string_token(struct jp_bytes object, const char *key, struct jp_bytes *token)
{
        return jp_json_string_tokens(object, &key, token, 1);
}
