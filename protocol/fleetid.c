#include "autoconf.h"

#include "protocol/fleetid.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static const char hex_digits[] = "0123456789abcdef";

bool fleetid_host_valid(const char *s)
{
        size_t n = s ? strlen(s) : 0;

        if (n == 0 || n > FLEETID_HOST_MAX)
                return false;
        return strspn(s, "abcdefghijklmnopqrstuvwxyz0123456789") == n;
}

int fleetid_tag(const char *host, char tag[FLEETID_TAG_LEN + 1])
{
        size_t i;

        if (!fleetid_host_valid(host))
                return -EINVAL;
        for (i = 0; i < FLEETID_TAG_LEN / 2; i++) {
                unsigned char c = host[i] ? (unsigned char)host[i] : 0;

                tag[2 * i] = hex_digits[c >> 4];
                tag[2 * i + 1] = hex_digits[c & 15];
                if (!host[i])
                        break;
        }
        /* Zeros after the name: no host character is NUL, so the padding
         * cannot be read as part of a longer name. */
        for (i = 2 * i; i < FLEETID_TAG_LEN; i++)
                tag[i] = '0';
        tag[FLEETID_TAG_LEN] = '\0';
        return 0;
}

int fleetid_uuid(const char *host, char out[JP_UUID_SIZE])
{
        char tag[FLEETID_TAG_LEN + 1];
        int rc = jp_uuid4(out);

        if (rc < 0 || !host || !host[0])
                return rc;
        rc = fleetid_tag(host, tag);
        if (rc < 0)
                return rc;
        /* "tttttttt-tttt-4xxx-...": the version and variant stay where
         * a UUID has them, so Jupyter's clients still see a UUID 4. */
        memcpy(out, tag, 8);
        memcpy(out + 9, tag + 8, 4);
        return 0;
}

int fleetid_sandbox(const char *host, char out[FLEETID_SANDBOX_SIZE])
{
        char tag[FLEETID_TAG_LEN + 1] = "";
        size_t at = 2;
        int rc;

        if (host && host[0]) {
                rc = fleetid_tag(host, tag);
                if (rc < 0)
                        return rc;
        }
        memcpy(out, "gb", 2);
        memcpy(out + at, tag, strlen(tag));
        at += strlen(tag);
        return jp_random_hex(out + at, 8);
}

/* The host id in a tag's hex, or -ENOENT when it decodes to none. */
static int decode_tag(const char *tag, char *host, size_t size)
{
        size_t n = 0;

        for (size_t i = 0; i < FLEETID_TAG_LEN; i += 2) {
                const char *hi = strchr(hex_digits, tag[i]);
                const char *lo = strchr(hex_digits, tag[i + 1]);
                int c;

                if (!tag[i] || !tag[i + 1] || !hi || !lo)
                        return -ENOENT;
                c = (int)((hi - hex_digits) << 4 | (lo - hex_digits));
                if (c == 0) {
                        /* The rest is padding, all of it zeros. */
                        for (size_t j = i + 2; j < FLEETID_TAG_LEN; j++) {
                                if (tag[j] != '0')
                                        return -ENOENT;
                        }
                        break;
                }
                if (n + 1 >= size)
                        return -ENOENT;
                host[n++] = (char)c;
        }
        host[n] = '\0';
        return fleetid_host_valid(host) ? 0 : -ENOENT;
}

int fleetid_host_of(const char *id, char *host, size_t size)
{
        char tag[FLEETID_TAG_LEN + 1];
        size_t n = strlen(id);

        if (size == 0)
                return -ENOENT;
        host[0] = '\0';
        if (jp_uuid_valid(id, n)) {
                memcpy(tag, id, 8);
                memcpy(tag + 8, id + 9, 4);
                tag[FLEETID_TAG_LEN] = '\0';
        } else if (n == FLEETID_SANDBOX_SIZE - 1 && strncmp(id, "gb", 2) == 0 &&
                   strspn(id + 2, hex_digits) == n - 2) {
                memcpy(tag, id + 2, FLEETID_TAG_LEN);
                tag[FLEETID_TAG_LEN] = '\0';
        } else {
                return -ENOENT;
        }
        if (decode_tag(tag, host, size) < 0) {
                host[0] = '\0';
                return -ENOENT;
        }
        return 0;
}

struct fleetid_short fleetid_short(const char *id)
{
        struct fleetid_short out = {""};
        char host[FLEETID_HOST_MAX + 1];
        size_t n = id ? strlen(id) : 0;
        size_t from = 0;

        if (n > FLEETID_SHORT_LEN && fleetid_host_of(id, host, sizeof(host)) == 0)
                from = n - FLEETID_SHORT_LEN;
        if (id)
                snprintf(out.s, sizeof(out.s), "%s", id + from);
        return out;
}
