/* Fuzzes jp_header_fields, whose fast path scans a header without parsing
 * it. Input: the header bytes. Invariant: whenever jansson parses the input
 * as an object, the answer is jansson's (the same fields, or -EBADMSG when
 * they are missing, not strings or too long); on input jansson rejects the
 * scan may still find fields, but never reads outside the input and always
 * leaves both outputs NUL-terminated. */
#include "autoconf.h"

#include "protocol/message.h"

#include <errno.h>
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static int reference(json_t *root, const char *key, char *out, size_t size)
{
        json_t *v = json_object_get(root, key);

        if (!json_is_string(v) || json_string_length(v) >= size)
                return -EBADMSG;
        memcpy(out, json_string_value(v), json_string_length(v));
        out[json_string_length(v)] = '\0';
        return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        char id[JP_MSG_ID_SIZE], type[JP_MSG_TYPE_SIZE];
        char want_id[JP_MSG_ID_SIZE], want_type[JP_MSG_TYPE_SIZE];
        /* A copy of exactly size bytes: ASan catches any read past them. */
        uint8_t *copy = malloc(size ? size : 1);
        json_t *root;
        int rc, want;

        if (!copy)
                return 0;
        if (size)
                memcpy(copy, data, size);
        rc = jp_header_fields((struct jp_bytes){copy, size}, id, type);
        if (!memchr(id, 0, sizeof(id)) || !memchr(type, 0, sizeof(type)))
                abort();
        root = json_loadb((const char *)copy, size, 0, NULL);
        if (json_is_object(root)) {
                want = reference(root, "msg_id", want_id, sizeof(want_id));
                if (want == 0)
                        want = reference(root, "msg_type", want_type, sizeof(want_type));
                if (rc != want)
                        abort();
                if (rc == 0 && (strcmp(id, want_id) != 0 || strcmp(type, want_type) != 0))
                        abort();
        }
        json_decref(root);
        free(copy);
        return 0;
}
