/* Fuzzes jp_json_string_tokens, the scan that lifts a stream's text out of
 * a kernel's JSON to splice it, unparsed, into an /execute line. Input: a
 * JSON object's bytes; the keys looked for are "name" and "text".
 * Invariants: a token found is one JSON string that jansson reads; when
 * jansson reads the input as an object, a token found holds jansson's value
 * for its key, and a key jansson has as a string is never reported absent
 * (the scan may only be unsure). Never reads outside the input. */
#include "autoconf.h"

#include "protocol/message.h"

#include <errno.h>
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void check_token(struct jp_bytes token, json_t *root, const char *key)
{
        json_t *alone = json_loadb((const char *)token.ptr, token.len,
                                   JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
        json_t *want = json_object_get(root, key);

        if (!json_is_string(alone))
                abort();
        if (root && (!json_is_string(want) ||
                     json_string_length(want) != json_string_length(alone) ||
                     memcmp(json_string_value(want), json_string_value(alone),
                            json_string_length(want)) != 0))
                abort();
        json_decref(alone);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        static const char *const keys[2] = {"name", "text"};
        struct jp_bytes tokens[2] = {{0}};
        /* A copy of exactly size bytes: ASan catches any read past them. */
        uint8_t *copy = malloc(size ? size : 1);
        json_t *root;
        int rc;

        if (!copy)
                return 0;
        if (size)
                memcpy(copy, data, size);
        rc = jp_json_string_tokens((struct jp_bytes){copy, size}, keys, tokens, 2);
        root = json_loadb((const char *)copy, size, JSON_ALLOW_NUL, NULL);
        if (!json_is_object(root)) {
                json_decref(root);
                root = NULL;
        }
        if (rc == 0) {
                check_token(tokens[0], root, "name");
                check_token(tokens[1], root, "text");
        } else if (rc == -ENOENT && root &&
                   json_is_string(json_object_get(root, "name")) &&
                   json_is_string(json_object_get(root, "text"))) {
                abort();
        } else if (rc != -ENOENT && rc != -EBADMSG) {
                abort();
        }
        json_decref(root);
        free(copy);
        return 0;
}
