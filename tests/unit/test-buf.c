/* protocol/buf.c: the bounded byte buffer every untrusted input goes through. */
#include "autoconf.h"

#include "protocol/buf.h"
#include "tests/unit/tap.h"

#include <errno.h>
#include <jansson.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static void test_append_and_limit(void)
{
        struct buf b;

        buf_init(&b, 10);
        ok(b.data == NULL && b.len == 0, "a new buffer is empty and unallocated");
        is_int(buf_append(&b, "hello", 5), 0, "append within the maximum");
        is_mem(b.data, b.len, "hello", 5, "content after one append");
        is_int(b.data[b.len], '\0', "data is NUL-terminated");
        is_int(buf_append_str(&b, "world"), 0, "append up to exactly the maximum");
        is_mem(b.data, b.len, "helloworld", 10, "content at the maximum");
        is_int(buf_append(&b, "!", 1), -E2BIG, "one byte past the maximum is refused");
        is_mem(b.data, b.len, "helloworld", 10, "a refused append leaves the content alone");
        is_int(buf_append(&b, "", 0), 0, "an empty append at the maximum succeeds");
        is_int(buf_append(&b, NULL, 0), 0, "an empty append may pass NULL");
        buf_free(&b);
        ok(b.data == NULL && b.len == 0 && b.cap == 0, "buf_free empties the buffer");

        buf_init(&b, 16);
        is_int(buf_append(&b, "x", SIZE_MAX), -E2BIG, "a length of SIZE_MAX is refused");
        is_int(buf_append(&b, "abc", 3), 0, "append after a refusal");
        is_int(buf_append(&b, "x", SIZE_MAX - 1), -E2BIG,
               "a length that would overflow len is refused");
        is_uint(b.len, 3, "len unchanged by refusals");
        buf_free(&b);
}

static void test_growth(void)
{
        struct buf b;
        size_t bad = 0;

        buf_init(&b, 1 << 20);
        for (size_t i = 0; i < 100000; i++) {
                char c = (char)('a' + i % 26);

                if (buf_append(&b, &c, 1) < 0)
                        bad++;
        }
        is_uint(bad, 0, "100000 one-byte appends succeed");
        is_uint(b.len, 100000, "length after growth");
        ok(b.cap > b.len, "capacity leaves room for the terminator");
        bad = 0;
        for (size_t i = 0; i < b.len; i++)
                bad += b.data[i] != (char)('a' + i % 26);
        is_uint(bad, 0, "content survives reallocation");
        buf_free(&b);
}

static void test_grow_reset_steal(void)
{
        struct buf b;
        char *p = NULL;
        char *stolen;
        size_t len = 0;
        size_t cap;

        buf_init(&b, 64);
        is_int(buf_append(&b, "ab", 2), 0, "append before grow");
        is_int(buf_grow(&b, 3, &p), 0, "grow by 3");
        ok(p == b.data + 2, "grow returns the end of the old content");
        is_uint(b.len, 5, "grow adds to len");
        is_int(b.data[5], '\0', "grow keeps the terminator");
        memcpy(p, "cde", 3);
        is_mem(b.data, b.len, "abcde", 5, "grown bytes are writable in place");
        is_int(buf_grow(&b, 60, &p), -E2BIG, "grow past the maximum is refused");
        is_uint(b.len, 5, "a refused grow leaves len alone");

        cap = b.cap;
        buf_reset(&b);
        ok(b.len == 0 && b.data && b.data[0] == '\0' && b.cap == cap,
           "reset empties the content but keeps the storage");
        is_int(buf_append_str(&b, "again"), 0, "append after reset");
        stolen = buf_steal(&b, &len);
        is_mem(stolen, len, "again", 5, "steal hands over the content");
        is_int(stolen[len], '\0', "stolen data is NUL-terminated");
        ok(b.data == NULL && b.len == 0 && b.cap == 0, "steal leaves the buffer empty");
        free(stolen);
        is_int(buf_append_str(&b, "reuse"), 0, "buffer usable after steal");
        is_mem(b.data, b.len, "reuse", 5, "content after reuse");
        buf_free(&b);
}

static void test_printf(void)
{
        struct buf b;

        buf_init(&b, 20);
        is_int(buf_printf(&b, "%d-%s", 42, "x"), 0, "printf within the maximum");
        is_mem(b.data, b.len, "42-x", 4, "printf output");
        is_int(buf_printf(&b, "%s", "0123456789abcdef"), 0, "printf up to exactly the maximum");
        is_uint(b.len, 20, "length at the maximum");
        is_int(buf_printf(&b, "%c", 'z'), -E2BIG, "printf past the maximum is refused");
        is_mem(b.data, b.len, "42-x0123456789abcdef", 20, "a refused printf changes nothing");
        buf_free(&b);
}

/* Encodes s as a JSON string and parses it back with jansson. */
static void check_json_string(const char *s, size_t len, const char *expect, const char *name)
{
        struct buf b;
        json_t *j;
        char *doc;

        buf_init(&b, 4096);
        is_int(buf_append_json_string(&b, s, len), 0, "%s: encodes", name);
        if (expect)
                is_mem(b.data, b.len, expect, strlen(expect), "%s: exact encoding", name);
        /* Wrapped in an array: a bare string is not a JSON document for jansson. */
        doc = malloc(b.len + 3);
        doc[0] = '[';
        memcpy(doc + 1, b.data, b.len);
        doc[b.len + 1] = ']';
        doc[b.len + 2] = '\0';
        j = json_loadb(doc, b.len + 2, JSON_ALLOW_NUL, NULL);
        ok(json_is_string(json_array_get(j, 0)) &&
               json_string_length(json_array_get(j, 0)) == len &&
               memcmp(json_string_value(json_array_get(j, 0)), s, len) == 0,
           "%s: jansson reads back the same bytes", name);
        json_decref(j);
        free(doc);
        buf_free(&b);
}

static void test_json_string(void)
{
        struct buf b;

        check_json_string("plain", 5, "\"plain\"", "plain text");
        check_json_string("", 0, "\"\"", "empty string");
        check_json_string("a\"b\\c", 5, "\"a\\\"b\\\\c\"", "quote and backslash");
        check_json_string("\n\t\x01\x1f", 4, "\"\\u000a\\u0009\\u0001\\u001f\"",
                          "control characters");
        check_json_string("a\0b", 3, "\"a\\u0000b\"", "embedded NUL");
        check_json_string("h\xc3\xa9llo \xe2\x98\x83", 10, "\"h\xc3\xa9llo \xe2\x98\x83\"",
                          "UTF-8 passes through");
        check_json_string("/\x7f", 2, "\"/\x7f\"", "slash and DEL stay as they are");

        buf_init(&b, 5);
        is_int(buf_append_json_string(&b, "abcd", 4), -E2BIG,
               "a JSON string that does not fit is refused");
        buf_free(&b);
        buf_init(&b, 8);
        is_int(buf_append_json_string(&b, "\n\n", 2), -E2BIG, "escapes count against the maximum");
        buf_free(&b);
}

static void check_base64(const char *raw, size_t len, const char *encoded)
{
        struct buf b, back;

        buf_init(&b, SIZE_MAX);
        buf_init(&back, SIZE_MAX);
        is_int(buf_append_base64(&b, (const uint8_t *)raw, len), 0, "%zu bytes encode", len);
        is_str(b.data ? b.data : "", encoded, "%zu bytes as RFC 4648 base64", len);
        is_int(buf_append_unbase64(&back, b.data ? b.data : ""), 0, "%s decodes", encoded);
        ok(back.len == len && (len == 0 || memcmp(back.data, raw, len) == 0),
           "%s decodes to the same %zu bytes (got %zu)", encoded, len, back.len);
        buf_free(&b);
        buf_free(&back);
}

static void test_base64(void)
{
        struct buf b;

        check_base64("", 0, "");
        check_base64("f", 1, "Zg==");
        check_base64("fo", 2, "Zm8=");
        check_base64("foo", 3, "Zm9v");
        check_base64("foobar", 6, "Zm9vYmFy");
        check_base64("\xff\xfe\x00\x3e\x3f", 5, "//4APj8=");

        buf_init(&b, SIZE_MAX);
        is_int(buf_append_unbase64(&b, "__4APj8"), 0, "the URL alphabet, unpadded, decodes");
        ok(b.len == 5 && memcmp(b.data, "\xff\xfe\x00\x3e\x3f", 5) == 0,
           "to the same bytes as the standard one");
        buf_reset(&b);
        is_int(buf_append_unbase64(&b, "Zm9v!"), -EINVAL, "a character of neither alphabet");
        buf_free(&b);
        buf_init(&b, 7);
        is_int(buf_append_base64(&b, (const uint8_t *)"foobar", 6), -E2BIG,
               "an encoding past the maximum is refused");
        buf_free(&b);
        buf_init(&b, 2);
        is_int(buf_append_unbase64(&b, "Zm9v"), -E2BIG, "a decoding past the maximum is refused");
        buf_free(&b);
}

/* A file's JSON read whole: longer than one read's 64 KiB, from the
 * descriptor's offset, up to exactly its maximum and refused one byte past
 * it; what is not JSON is refused with jansson's reason. */
static void test_json_read_fd(void)
{
        int fd = memfd_create("json", MFD_CLOEXEC);
        json_error_t err;
        struct buf text;
        json_t *doc;
        size_t len;

        buf_init(&text, 1 << 20);
        buf_append_str(&text, "[");
        for (int i = 0; i < 20000; i++)
                buf_printf(&text, "%s\"item %d\"", i ? "," : "", i);
        buf_append_str(&text, "]");
        len = text.len;
        ok(fd >= 0 && write(fd, text.data, len) == (ssize_t)len, "a document of %zu bytes", len);
        lseek(fd, 0, SEEK_SET);
        doc = json_read_fd(fd, len, 0, &err);
        ok(json_is_array(doc) && json_array_size(doc) == 20000 &&
               strcmp(json_string_value(json_array_get(doc, 19999)), "item 19999") == 0,
           "read whole at exactly its maximum");
        json_decref(doc);
        lseek(fd, 0, SEEK_SET);
        doc = json_read_fd(fd, len - 1, 0, &err);
        ok(!doc && strstr(err.text, "limit"), "one byte past the maximum is refused (%s)",
           err.text);
        lseek(fd, 0, SEEK_SET);
        is_int(ftruncate(fd, 0), 0, "emptied");
        ok(write(fd, "xx{\"a\": 1}", 10) == 10 && lseek(fd, 2, SEEK_SET) == 2,
           "a document after two bytes of something else");
        doc = json_read_fd(fd, 64, 0, NULL);
        ok(json_integer_value(json_object_get(doc, "a")) == 1, "read from the offset on");
        json_decref(doc);
        lseek(fd, 0, SEEK_SET);
        doc = json_read_fd(fd, 64, 0, &err);
        ok(!doc && err.text[0], "what is not JSON is refused (%s)", err.text);
        doc = json_read_fd(-1, 64, 0, &err);
        ok(!doc && strstr(err.text, "Bad file"), "an error of read(2) is said (%s)", err.text);
        buf_free(&text);
        close(fd);
}

int main(void)
{
        test_json_read_fd();
        test_append_and_limit();
        test_growth();
        test_grow_reset_steal();
        test_printf();
        test_json_string();
        test_base64();
        return done_testing();
}
