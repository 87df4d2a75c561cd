#include "autoconf.h"

#include "gateway/core/keys.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int sha256(const char *data, size_t len, unsigned char out[KEYS_HASH_SIZE])
{
        unsigned int n = 0;

        if (!EVP_Digest(data, len, out, &n, EVP_sha256(), NULL) || n != KEYS_HASH_SIZE)
                return -EIO;
        return 0;
}

int keys_hash_hex(const char *key, size_t len, char out[2 * KEYS_HASH_SIZE + 1])
{
        static const char digits[] = "0123456789abcdef";
        unsigned char hash[KEYS_HASH_SIZE];
        int rc = sha256(key, len, hash);

        out[0] = '\0';
        if (rc < 0)
                return rc;
        for (size_t i = 0; i < KEYS_HASH_SIZE; i++) {
                out[2 * i] = digits[hash[i] >> 4];
                out[2 * i + 1] = digits[hash[i] & 15];
        }
        out[2 * KEYS_HASH_SIZE] = '\0';
        return 0;
}

static int hex_value(char c)
{
        if (c >= '0' && c <= '9')
                return c - '0';
        if (c >= 'a' && c <= 'f')
                return c - 'a' + 10;
        if (c >= 'A' && c <= 'F')
                return c - 'A' + 10;
        return -1;
}

static int parse_hash(const char *hex, unsigned char out[KEYS_HASH_SIZE])
{
        if (strlen(hex) != 2 * KEYS_HASH_SIZE)
                return -EINVAL;
        for (size_t i = 0; i < KEYS_HASH_SIZE; i++) {
                int hi = hex_value(hex[2 * i]), lo = hex_value(hex[2 * i + 1]);

                if (hi < 0 || lo < 0)
                        return -EINVAL;
                out[i] = (unsigned char)(hi << 4 | lo);
        }
        return 0;
}

struct keyset *keyset_new(void)
{
        return calloc(1, sizeof(struct keyset));
}

void keyset_destroy(struct keyset **ks)
{
        if (!*ks)
                return;
        /* The hashes are not secrets, but there is no reason to leave them. */
        if ((*ks)->keys)
                OPENSSL_cleanse((*ks)->keys, (*ks)->count * sizeof(struct key_entry));
        free((*ks)->keys);
        free(*ks);
        *ks = NULL;
}

const struct key_entry *keyset_find(const struct keyset *ks, const char *name)
{
        for (size_t i = 0; ks && i < ks->count; i++) {
                if (strcmp(ks->keys[i].name, name) == 0)
                        return &ks->keys[i];
        }
        return NULL;
}

static bool hash_taken(const struct keyset *ks, const unsigned char hash[KEYS_HASH_SIZE])
{
        for (size_t i = 0; i < ks->count; i++) {
                if (memcmp(ks->keys[i].hash, hash, KEYS_HASH_SIZE) == 0)
                        return true;
        }
        return false;
}

const struct key_entry *keyset_match(const struct keyset *ks, const char *key, size_t len)
{
        const struct key_entry *found = NULL;
        unsigned char hash[KEYS_HASH_SIZE];

        if (!ks || sha256(key, len, hash) < 0)
                return NULL;
        /* No early exit: every entry is compared, whichever matches. */
        for (size_t i = 0; i < ks->count; i++) {
                bool same = CRYPTO_memcmp(ks->keys[i].hash, hash, KEYS_HASH_SIZE) == 0;

                if (same && !found)
                        found = &ks->keys[i];
        }
        return found;
}

static int grow(struct keyset *ks)
{
        struct key_entry *more;

        if (ks->count >= KEYS_MAX)
                return -E2BIG;
        more = realloc(ks->keys, (ks->count + 1) * sizeof(*more));
        if (!more)
                return -ENOMEM;
        ks->keys = more;
        memset(&ks->keys[ks->count], 0, sizeof(*more));
        return 0;
}

int keyset_add_admin(struct keyset *ks, const char *name, const char *key)
{
        struct key_entry e = {.admin = true,
                              .max_kernels = KEYS_NO_QUOTA,
                              .max_memory_mb = KEYS_NO_QUOTA,
                              .max_cpu_millicores = KEYS_NO_QUOTA};
        int rc;

        if (!jp_share_name_valid(name))
                return -EINVAL;
        snprintf(e.name, sizeof(e.name), "%s", name);
        rc = sha256(key, strlen(key), e.hash);
        if (rc < 0)
                return rc;
        if (keyset_find(ks, name) || hash_taken(ks, e.hash))
                return -EEXIST;
        rc = grow(ks);
        if (rc < 0)
                return rc;
        ks->keys[ks->count++] = e;
        return 0;
}

/* A quota member: absent or null is none; else a whole number from 0 to
 * max. */
static int quota_of(json_t *entry, const char *member, int64_t max, int64_t *out, char *err,
                    size_t errlen, const char *name)
{
        json_t *v = json_object_get(entry, member);

        *out = KEYS_NO_QUOTA;
        if (!v || json_is_null(v))
                return 0;
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > max) {
                snprintf(err, errlen, "key \"%s\": %s must be a whole number from 0 to %lld", name,
                         member, (long long)max);
                return -EINVAL;
        }
        *out = json_integer_value(v);
        return 0;
}

static int parse_entry(struct keyset *ks, json_t *entry, size_t index, char *err, size_t errlen)
{
        static const char *const members[] = {"name",        "sha256",        "admin",
                                              "max_kernels", "max_memory_mb", "max_cpu_millicores",
                                              "comment"};
        struct key_entry e = {0};
        const char *member, *name, *hex;
        json_t *v, *admin;
        int rc;

        if (!json_is_object(entry)) {
                snprintf(err, errlen, "keys[%zu] must be an object", index);
                return -EINVAL;
        }
        /* A misspelt quota would silently be no quota: refused instead. */
        json_object_foreach(entry, member, v) {
                bool known = false;

                for (size_t i = 0; i < sizeof(members) / sizeof(members[0]); i++)
                        known |= strcmp(member, members[i]) == 0;
                if (!known) {
                        snprintf(err, errlen, "keys[%zu]: unknown member \"%.64s\"", index, member);
                        return -EINVAL;
                }
        }
        name = json_string_value(json_object_get(entry, "name"));
        if (!name || !jp_share_name_valid(name)) {
                snprintf(err, errlen, "keys[%zu]: \"name\" must be 1 to %d of A-Z a-z 0-9 _ . -",
                         index, KEYS_NAME_MAX - 1);
                return -EINVAL;
        }
        snprintf(e.name, sizeof(e.name), "%s", name);
        hex = json_string_value(json_object_get(entry, "sha256"));
        if (!hex || parse_hash(hex, e.hash) < 0) {
                snprintf(err, errlen,
                         "key \"%s\": \"sha256\" must be the key's SHA-256 as 64 hex digits "
                         "(glovebox --hash-key makes it); the file never holds the key itself",
                         name);
                return -EINVAL;
        }
        admin = json_object_get(entry, "admin");
        if (admin && !json_is_boolean(admin)) {
                snprintf(err, errlen, "key \"%s\": \"admin\" must be true or false", name);
                return -EINVAL;
        }
        e.admin = json_is_true(admin);
        rc = quota_of(entry, "max_kernels", 1000000, &e.max_kernels, err, errlen, name);
        if (rc == 0)
                rc = quota_of(entry, "max_memory_mb", (int64_t)1 << 40, &e.max_memory_mb, err,
                              errlen, name);
        if (rc == 0)
                rc = quota_of(entry, "max_cpu_millicores", (int64_t)1 << 40, &e.max_cpu_millicores,
                              err, errlen, name);
        if (rc < 0)
                return rc;
        if (keyset_find(ks, name)) {
                snprintf(err, errlen, "key \"%s\" is named twice", name);
                return -EINVAL;
        }
        if (hash_taken(ks, e.hash)) {
                snprintf(err, errlen, "key \"%s\" has the same sha256 as another key", name);
                return -EINVAL;
        }
        rc = grow(ks);
        if (rc < 0) {
                snprintf(err, errlen, "more than %d keys", KEYS_MAX);
                return rc == -E2BIG ? -EINVAL : rc;
        }
        ks->keys[ks->count++] = e;
        return 0;
}

int keyset_parse(const char *text, size_t len, struct keyset **out, char *err, size_t errlen)
{
        struct keyset *ks = NULL;
        json_error_t jerr;
        json_t *root = NULL, *keys, *entry;
        size_t i;
        int rc = -EINVAL;

        *out = NULL;
        err[0] = '\0';
        if (len > KEYS_FILE_MAX) {
                snprintf(err, errlen, "larger than %d bytes", KEYS_FILE_MAX);
                goto out;
        }
        root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
        if (!root) {
                /* jansson quotes the text near the error: cut, since a
                 * key pasted in by mistake must not reach the log. */
                char *near = strstr(jerr.text, " near ");

                if (near)
                        *near = '\0';
                snprintf(err, errlen, "not JSON: line %d, column %d: %s", jerr.line, jerr.column,
                         jerr.text);
                goto out;
        }
        keys = json_object_get(root, "keys");
        if (!json_is_object(root) || !json_is_array(keys) || json_object_size(root) != 1) {
                snprintf(err, errlen, "must be an object with one member, \"keys\": an array");
                goto out;
        }
        ks = keyset_new();
        if (!ks) {
                rc = -ENOMEM;
                goto out;
        }
        json_array_foreach(keys, i, entry) {
                rc = parse_entry(ks, entry, i, err, errlen);
                if (rc < 0)
                        goto out;
        }
        rc = 0;
        *out = ks;
        ks = NULL;
out:
        keyset_destroy(&ks);
        json_decref(root);
        return rc;
}

int keyset_load(const char *path, struct keyset **out, char *err, size_t errlen)
{
        char *text = malloc(KEYS_FILE_MAX + 1);
        size_t len = 0;
        struct stat st;
        int fd = -1, rc = 0;

        *out = NULL;
        if (!text) {
                rc = -ENOMEM;
                snprintf(err, errlen, "out of memory");
                goto out;
        }
        fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        if (fd < 0 || fstat(fd, &st) < 0) {
                rc = -errno;
                snprintf(err, errlen, "%s", strerror(errno));
                goto out;
        }
        if (!S_ISREG(st.st_mode)) {
                rc = -EINVAL;
                snprintf(err, errlen, "not a regular file");
                goto out;
        }
        /* One byte more than allowed tells a file that is too large. */
        while (len <= KEYS_FILE_MAX) {
                ssize_t n = read(fd, text + len, KEYS_FILE_MAX + 1 - len);

                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0) {
                        rc = -errno;
                        snprintf(err, errlen, "%s", strerror(errno));
                        goto out;
                }
                if (n == 0)
                        break;
                len += (size_t)n;
        }
        rc = keyset_parse(text, len, out, err, errlen);
out:
        if (fd >= 0)
                close(fd);
        free(text);
        return rc;
}
