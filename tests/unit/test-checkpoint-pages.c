/* kernel-host/checkpoint_pages.c: a checkpoint's memory pages compressed
 * with zstd (Debian's program, really run) and decompressed for a restore
 * into an image directory of its own. Names of the three forms; the
 * sizes recorded at the dump; a compaction that leaves exactly one whole
 * copy; a restore that gets the same bytes back, prefers a plain file
 * where both are, and refuses a compressed file that does not expand to
 * exactly its recorded size (one that would expand past it is stopped at
 * it); leftovers of a killed compaction removed; random pages, which zstd
 * cannot shrink, kept plain and not tried again. */
#include "kernel-host/checkpoint_pages.c"

#include "tests/unit/tap.h"
#include "tests/unit/tmpdir.h"

#include <sys/stat.h>

static char root[] = "/tmp/glovebox-pages-XXXXXX";

static void test_forms(void)
{
        static const struct {
                const char *name;
                enum checkpoint_pages_form form;
                const char *base;
        } cases[] = {
            {"pages-1.img", PAGES_PLAIN, "pages-1.img"},
            {"pages-12.img.zst", PAGES_COMPRESSED, "pages-12.img"},
            {"pages-3.img.zst.tmp", PAGES_PARTIAL, "pages-3.img"},
            {"pages-.img", PAGES_NOT, ""},
            {"pages-a.img", PAGES_NOT, ""},
            {"pages-1.img.gz", PAGES_NOT, ""},
            {"pages-1.imgx", PAGES_NOT, ""},
            {"pages-1.img.zst.tmp.x", PAGES_NOT, ""},
            {"pagemap-1.img", PAGES_NOT, ""},
            {"xpages-1.img", PAGES_NOT, ""},
            {"pages-12345678901.img", PAGES_NOT, ""},
            {"pages.json", PAGES_NOT, ""},
        };

        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                char base[NAME_MAX + 1] = "";

                is_int(checkpoint_pages_form(cases[i].name, base, sizeof(base)), cases[i].form,
                       "%s: its form", cases[i].name);
                is_str(base, cases[i].base, "%s: its base name", cases[i].name);
        }
}

/* Writes size bytes to name in dir_fd: a heap-like pattern (repeats
 * compress well) with some noise. */
static void write_file(int dir_fd, const char *name, size_t size)
{
        unsigned char *data = malloc(size);
        int fd = openat(dir_fd, name, O_WRONLY | O_CREAT | O_TRUNC, 0600);

        for (size_t i = 0; i < size; i++)
                data[i] = i % 4096 < 3000 ? (unsigned char)(i % 251) : (unsigned char)rand();
        if (fd < 0 || write(fd, data, size) != (ssize_t)size)
                diag("cannot write %s", name);
        close(fd);
        free(data);
}

static bool same_contents(int a_fd, const char *a, int b_fd, const char *b)
{
        char x[65536], y[65536];
        int fa = openat(a_fd, a, O_RDONLY), fb = openat(b_fd, b, O_RDONLY);
        bool same = fa >= 0 && fb >= 0;
        ssize_t n, m;

        while (same && (n = read(fa, x, sizeof(x))) > 0) {
                m = read(fb, y, (size_t)n);
                same = m == n && memcmp(x, y, (size_t)n) == 0;
        }
        same = same && read(fb, y, 1) == 0;
        if (fa >= 0)
                close(fa);
        if (fb >= 0)
                close(fb);
        return same;
}

static off_t size_of(int dir_fd, const char *name)
{
        struct stat st;

        return fstatat(dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 ? st.st_size : -1;
}

/* A fresh image directory called name in dir_fd. */
static int images_dir(int dir_fd, const char *name)
{
        mkdirat(dir_fd, name, 0711);
        return openat(dir_fd, name, O_RDONLY | O_DIRECTORY);
}

/* Rewrites the record with base's size as size. */
static void record_with(int dir_fd, const char *base, long long size)
{
        json_t *sizes = checkpoint_pages_sizes(dir_fd);
        char *text;
        int fd;

        if (!sizes)
                sizes = json_object();
        json_object_set_new(sizes, base, json_integer(size));
        text = json_dumps(sizes, JSON_COMPACT);
        unlinkat(dir_fd, CHECKPOINT_PAGES_RECORD, 0);
        fd = openat(dir_fd, CHECKPOINT_PAGES_RECORD, O_WRONLY | O_CREAT, 0644);
        if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text))
                diag("cannot rewrite the record");
        close(fd);
        free(text);
        json_decref(sizes);
}

static void test_round_trip(int dir_fd)
{
        const size_t big = 3 << 20, small = 8192;
        json_t *sizes;
        int images;

        write_file(dir_fd, "pages-1.img", big);
        write_file(dir_fd, "pages-2.img", small);
        write_file(dir_fd, "core-1.img", 100);
        write_file(dir_fd, "keep-1.img", big);
        is_int(checkpoint_pages_record(dir_fd), 0, "the dump records the page files");
        sizes = checkpoint_pages_sizes(dir_fd);
        ok(json_object_size(sizes) == 2 &&
               json_integer_value(json_object_get(sizes, "pages-1.img")) == (json_int_t)big &&
               json_integer_value(json_object_get(sizes, "pages-2.img")) == (json_int_t)small,
           "the record holds each page file's size, and nothing else");
        json_decref(sizes);
        ok(checkpoint_pages_pending(dir_fd), "plain recorded pages are pending");
        ok(!checkpoint_pages_compressed(dir_fd), "nothing is compressed yet");

        /* What each is kept as, to compare after. */
        mkdirat(dir_fd, "orig", 0700);
        images = openat(dir_fd, "orig", O_RDONLY | O_DIRECTORY);
        ok(linkat(dir_fd, "pages-1.img", images, "pages-1.img", 0) == 0 &&
               linkat(dir_fd, "pages-2.img", images, "pages-2.img", 0) == 0,
           "the originals kept aside");

        is_int(checkpoint_pages_compress_all(dir_fd), 0, "the compaction succeeds");
        ok(size_of(dir_fd, "pages-1.img") < 0 && size_of(dir_fd, "pages-2.img") < 0,
           "the plain files are gone");
        ok(size_of(dir_fd, "pages-1.img.zst") > 0 &&
               size_of(dir_fd, "pages-1.img.zst") < (off_t)big / 2,
           "the compressed one is whole and smaller (%lld of %zu bytes)",
           (long long)size_of(dir_fd, "pages-1.img.zst"), big);
        ok(size_of(dir_fd, "pages-1.img.zst.tmp") < 0, "no .tmp is left");
        ok(size_of(dir_fd, "core-1.img") == 100 && size_of(dir_fd, "keep-1.img") == (off_t)big,
           "other images are not touched");
        ok(!checkpoint_pages_pending(dir_fd), "nothing is pending after");
        ok(checkpoint_pages_compressed(dir_fd), "a restore must decompress");

        {
                int fresh = images_dir(dir_fd, "copy-a");

                is_int(checkpoint_pages_expand(dir_fd, fresh), 0, "the restore decompresses");
                ok(same_contents(images, "pages-1.img", fresh, "pages-1.img") &&
                       same_contents(images, "pages-2.img", fresh, "pages-2.img"),
                   "the same bytes come back");
                ok(size_of(dir_fd, "pages-1.img.zst") > 0 && size_of(dir_fd, "pages-1.img") < 0,
                   "the checkpoint itself is not changed by the restore");
                close(fresh);
        }
        close(images);
        close(images_dir(dir_fd, "copy-g"));
        is_int(checkpoint_pages_expand_for(dir_fd, "g"), 0, "a restore's own directory by id");
        images = openat(dir_fd, "copy-g", O_RDONLY | O_DIRECTORY);
        ok(size_of(images, "pages-1.img") == (off_t)big, "decompressed there");
        close(images);
}

static void test_prefers_plain(int dir_fd)
{
        int images = images_dir(dir_fd, "copy-b");

        /* As checkpoint_copy_images links them: the .img wins. */
        is_int(symlinkat("../orig/pages-1.img", images, "pages-1.img"), 0, "a plain one linked");
        is_int(checkpoint_pages_expand(dir_fd, images), 0, "expands with a plain one there");
        ok(size_of(images, "pages-1.img") == (off_t)strlen("../orig/pages-1.img"),
           "the plain one (a link) is left as it is");
        ok(size_of(images, "pages-2.img") == 8192, "the other one is decompressed");
        close(images);
}

static void test_bounds(int dir_fd)
{
        const long long big = 3 << 20;
        int images;

        record_with(dir_fd, "pages-1.img", big - 1);
        images = images_dir(dir_fd, "copy-c");
        is_int(checkpoint_pages_expand(dir_fd, images), -EBADMSG,
               "a file that expands past its recorded size is refused");
        ok(size_of(images, "pages-1.img") < 0, "and nothing of it is left");
        close(images);

        record_with(dir_fd, "pages-1.img", big + 1);
        images = images_dir(dir_fd, "copy-d");
        is_int(checkpoint_pages_expand(dir_fd, images), -EBADMSG,
               "one that expands short of it is refused");
        ok(size_of(images, "pages-1.img") < 0, "and nothing of it is left");
        close(images);

        record_with(dir_fd, "pages-1.img", big);
        unlinkat(dir_fd, CHECKPOINT_PAGES_RECORD, 0);
        images = images_dir(dir_fd, "copy-e");
        is_int(checkpoint_pages_expand(dir_fd, images), -EBADMSG,
               "without a record nothing is decompressed");
        close(images);
        record_with(dir_fd, "pages-1.img", big);
}

/* A .zst that would expand to 64 MiB, recorded as 4 KiB: zstd is stopped
 * at 4 KiB (RLIMIT_FSIZE), not after writing the rest. */
static void test_bomb(int dir_fd)
{
        int zeros = openat(dir_fd, "zeros", O_RDWR | O_CREAT | O_TRUNC, 0600);
        int bomb = openat(dir_fd, "pages-9.img.zst", O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int images;

        if (zeros < 0 || ftruncate(zeros, 64 << 20) < 0 || bomb < 0)
                diag("cannot make the bomb");
        is_int(run_zstd("-1", zeros, bomb, UINT64_MAX), 0, "a 64 MiB run of zeros compressed");
        close(zeros);
        close(bomb);
        unlinkat(dir_fd, "zeros", 0);
        bomb = openat(dir_fd, "pages-9.img.zst", O_RDONLY);
        zeros = openat(dir_fd, "out", O_WRONLY | O_CREAT | O_TRUNC, 0600);
        is_int(run_zstd("-d", bomb, zeros, 4096), -EIO, "zstd fails at its bound");
        is_int((int)size_of(dir_fd, "out"), 4096, "having written exactly the bound");
        close(bomb);
        close(zeros);
        unlinkat(dir_fd, "out", 0);
        record_with(dir_fd, "pages-9.img", 4096);
        images = images_dir(dir_fd, "copy-f");
        is_int(checkpoint_pages_expand(dir_fd, images), -EBADMSG, "the bomb is refused");
        ok(size_of(images, "pages-9.img") < 0, "and nothing of it is left");
        close(images);
        unlinkat(dir_fd, "pages-9.img.zst", 0);
}

/* Random bytes: zstd cannot shrink them, and a restore would pay for
 * decompressing them for nothing. */
static void test_incompressible(int parent_fd)
{
        int dir_fd = images_dir(parent_fd, "random"), fd;
        unsigned char data[1 << 16];

        for (size_t i = 0; i < sizeof(data); i++)
                data[i] = (unsigned char)rand();
        fd = openat(dir_fd, "pages-1.img", O_WRONLY | O_CREAT | O_TRUNC, 0600);
        ok(fd >= 0 && write(fd, data, sizeof(data)) == (ssize_t)sizeof(data), "random pages");
        close(fd);
        is_int(checkpoint_pages_record(dir_fd), 0, "recorded");
        is_int(checkpoint_pages_compress_all(dir_fd), 0, "the compaction succeeds");
        ok(size_of(dir_fd, "pages-1.img") == (off_t)sizeof(data) &&
               size_of(dir_fd, "pages-1.img.zst") < 0 && size_of(dir_fd, "pages-1.img.zst.tmp") < 0,
           "but keeps random pages plain, nothing else left");
        ok(kept_plain(dir_fd, "pages-1.img"), "marked as not worth compressing");
        ok(!checkpoint_pages_pending(dir_fd), "so no compaction tries it again");
        ok(!checkpoint_pages_compressed(dir_fd), "and a restore reads it as it is");
        ok(too_little_saved(800, 701) && !too_little_saved(800, 700),
           "worth it from an eighth saved");
        close(dir_fd);
}

static void test_stale_and_partial(int dir_fd)
{
        write_file(dir_fd, "pages-5.img", 5000);
        record_with(dir_fd, "pages-5.img", 4000);
        is_int(checkpoint_pages_compress(dir_fd, "pages-5.img", 4000), -ESTALE,
               "a page file not of its recorded size is not compressed");
        ok(size_of(dir_fd, "pages-5.img") == 5000 && size_of(dir_fd, "pages-5.img.zst") < 0,
           "and is left as it was");
        write_file(dir_fd, "pages-6.img.zst.tmp", 10);
        write_file(dir_fd, "pages-7.img.zst.tmp", 10);
        checkpoint_pages_remove_partial(dir_fd);
        ok(size_of(dir_fd, "pages-6.img.zst.tmp") < 0 && size_of(dir_fd, "pages-7.img.zst.tmp") < 0,
           "a killed compaction's .tmp files are removed");
        ok(size_of(dir_fd, "pages-1.img.zst") > 0 && size_of(dir_fd, "pages-5.img") == 5000,
           "and nothing else");
}

int main(void)
{
        int dir_fd;

        test_forms();
        if (!mkdtemp(root)) {
                diag("mkdtemp failed");
                return done_testing();
        }
        dir_fd = open(root, O_RDONLY | O_DIRECTORY);
        if (access("/usr/bin/zstd", X_OK) != 0) {
                diag("skipped: no zstd program (scripts/test installs it)");
        } else {
                test_round_trip(dir_fd);
                test_prefers_plain(dir_fd);
                test_bounds(dir_fd);
                test_bomb(dir_fd);
                test_stale_and_partial(dir_fd);
                test_incompressible(dir_fd);
        }
        close(dir_fd);
        tmpdir_remove(root);
        return done_testing();
}
