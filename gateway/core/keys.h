/* API keys and what each may hold: the --keys-file the operator manages.
 * A key is stored as its SHA-256 only, so that the file (and the gateway's
 * memory) never holds a key anyone could present. The file is JSON:
 *
 *   {"keys": [{"name": "alice", "sha256": "<64 hex digits>",
 *              "admin": false, "max_kernels": 4, "max_memory_mb": 4096,
 *              "max_cpu_millicores": 4000}]}
 *
 * name and sha256 are required; a quota left out is no quota. This module
 * parses and matches; gateway/core/tenants.h keeps the set in force. */
#ifndef GLOVEBOX_KEYS_H
#define GLOVEBOX_KEYS_H

#include "protocol/share.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KEYS_NAME_MAX  JP_SHARE_NAME_SIZE /* a name's bytes, with its NUL (jp_share_name_valid) */
#define KEYS_FILE_MAX  (1 << 20) /* a keys file's bytes */
#define KEYS_MAX       4096      /* keys in one file */
#define KEYS_HASH_SIZE 32
#define KEYS_NO_QUOTA  (-1)

struct key_entry {
        char name[KEYS_NAME_MAX];
        unsigned char hash[KEYS_HASH_SIZE];
        bool admin;
        int64_t max_kernels;        /* KEYS_NO_QUOTA: none */
        int64_t max_memory_mb;      /* summed over the tenant's live kernels */
        int64_t max_cpu_millicores; /* likewise */
};

struct keyset {
        struct key_entry *keys;
        size_t count;
};

/* Parses a keys file's text (len bytes, at most KEYS_FILE_MAX). On success
 * *out is a new set the caller frees with keyset_destroy; -EINVAL with err
 * filled when anything in it is wrong (the whole file is refused). */
int keyset_parse(const char *text, size_t len, struct keyset **out, char *err, size_t errlen);
/* Reads and parses the file at path; -errno or -EINVAL with err filled. */
int keyset_load(const char *path, struct keyset **out, char *err, size_t errlen);
/* An empty set (for the token alone); NULL when out of memory. */
struct keyset *keyset_new(void);
/* Adds the key (its hash is stored, not the key) as an admin without
 * quotas, under name: -EEXIST when the name or the key is taken. */
int keyset_add_admin(struct keyset *ks, const char *name, const char *key);
/* The entry whose key is key (len bytes), or NULL. Every entry is compared
 * in constant time, so the time taken says nothing about which matched. */
const struct key_entry *keyset_match(const struct keyset *ks, const char *key, size_t len);
/* The entry named name, or NULL. */
const struct key_entry *keyset_find(const struct keyset *ks, const char *name);
/* The lowercase hex SHA-256 of key (len bytes): what a keys file holds. */
int keys_hash_hex(const char *key, size_t len, char out[2 * KEYS_HASH_SIZE + 1]);
void keyset_destroy(struct keyset **ks);

#endif
