/* Fuzzes jp_request_check, which reads every client message before a
 * kernel does. Input: a flag byte (bit 0: parse every part, as for the v1
 * format), then header and content separated by the first 0xff byte.
 * Invariants: the answer is one of the documented ones; ids and types are
 * NUL-terminated; a refusal names its ename and a reply type ending in
 * _reply; a rewritten content is a JSON object whose silent is a boolean;
 * never reads outside the input, never leaks. */
#include "autoconf.h"

#include "protocol/request.h"

#include <errno.h>
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        const uint8_t *split;
        uint8_t *header = NULL, *content = NULL;
        size_t hlen, clen;
        struct jp_request req;
        struct jp_msg msg;
        int rc;

        if (size < 1)
                return 0;
        split = memchr(data + 1, 0xff, size - 1);
        hlen = split ? (size_t)(split - data - 1) : size - 1;
        clen = split ? size - 1 - hlen - 1 : 0;
        /* Copies of exactly their sizes: ASan catches any read past them. */
        header = malloc(hlen ? hlen : 1);
        content = malloc(clen ? clen : 1);
        if (!header || !content)
                goto out;
        memcpy(header, data + 1, hlen);
        if (clen)
                memcpy(content, split + 1, clen);
        jp_msg_init(&msg);
        msg.header = (struct jp_bytes){header, hlen};
        msg.parent_header = (struct jp_bytes){(const uint8_t *)"{}", 2};
        msg.metadata = (struct jp_bytes){(const uint8_t *)"{}", 2};
        msg.content = (struct jp_bytes){content, clen};
        rc = jp_request_check(&msg, data[0] & 1, &req);
        if (rc != 0 && rc != -EBADMSG && rc != -EPROTO && rc != -ENOMEM)
                abort();
        if (!memchr(req.msg_id, 0, sizeof(req.msg_id)) ||
            !memchr(req.msg_type, 0, sizeof(req.msg_type)) ||
            !memchr(req.reason, 0, sizeof(req.reason)))
                abort();
        if (rc == -EPROTO) {
                size_t n = strlen(req.reply_type);

                if (!req.ename || n < 6 || strcmp(req.reply_type + n - 6, "_reply") != 0)
                        abort();
        }
        if (req.content) {
                json_t *c = json_loads(req.content, JSON_ALLOW_NUL, NULL);

                if (rc != 0 || !json_is_boolean(json_object_get(c, "silent")))
                        abort();
                json_decref(c);
        }
        jp_request_release(&req);
out:
        free(header);
        free(content);
        return 0;
}
