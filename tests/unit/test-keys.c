/* gateway/core/keys.c: the --keys-file parser (every refusal names what is
 * wrong, and one bad entry refuses the whole file), hashing, and matching
 * a presented key against the stored hashes. */
#include "autoconf.h"

#include "gateway/core/keys.h"
#include "tests/unit/tap.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* SHA-256 of "alice-key-0123456789" and "bob-key-0123456789" (sha256sum). */
#define ALICE_HASH "7bafaa96aa2351e6b7fbc258246b08ee66ade6196c76850108303b1dd6d6eb62"
#define BOB_HASH   "f8596239fe2c5a7d74a70da44c981f5459c078c0060e69b541814edc07d50699"

static struct keyset *parse_ok(const char *text, const char *what)
{
        struct keyset *ks = NULL;
        char err[512] = "";
        int rc = keyset_parse(text, strlen(text), &ks, err, sizeof(err));

        is_int(rc, 0, "%s parses", what);
        if (rc)
                diag("error: %s", err);
        return ks;
}

/* Refused, with a message containing want. */
static void refused(const char *text, const char *want, const char *what)
{
        struct keyset *ks = (struct keyset *)1;
        char err[512] = "";
        int rc = keyset_parse(text, strlen(text), &ks, err, sizeof(err));

        is_int(rc, -EINVAL, "%s is refused", what);
        ok(ks == NULL, "%s: no set", what);
        ok(strstr(err, want) != NULL, "%s: the message names it", what);
        if (!strstr(err, want))
                diag("message: %s (wanted %s)", err, want);
}

static void test_hash(void)
{
        char hex[2 * KEYS_HASH_SIZE + 1];

        is_int(keys_hash_hex("alice-key-0123456789", 20, hex), 0, "hash");
        is_str(hex, ALICE_HASH, "SHA-256 as lowercase hex");
        is_int(keys_hash_hex("bob-key-0123456789", 18, hex), 0, "hash");
        is_str(hex, BOB_HASH, "SHA-256 of another key");
}

static void test_parse(void)
{
        struct keyset *ks =
            parse_ok("{\"keys\": [{\"name\": \"alice\", \"sha256\": \"" ALICE_HASH "\", "
                     "\"max_kernels\": 2, \"max_memory_mb\": 2048, \"max_cpu_millicores\": 1500},"
                     " {\"name\": \"bob.b-2_x\", \"sha256\": \"" BOB_HASH "\", \"admin\": true,"
                     " \"max_kernels\": null, \"comment\": \"ops\"}]}",
                     "two keys");
        const struct key_entry *a, *b;

        if (!ks)
                return;
        is_int((long long)ks->count, 2, "two entries");
        a = keyset_find(ks, "alice");
        b = keyset_find(ks, "bob.b-2_x");
        ok(a && b, "both found by name");
        ok(!keyset_find(ks, "carol"), "an unknown name is not found");
        if (a && b) {
                ok(!a->admin && b->admin, "admin flags");
                is_int(a->max_kernels, 2, "alice max_kernels");
                is_int(a->max_memory_mb, 2048, "alice max_memory_mb");
                is_int(a->max_cpu_millicores, 1500, "alice max_cpu_millicores");
                is_int(b->max_kernels, KEYS_NO_QUOTA, "null is no quota");
                is_int(b->max_memory_mb, KEYS_NO_QUOTA, "absent is no quota");
        }
        ok(keyset_match(ks, "alice-key-0123456789", 20) == a, "alice's key matches alice");
        ok(keyset_match(ks, "bob-key-0123456789", 18) == b, "bob's key matches bob");
        ok(keyset_match(ks, "alice-key-012345678", 19) == NULL, "a prefix matches nobody");
        ok(keyset_match(ks, ALICE_HASH, strlen(ALICE_HASH)) == NULL,
           "the hash itself is not a key");
        ok(keyset_match(ks, "", 0) == NULL, "an empty key matches nobody");
        is_int(keyset_add_admin(ks, "admin", "the-token-0123456789"), 0, "the token is added");
        ok(keyset_match(ks, "the-token-0123456789", 20) == keyset_find(ks, "admin"),
           "the token matches admin");
        ok(keyset_find(ks, "admin")->admin, "the token's key is an admin");
        is_int(keyset_add_admin(ks, "alice", "other-token-0123456789"), -EEXIST,
               "the token cannot take a name in use");
        is_int(keyset_add_admin(ks, "admin2", "alice-key-0123456789"), -EEXIST, "nor a key in use");
        keyset_destroy(&ks);
        ok(ks == NULL, "destroy nulls the pointer");

        ks = parse_ok("{\"keys\": []}", "no keys");
        is_int(ks ? (long long)ks->count : -1, 0, "an empty set");
        keyset_destroy(&ks);
        ks = parse_ok("{\"keys\": [{\"name\": \"u\", \"sha256\": \""
                      "7BAFAA96AA2351E6B7FBC258246B08EE66ADE6196C76850108303B1DD6D6EB62\"}]}",
                      "upper-case hex");
        ok(ks && keyset_match(ks, "alice-key-0123456789", 20), "upper-case hex matches too");
        keyset_destroy(&ks);
}

static void test_refusals(void)
{
        refused("", "not JSON", "an empty file");
        refused("{\"keys\": [", "not JSON", "cut-off JSON");
        refused("[]", "\"keys\"", "a top-level array");
        refused("{\"keys\": {}}", "\"keys\"", "keys not an array");
        refused("{\"keys\": [], \"other\": 1}", "one member", "an extra top-level member");
        refused("{\"keys\": [\"x\"]}", "keys[0] must be an object", "an entry not an object");
        refused("{\"keys\": [{\"sha256\": \"" ALICE_HASH "\"}]}", "\"name\"", "no name");
        refused("{\"keys\": [{\"name\": \"a b\", \"sha256\": \"" ALICE_HASH "\"}]}", "\"name\"",
                "a name with a space");
        refused("{\"keys\": [{\"name\": \"\", \"sha256\": \"" ALICE_HASH "\"}]}", "\"name\"",
                "an empty name");
        refused("{\"keys\": [{\"name\": "
                "\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\", "
                "\"sha256\": \"" ALICE_HASH "\"}]}",
                "\"name\"", "a name of 65 characters");
        refused("{\"keys\": [{\"name\": \"a\"}]}", "sha256", "no hash");
        refused("{\"keys\": [{\"name\": \"a\", \"sha256\": \"alice-key-0123456789\"}]}",
                "never holds the key itself", "the key instead of its hash");
        refused("{\"keys\": [{\"name\": \"a\", \"sha256\": \"" ALICE_HASH "0\"}]}", "64 hex",
                "65 digits");
        refused("{\"keys\": [{\"name\": \"a\", \"sha256\": "
                "\"zbafaa96aa2351e6b7fbc258246b08ee66ade6196c76850108303b1dd6d6eb62\"}]}",
                "64 hex", "a non-hex digit");
        refused("{\"keys\": [{\"name\": \"a\", \"sha256\": \"" ALICE_HASH "\", \"admin\": 1}]}",
                "\"admin\"", "admin not a boolean");
        refused("{\"keys\": [{\"name\": \"a\", \"sha256\": \"" ALICE_HASH "\", "
                "\"max_kernels\": -1}]}",
                "max_kernels", "a negative quota");
        refused("{\"keys\": [{\"name\": \"a\", \"sha256\": \"" ALICE_HASH "\", "
                "\"max_memory_mb\": 1.5}]}",
                "max_memory_mb", "a fractional quota");
        refused("{\"keys\": [{\"name\": \"a\", \"sha256\": \"" ALICE_HASH "\", "
                "\"max_cpu_millicores\": \"2000\"}]}",
                "max_cpu_millicores", "a quota as a string");
        refused("{\"keys\": [{\"name\": \"a\", \"sha256\": \"" ALICE_HASH "\", "
                "\"max_kernel\": 2}]}",
                "unknown member \"max_kernel\"", "a misspelt quota");
        refused("{\"keys\": [{\"name\": \"a\", \"sha256\": \"" ALICE_HASH "\"}, "
                "{\"name\": \"a\", \"sha256\": \"" BOB_HASH "\"}]}",
                "named twice", "a name twice");
        refused("{\"keys\": [{\"name\": \"a\", \"sha256\": \"" ALICE_HASH "\"}, "
                "{\"name\": \"b\", \"sha256\": \"" ALICE_HASH "\"}]}",
                "same sha256", "a hash twice");
        refused("{\"keys\": [e2b_0123456789abcdef]}", "not JSON: line 1", "a bare key");
        {
                struct keyset *ks = NULL;
                char err[512] = "";
                /* jansson quotes the token it stopped at: a key of digits. */
                const char text[] = "{\"keys\": [{\"sha256\" 8123456789012345}]}";

                keyset_parse(text, sizeof(text) - 1, &ks, err, sizeof(err));
                ok(strstr(err, "8123456789012345") == NULL, "the message never quotes the file");
                if (strstr(err, "8123456789012345"))
                        diag("message: %s", err);
        }
        refused("{\"keys\": [{\"name\": \"a\", \"name\": \"b\", \"sha256\": \"" ALICE_HASH "\"}]}",
                "not JSON", "a duplicate member");
}

static void test_limits(void)
{
        size_t size = KEYS_FILE_MAX + 1;
        char *big = malloc(size + 1);
        struct keyset *ks = NULL;
        char err[256];

        if (!big)
                BAIL_OUT("malloc");
        memset(big, ' ', size);
        big[size] = '\0';
        is_int(keyset_parse(big, size, &ks, err, sizeof(err)), -EINVAL, "a file over the maximum");
        ok(strstr(err, "larger than") != NULL, "says it is too large");
        free(big);
}

static void test_load(void)
{
        char path[] = "/tmp/glovebox-test-keys-XXXXXX";
        const char text[] = "{\"keys\": [{\"name\": \"alice\", \"sha256\": \"" ALICE_HASH "\"}]}";
        struct keyset *ks = NULL;
        char err[256] = "";
        int fd = mkstemp(path);

        if (fd < 0 || write(fd, text, sizeof(text) - 1) != (ssize_t)(sizeof(text) - 1))
                BAIL_OUT("cannot write %s", path);
        close(fd);
        is_int(keyset_load(path, &ks, err, sizeof(err)), 0, "a file loads");
        ok(ks && keyset_match(ks, "alice-key-0123456789", 20), "and its key matches");
        keyset_destroy(&ks);
        unlink(path);
        is_int(keyset_load(path, &ks, err, sizeof(err)), -ENOENT, "a missing file");
        is_int(keyset_load("/tmp", &ks, err, sizeof(err)), -EINVAL, "a directory");
        is_str(err, "not a regular file", "says what it is not");
}

int main(void)
{
        test_hash();
        test_parse();
        test_refusals();
        test_limits();
        test_load();
        return done_testing();
}
