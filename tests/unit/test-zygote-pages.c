/* The pages a zygote kernel's start writes, copied ahead
 * (kernel-host/zygote_pages.c): this process plays the zygote, its
 * children the kernels and the processes forked ahead. */
#include "kernel-host/zygote_pages.c"

#include "tests/unit/tap.h"

#include <sys/stat.h>
#include <sys/wait.h>

#define NPAGES 64

static size_t pg;

/* Pages of this process's own, present before any fork (so shared with a
 * child until one writes them). */
static char *touched_area(size_t pages)
{
        char *p = mmap(NULL, (pages + 1) * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                       -1, 0);

        if (p == MAP_FAILED)
                return NULL;
        /* A page no one may write after it: its mapping ends there. */
        mprotect(p + pages * pg, pg, PROT_NONE);
        /* 4 KiB pages throughout, as the zygote's are once a kernel writes. */
        madvise(p, pages * pg, MADV_NOHUGEPAGE);
        memset(p, 1, pages * pg);
        return p;
}

/* The pages of [p, p + len) the ranges cover. */
static size_t covered(const struct zygote_pages_range *r, size_t n, const char *p, size_t len)
{
        uint64_t from = (uint64_t)(uintptr_t)p, to = from + len;
        size_t pages = 0;

        for (size_t i = 0; i < n; i++) {
                uint64_t a = r[i].start > from ? r[i].start : from;
                uint64_t b = r[i].start + r[i].len < to ? r[i].start + r[i].len : to;

                if (b > a)
                        pages += (size_t)((b - a) / pg);
        }
        return pages;
}

/* Runs fn in a child; its exit status (a number it found), or -1. */
static int in_child(int (*fn)(void *), void *arg)
{
        int status;
        pid_t pid = fork();

        if (pid == 0)
                _exit(fn(arg) & 0xff);
        if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
                return -1;
        return WEXITSTATUS(status);
}

static char *shared_area, *other_area;
static struct zygote_pages_range found[ZYGOTE_PAGES_MAX_RANGES];

/* A kernel writes 10 of the shared pages: those are listed, no others of
 * the area, and none of an area it only read. */
static int write_ten(void *unused)
{
        ssize_t n;
        volatile char sum = 0;

        for (size_t i = 0; i < 10; i++)
                shared_area[(20 + i) * pg] = 2;
        for (size_t i = 0; i < NPAGES; i++)
                sum += other_area[i * pg];
        n = zygote_pages_written(found, ZYGOTE_PAGES_MAX_RANGES);
        if (n < 0)
                return 255;
        return (int)(covered(found, (size_t)n, shared_area, NPAGES * pg) * 10 +
                     covered(found, (size_t)n, other_area, NPAGES * pg));
}

static void test_written(void)
{
        ok(in_child(write_ten, NULL) == 100,
           "a forked process lists the 10 shared pages it wrote, and none it only read");
}

/* The kernel forked with the report: writes pages 5-14, reports. */
static int report_kernel(void *unused)
{
        if (!zygote_pages_mine())
                return 1;
        for (size_t i = 5; i < 15; i++)
                shared_area[i * pg] = 3;
        if (zygote_pages_report_now() <= 0)
                return 2;
        /* Unmapped: no code after the report can change it. */
        return zygote_pages_mine() == NULL ? 0 : 3;
}

static struct zygote_pages_report *seen;

/* A later child: has it the report's memory? */
static int later_child(void *unused)
{
        unsigned char vec;

        return zygote_pages_mine() != NULL                      ? 1
               : mincore(seen, pg, &vec) < 0 && errno == ENOMEM ? 0
                                                                : 2;
}

/* A process forked ahead: copies the list's pages, which it then holds
 * alone. */
static int ahead_process(void *unused)
{
        size_t copied = zygote_pages_copy();
        ssize_t n = zygote_pages_written(found, ZYGOTE_PAGES_MAX_RANGES);

        if (copied < 10 || n < 0)
                return 1;
        return (int)covered(found, (size_t)n, shared_area + 5 * pg, 10 * pg);
}

static void test_report_round_trip(void)
{
        size_t taken;

        ok(zygote_pages_collect() == 0, "no list before any report");
        zygote_pages_offer();
        seen = zygote_pages_mine();
        ok(seen != NULL, "the zygote offers a report to the kernel it forks");
        is_int(in_child(report_kernel, NULL), 0,
               "the kernel has it, writes its list and unmaps it");
        zygote_pages_forked();
        is_int(in_child(later_child, NULL), 0, "a child forked after that kernel has no report");
        taken = zygote_pages_collect();
        ok(taken >= 10, "the zygote takes the list (%zu pages)", taken);
        is_uint(covered(list, nlist, shared_area, NPAGES * pg), 10,
                "the list has the 10 pages the kernel wrote of the shared area");
        zygote_pages_offer();
        ok(zygote_pages_mine() == NULL && npending == 0,
           "with a list, no more reports are offered, and none is left pending");
        is_int(in_child(ahead_process, NULL), 10,
               "a process forked ahead copies those pages: its own before it runs anything");
}

static int by_start(const void *a, const void *b)
{
        const struct zygote_pages_range *x = a, *y = b;

        return x->start < y->start ? -1 : x->start > y->start;
}

static void test_accept(void)
{
        char *ro = mmap(NULL, 4 * pg, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        char *sh = mmap(NULL, 4 * pg, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        size_t big_len = (size_t)(ZYGOTE_PAGES_MAX_PAGES + 100) * pg;
        char *big = mmap(NULL, big_len, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        struct zygote_pages_range in[6], out[8];
        uint64_t a = (uint64_t)(uintptr_t)shared_area;
        size_t n;

        if (ro == MAP_FAILED || sh == MAP_FAILED || big == MAP_FAILED) {
                ok(0, "test mappings");
                return;
        }
        in[0] = (struct zygote_pages_range){(uint64_t)(uintptr_t)ro, 4 * pg};
        in[1] = (struct zygote_pages_range){(uint64_t)(uintptr_t)sh, 4 * pg};
        in[2] = (struct zygote_pages_range){a + 1, pg};
        in[3] = (struct zygote_pages_range){a + (NPAGES - 2) * pg, 3 * pg};
        in[4] = (struct zygote_pages_range){UINT64_MAX & ~(uint64_t)(pg - 1), 2 * pg};
        in[5] = (struct zygote_pages_range){0, 0};
        /* In address order, as a kernel's scan lists them. */
        qsort(in, 6, sizeof(in[0]), by_start);
        n = zygote_pages_accept(in, 6, out, 8);
        is_uint(n, 1,
                "of read-only, shared, unaligned, overrunning, wrapping and empty "
                "ranges, one is kept");
        ok(n == 1 && out[0].start == a + (NPAGES - 2) * pg && out[0].len == 2 * pg,
           "the overrunning one, cut at its mapping's end");
        in[0] = (struct zygote_pages_range){(uint64_t)(uintptr_t)big, big_len};
        n = zygote_pages_accept(in, 1, out, 8);
        ok(n == 1 && out[0].len == (uint64_t)ZYGOTE_PAGES_MAX_PAGES * pg,
           "a list is cut at %d pages", ZYGOTE_PAGES_MAX_PAGES);
        in[0] = (struct zygote_pages_range){a + 4 * pg, pg};
        in[1] = (struct zygote_pages_range){a, pg};
        n = zygote_pages_accept(in, 2, out, 8);
        is_uint(n, 1, "ranges out of order: only those in order are kept");
        munmap(ro, 4 * pg);
        munmap(sh, 4 * pg);
        munmap(big, big_len);
}

/* A mapping whose line in /proc/self/maps is longer than a read of it
 * (its file's long path) is read whole, and the lines after it too. */
static void test_long_lines(void)
{
        char dir[300], path[600], name[201];
        struct zygote_pages_range in[2], out[4];
        size_t n;
        char *m;
        int fd;

        memset(name, 'x', 200);
        name[200] = '\0';
        snprintf(dir, sizeof(dir), "/tmp/glovebox-test-zygote-pages-%d-%s", (int)getpid(), name);
        snprintf(path, sizeof(path), "%s/%s", dir, name);
        fd = mkdir(dir, 0700) < 0 ? -1 : open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd < 0 || ftruncate(fd, (off_t)(2 * pg)) < 0) {
                ok(0, "a file of a long name");
                return;
        }
        m = mmap(NULL, 2 * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
        close(fd);
        unlink(path);
        rmdir(dir);
        if (m == MAP_FAILED) {
                ok(0, "its mapping");
                return;
        }
        in[0] = (struct zygote_pages_range){(uint64_t)(uintptr_t)m, 2 * pg};
        in[1] = (struct zygote_pages_range){(uint64_t)(uintptr_t)shared_area, pg};
        if (in[1].start < in[0].start) {
                struct zygote_pages_range t = in[0];

                in[0] = in[1];
                in[1] = t;
        }
        n = zygote_pages_accept(in, 2, out, 4);
        is_uint(n, 2, "a file's private mapping of a long path, and the mapping after it");
        m[0] = 1;
        n = (size_t)zygote_pages_written(out, 4096);
        ok(covered(out, n, m, 2 * pg) == 1, "the page written of it is listed");
        munmap(m, 2 * pg);
}

/* A report that says more ranges than it holds is read up to its size. */
static void test_overlong_report(void)
{
        struct zygote_pages_report *r;

        nlist = list_pages = 0;
        listed = false;
        zygote_pages_offer();
        r = zygote_pages_mine();
        zygote_pages_forked();
        if (!r) {
                ok(0, "a report offered");
                return;
        }
        for (size_t i = 0; i < ZYGOTE_PAGES_MAX_RANGES; i++)
                r->r[i] = (struct zygote_pages_range){(uint64_t)(uintptr_t)shared_area, pg};
        r->n = UINT32_MAX;
        __atomic_store_n(&r->done, 1, __ATOMIC_RELEASE);
        is_uint(zygote_pages_collect(), 1, "read up to its end; the repeated range kept once");
}

/* A rehearsal's report (the zygote's own child, before any kernel) joins
 * the list; kernels are still offered reports, and the first that lists
 * pages joins it too. */
static int rehearsal_child(void *unused)
{
        for (size_t i = 40; i < 44; i++)
                shared_area[i * pg] = 4;
        return zygote_pages_report_now() > 0 ? 0 : 1;
}

static void test_rehearsal(void)
{
        while (npending > 0)
                munmap(pending[--npending], sizeof(*pending[0]));
        nlist = list_pages = 0;
        listed = false;
        zygote_pages_offer_rehearsal();
        is_int(in_child(rehearsal_child, NULL), 0, "the rehearsal writes its report");
        zygote_pages_forked();
        /* A kernel forked meanwhile, whose report has not come. */
        zygote_pages_offer();
        zygote_pages_forked();
        ok(zygote_pages_rehearsed() >= 4 && covered(list, nlist, shared_area, NPAGES * pg) == 4,
           "its 4 pages are in the list");
        ok(rehearsal_report == NULL && npending == 1,
           "its report is taken, the kernel's left pending");
        zygote_pages_offer();
        ok(zygote_pages_mine() != NULL, "a kernel is still offered a report");
        is_int(in_child(report_kernel, NULL), 0, "the kernel writes its list");
        zygote_pages_forked();
        zygote_pages_collect();
        is_uint(covered(list, nlist, shared_area, NPAGES * pg), 14,
                "the list has the kernel's 10 pages and the rehearsal's 4");
        zygote_pages_offer();
        ok(zygote_pages_mine() == NULL, "then no more reports are offered");
        nlist = list_pages = 0;
        listed = false;
        zygote_pages_offer_rehearsal();
        zygote_pages_forked();
        zygote_pages_rehearsed();
        ok(nlist == 0 && rehearsal_report == NULL,
           "a rehearsal that wrote nothing: no list, its report unmapped");
}

/* The union of two lists: overlaps and adjacent ranges joined, in order;
 * the page cap and the range cap kept. */
static void test_merge(void)
{
        const uint64_t P = 4096, B = 0x7f0000000000;
        struct zygote_pages_range a[] = {{B, 2 * P}, {B + 10 * P, 4 * P}, {B + 30 * P, P}};
        struct zygote_pages_range b[] = {{B + P, 3 * P}, {B + 12 * P, 4 * P}, {B + 20 * P, P}};
        struct zygote_pages_range out[8], big = {B, (uint64_t)(ZYGOTE_PAGES_MAX_PAGES + 9) * P};
        size_t n = zygote_pages_merge(a, 3, b, 3, out, 8);

        ok(n == 4 && out[0].start == B && out[0].len == 4 * P && out[1].start == B + 10 * P &&
               out[1].len == 6 * P && out[2].start == B + 20 * P && out[2].len == P &&
               out[3].start == B + 30 * P && out[3].len == P,
           "overlapping ranges joined, the others kept, in address order");
        is_uint(zygote_pages_merge(a, 3, NULL, 0, out, 8), 3, "with an empty list: the other");
        n = zygote_pages_merge(&big, 1, b, 3, out, 8);
        ok(n == 1 && out[0].len == (uint64_t)ZYGOTE_PAGES_MAX_PAGES * P, "at most %d pages in all",
           ZYGOTE_PAGES_MAX_PAGES);
        is_uint(zygote_pages_merge(a, 3, b, 3, out, 2), 2, "at most max ranges");
}

/* Reports that never come: the oldest gives way; none grows past the cap. */
static void test_reporters_bounded(void)
{
        nlist = list_pages = 0;
        listed = false;
        for (int i = 0; i < ZYGOTE_PAGES_REPORTERS + 5; i++) {
                zygote_pages_offer();
                zygote_pages_forked();
        }
        is_uint(npending, ZYGOTE_PAGES_REPORTERS, "at most %d reports wait",
                ZYGOTE_PAGES_REPORTERS);
}

/* Each mapping of a maps file as zygote_pages_next_mapping reads it: the
 * fields of an anonymous mapping, the heap and a file's; a line longer
 * than its buffer read whole, the next one after it; a line that is no
 * mapping skipped. */
static void test_next_mapping(void)
{
        char text[1024], name[401];
        struct zygote_pages_mapping m;
        FILE *f;
        int got = 0;

        memset(name, 'y', 400);
        name[400] = '\0';
        snprintf(
            text, sizeof(text),
            "7f0000000000-7f0000200000 rw-p 00000000 00:00 0 \n"
            "55aa00000000-55aa00021000 rw-p 00000000 00:00 0                          [heap]\n"
            "7f1000000000-7f1000002000 r--p 00001000 fe:01 4242                       /usr/lib/%s\n"
            "not a mapping\n"
            "7f2000000000-7f2000001000 rw-s 00000000 00:01 77                         /dev/zero "
            "(deleted)\n",
            name);
        f = fmemopen(text, strlen(text), "r");
        if (!f) {
                ok(0, "fmemopen");
                return;
        }
        if (zygote_pages_next_mapping(f, &m)) {
                got++;
                ok(m.start == 0x7f0000000000 && m.end == 0x7f0000200000 && m.inode == 0 &&
                       strcmp(m.perms, "rw-p") == 0 && m.path[0] == '\0',
                   "an anonymous mapping: its bounds, permissions, no inode, no path");
        }
        if (zygote_pages_next_mapping(f, &m)) {
                got++;
                ok(strcmp(m.path, "[heap]") == 0 && m.inode == 0, "the heap, by its name");
        }
        if (zygote_pages_next_mapping(f, &m)) {
                got++;
                ok(m.inode == 4242 && strcmp(m.perms, "r--p") == 0 &&
                       strcmp(m.path, "/usr/lib/yyyyyy") == 0,
                   "a file's mapping of a 409-byte path: its first 15 bytes");
        }
        if (zygote_pages_next_mapping(f, &m)) {
                got++;
                ok(m.start == 0x7f2000000000 && strcmp(m.perms, "rw-s") == 0 && m.inode == 77,
                   "after the long line and a line that is no mapping, the next mapping");
        }
        is_int(got, 4, "four mappings read");
        ok(!zygote_pages_next_mapping(f, &m), "then the end");
        fclose(f);
}

int main(void)
{
        pg = (size_t)sysconf(_SC_PAGESIZE);
        shared_area = touched_area(NPAGES);
        other_area = touched_area(NPAGES);
        if (!shared_area || !other_area) {
                ok(0, "test areas");
                return done_testing();
        }
        test_written();
        test_report_round_trip();
        test_accept();
        test_long_lines();
        test_next_mapping();
        test_overlong_report();
        test_reporters_bounded();
        test_rehearsal();
        test_merge();
        return done_testing();
}
