/* The pages a zygote kernel's start writes, copied ahead (zygote_pages.h). */
#include "autoconf.h"

#include "kernel-host/zygote_pages.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif

/* /proc/self/pagemap: one 64-bit entry per page. */
#define PM_PRESENT   (1ull << 63)
#define PM_FILE      (1ull << 61) /* a file's page, or shared anonymous */
#define PM_EXCLUSIVE (1ull << 56) /* mapped by this process alone */
#define PM_CHUNK     512          /* entries read at once */

static uint64_t page_size(void)
{
        static uint64_t size;

        if (!size)
                size = (uint64_t)sysconf(_SC_PAGESIZE);
        return size;
}

/* In a kernel: the report it was forked with. In the zygote: the one
 * offered to the kernel being forked. */
static struct zygote_pages_report *offered;

/* The rehearsal's report, until it has ended. */
static struct zygote_pages_report *rehearsal_report;

/* The zygote's reports not yet read, oldest first. */
static struct zygote_pages_report *pending[ZYGOTE_PAGES_REPORTERS];
static size_t npending;

/* The list taken, which every process forked ahead copies: a kernel's
 * report and the zygote's rehearsal's, together. */
static struct zygote_pages_range list[ZYGOTE_PAGES_MAX_RANGES];
static size_t nlist, list_pages;

/* Whether a kernel's report is in the list: no more are offered. */
static bool listed;

bool zygote_pages_next_mapping(FILE *maps, struct zygote_pages_mapping *m)
{
        char line[256];

        while (fgets(line, sizeof(line), maps)) {
                bool whole = strchr(line, '\n') != NULL;
                unsigned long start, end, offset, inode;
                int got;

                m->path[0] = '\0';
                got = sscanf(line, "%lx-%lx %4s %lx %*s %lu %15s", &start, &end, m->perms, &offset,
                             &inode, m->path);
                while (!whole && fgets(line, sizeof(line), maps))
                        whole = strchr(line, '\n') != NULL;
                if (got < 5)
                        continue;
                m->start = start;
                m->end = end;
                m->inode = inode;
                return true;
        }
        return false;
}

/* The next private writable mapping of maps: false at its end. */
static bool next_mapping(FILE *maps, uint64_t *start, uint64_t *end)
{
        struct zygote_pages_mapping m;

        while (zygote_pages_next_mapping(maps, &m)) {
                if (m.perms[0] == 'r' && m.perms[1] == 'w' && m.perms[3] == 'p') {
                        *start = m.start;
                        *end = m.end;
                        return true;
                }
        }
        return false;
}

/* Appends [start, end) to out, joined to the last range where they meet. */
static void add_range(struct zygote_pages_range *out, size_t *n, uint64_t start, uint64_t end)
{
        if (*n > 0 && out[*n - 1].start + out[*n - 1].len == start) {
                out[*n - 1].len += end - start;
                return;
        }
        out[*n].start = start;
        out[*n].len = end - start;
        (*n)++;
}

ssize_t zygote_pages_written(struct zygote_pages_range *out, size_t max)
{
        FILE *maps = fopen("/proc/self/maps", "re");
        int pm = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
        uint64_t entry[PM_CHUNK];
        uint64_t start, end;
        ssize_t rc = 0;
        size_t n = 0;

        if (!maps || pm < 0) {
                rc = -errno;
                goto out;
        }
        while (n < max && next_mapping(maps, &start, &end)) {
                uint64_t run = 0;
                bool in_run = false;

                for (uint64_t at = start; at < end && n < max;) {
                        size_t want = (size_t)((end - at) / page_size());
                        ssize_t got;

                        want = want < PM_CHUNK ? want : PM_CHUNK;
                        got = pread(pm, entry, want * sizeof(entry[0]),
                                    (off_t)(at / page_size() * sizeof(entry[0])));
                        if (got <= 0) {
                                rc = got < 0 ? -errno : -EIO;
                                goto out;
                        }
                        for (size_t i = 0; i < (size_t)got / sizeof(entry[0]);
                             i++, at += page_size()) {
                                bool written = (entry[i] & (PM_PRESENT | PM_EXCLUSIVE | PM_FILE)) ==
                                               (PM_PRESENT | PM_EXCLUSIVE);

                                if (written && !in_run)
                                        run = at;
                                if (!written && in_run && n < max)
                                        add_range(out, &n, run, at);
                                in_run = written;
                        }
                }
                if (in_run && n < max)
                        add_range(out, &n, run, end);
        }
        rc = (ssize_t)n;
out:
        if (maps)
                fclose(maps);
        if (pm >= 0)
                close(pm);
        return rc;
}

struct zygote_pages_report *zygote_pages_mine(void)
{
        return offered;
}

ssize_t zygote_pages_report_now(void)
{
        struct zygote_pages_report *r = offered;
        ssize_t n;

        if (!r)
                return 0;
        offered = NULL;
        n = zygote_pages_written(r->r, ZYGOTE_PAGES_MAX_RANGES);
        r->n = n > 0 ? (uint32_t)n : 0;
        __atomic_store_n(&r->done, 1, __ATOMIC_RELEASE);
        munmap(r, sizeof(*r));
        return n;
}

void zygote_pages_drop(void)
{
        if (offered)
                munmap(offered, sizeof(*offered));
        offered = NULL;
}

/* A new report, shared with the child forked next; NULL if none could be
 * mapped. */
static struct zygote_pages_report *new_report(void)
{
        void *r = mmap(NULL, sizeof(struct zygote_pages_report), PROT_READ | PROT_WRITE,
                       MAP_SHARED | MAP_ANONYMOUS, -1, 0);

        return r == MAP_FAILED ? NULL : r;
}

void zygote_pages_offer(void)
{
        offered = NULL;
        if (listed)
                return;
        if (npending == ZYGOTE_PAGES_REPORTERS) {
                munmap(pending[0], sizeof(*pending[0]));
                memmove(pending, pending + 1, (npending - 1) * sizeof(pending[0]));
                npending--;
        }
        offered = new_report();
        if (offered)
                pending[npending++] = offered;
}

void zygote_pages_offer_rehearsal(void)
{
        offered = NULL;
        if (!rehearsal_report)
                offered = rehearsal_report = new_report();
}

void zygote_pages_forked(void)
{
        /* Only the kernel just forked may have it: marked for no later
         * fork to copy, and so for no other tenant's kernel to read. Not
         * marked, it goes: a report shared beyond one kernel is never
         * read. */
        if (offered && madvise(offered, sizeof(*offered), MADV_DONTFORK) < 0) {
                munmap(offered, sizeof(*offered));
                if (offered == rehearsal_report)
                        rehearsal_report = NULL;
                else
                        npending--;
        }
        offered = NULL;
}

size_t zygote_pages_accept(const struct zygote_pages_range *in, size_t n,
                           struct zygote_pages_range *out, size_t max)
{
        FILE *maps = fopen("/proc/self/maps", "re");
        uint64_t from = 0, to = 0, last = 0;
        size_t kept = 0, pages = 0;
        bool have;

        if (!maps)
                return 0;
        /* Both in address order: one pass over each. */
        have = next_mapping(maps, &from, &to);
        for (size_t i = 0; i < n && have && kept < max && pages < ZYGOTE_PAGES_MAX_PAGES; i++) {
                uint64_t start = in[i].start, end = in[i].start + in[i].len;

                /* Whole pages, in order, without wrapping: anything else
                 * is no list a kernel's scan makes. */
                if (start % page_size() || in[i].len % page_size() || end <= start || start < last)
                        continue;
                last = end;
                while (have && kept < max && pages < ZYGOTE_PAGES_MAX_PAGES) {
                        uint64_t a, b;

                        if (to <= start) {
                                have = next_mapping(maps, &from, &to);
                                continue;
                        }
                        if (from >= end)
                                break;
                        a = from > start ? from : start;
                        b = to < end ? to : end;
                        if ((b - a) / page_size() > ZYGOTE_PAGES_MAX_PAGES - pages)
                                b = a + (uint64_t)(ZYGOTE_PAGES_MAX_PAGES - pages) * page_size();
                        add_range(out, &kept, a, b);
                        pages += (size_t)((b - a) / page_size());
                        /* The mapping goes on past this range: the next
                         * range may lie in it too. */
                        if (to > end)
                                break;
                        have = next_mapping(maps, &from, &to);
                }
        }
        fclose(maps);
        return kept;
}

size_t zygote_pages_merge(const struct zygote_pages_range *a, size_t na,
                          const struct zygote_pages_range *b, size_t nb,
                          struct zygote_pages_range *out, size_t max)
{
        size_t i = 0, j = 0, n = 0, pages = 0;

        while ((i < na || j < nb) && pages < ZYGOTE_PAGES_MAX_PAGES) {
                const struct zygote_pages_range *r =
                    j >= nb || (i < na && a[i].start <= b[j].start) ? &a[i++] : &b[j++];
                uint64_t start = r->start, end = r->start + r->len;

                /* What the last range kept already covers is not counted
                 * twice; what goes past it joins it. */
                if (n > 0 && start < out[n - 1].start + out[n - 1].len)
                        start = out[n - 1].start + out[n - 1].len;
                if (end <= start)
                        continue;
                if ((end - start) / page_size() > ZYGOTE_PAGES_MAX_PAGES - pages)
                        end = start + (uint64_t)(ZYGOTE_PAGES_MAX_PAGES - pages) * page_size();
                if (n == max && out[n - 1].start + out[n - 1].len != start)
                        break;
                add_range(out, &n, start, end);
                pages += (size_t)((end - start) / page_size());
        }
        return n;
}

/* A report's ranges, copied out of it before they are looked at (what
 * wrote it has unmapped it, but nothing here trusts that), kept as
 * zygote_pages_accept keeps them and merged into the list; the report
 * unmapped. Whether it listed any. */
static bool take_report(struct zygote_pages_report *r)
{
        static struct zygote_pages_range copy[ZYGOTE_PAGES_MAX_RANGES];
        static struct zygote_pages_range got[ZYGOTE_PAGES_MAX_RANGES];
        static struct zygote_pages_range both[ZYGOTE_PAGES_MAX_RANGES];
        uint32_t n = r->n < ZYGOTE_PAGES_MAX_RANGES ? r->n : ZYGOTE_PAGES_MAX_RANGES;
        size_t ngot;

        memcpy(copy, r->r, n * sizeof(copy[0]));
        munmap(r, sizeof(*r));
        ngot = zygote_pages_accept(copy, n, got, ZYGOTE_PAGES_MAX_RANGES);
        if (ngot == 0)
                return false;
        nlist = zygote_pages_merge(list, nlist, got, ngot, both, ZYGOTE_PAGES_MAX_RANGES);
        memcpy(list, both, nlist * sizeof(list[0]));
        list_pages = 0;
        for (size_t i = 0; i < nlist; i++)
                list_pages += (size_t)(list[i].len / page_size());
        return true;
}

size_t zygote_pages_collect(void)
{
        size_t i = 0;

        while (i < npending && !listed) {
                struct zygote_pages_report *r = pending[i];

                if (!__atomic_load_n(&r->done, __ATOMIC_ACQUIRE)) {
                        i++;
                        continue;
                }
                memmove(pending + i, pending + i + 1, (npending - i - 1) * sizeof(pending[0]));
                npending--;
                listed = take_report(r);
        }
        if (listed) {
                while (npending > 0)
                        munmap(pending[--npending], sizeof(*pending[0]));
        }
        return list_pages;
}

size_t zygote_pages_rehearsed(void)
{
        struct zygote_pages_report *r = rehearsal_report;

        if (!r)
                return list_pages;
        rehearsal_report = NULL;
        if (__atomic_load_n(&r->done, __ATOMIC_ACQUIRE))
                take_report(r);
        else
                munmap(r, sizeof(*r));
        return list_pages;
}

size_t zygote_pages_copy(void)
{
        size_t pages = 0;

        for (size_t i = 0; i < nlist; i++) {
                if (madvise((void *)(uintptr_t)list[i].start, list[i].len, MADV_POPULATE_WRITE) ==
                    0)
                        pages += (size_t)(list[i].len / page_size());
        }
        return pages;
}
