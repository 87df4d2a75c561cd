/* The pages a zygote kernel's start writes, copied ahead (issue 26).
 *
 * A kernel forked from a zygote shares the zygote's memory until it writes
 * to it; its start (confinement, the Jupyter loop's sockets and threads,
 * its first replies) writes about 2,300 pages (9 MiB with numpy, pandas
 * and matplotlib preloaded), each a copy-on-write fault in the request's
 * path, and under load, with the kernel's threads on other cores, a
 * flush of their TLBs each. A process forked ahead (zygote.h) has time
 * while it waits: it copies those pages then, in one call
 * (MADV_POPULATE_WRITE), and the kernel it becomes writes to its own.
 *
 * Which pages: a zygote's kernel says so of itself, once. The zygote
 * hands a kernel it forks 64 KiB of shared memory of its own (a report),
 * inherited by that kernel alone (the zygote marks it MADV_DONTFORK as soon
 * as that kernel is forked). Once the kernel's loop has started (its
 * sockets and threads up), before it reads any request, it lists the
 * pages it has written since its fork (present and mapped by it alone,
 * /proc/self/pagemap), writes the list into the report and unmaps it. A
 * kernel that runs anything else (ipykernel's application, another
 * module), or whose home has a user site directory (whose .pth files may
 * run code), unmaps its report unwritten before that. The zygote reads the
 * reports at its next requests, keeps of the first list that has any what
 * lies in its own private writable mappings, at most
 * ZYGOTE_PAGES_MAX_PAGES pages, and gives that list to every process it
 * forks ahead from then on. Up to ZYGOTE_PAGES_REPORTERS kernels report
 * at once (one may never get a request); a newer one takes the oldest's
 * place. Everything here is the zygote's and its kernels': no call
 * reaches the kernel-host.
 *
 * The rehearsal: that list ends where a kernel's loop starts, so it has
 * none of the pages a kernel's first requests write (ipykernel's
 * handlers, the display hook, the replies: about 400). Before it says it
 * is ready, the zygote forks a child of its own that runs a kernel of its
 * loop over in-process sockets on requests it sends itself (a
 * kernel_info, a cell that prints and shows a result), then lists the
 * pages it wrote into a report offered to it as to a kernel, and ends
 * (zygote_kernel.py's rehearse). Its list joins the kernels' one, so the
 * processes forked ahead copy those pages too. It reads no file and takes
 * no input: it is the zygote's own code on the zygote's own requests.
 *
 * What a list could do, were it wrong (a start unlike others, or code
 * that ran in the kernel before its report all the same): each process
 * forked ahead would copy up to 16 MiB of the zygote's own pages, no
 * more, no data of anyone's, charged to its sandbox's cgroup like any
 * page its kernel writes, and its kernel would run as any. */
#ifndef GLOVEBOX_ZYGOTE_PAGES_H
#define GLOVEBOX_ZYGOTE_PAGES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#define ZYGOTE_PAGES_MAX_RANGES 4096
#define ZYGOTE_PAGES_MAX_PAGES  4096 /* 16 MiB of x86-64 pages */
#define ZYGOTE_PAGES_REPORTERS  64

struct zygote_pages_range {
        uint64_t start, len; /* bytes, both whole pages */
};

/* A kernel's report, in memory shared with its zygote until it unmaps
 * it. done is set last. */
struct zygote_pages_report {
        uint32_t done;
        uint32_t n;
        struct zygote_pages_range r[ZYGOTE_PAGES_MAX_RANGES];
};

/* ---- in the kernel ---------------------------------------------------- */

/* Ranges of the calling process's private writable mappings whose pages
 * it has written since its fork (present, anonymous and mapped by it
 * alone), in address order, at most max into out. The number, or -errno
 * (of /proc/self/maps or pagemap). */
ssize_t zygote_pages_written(struct zygote_pages_range *out, size_t max);

/* The report this process was forked with (the zygote's offer), or NULL. */
struct zygote_pages_report *zygote_pages_mine(void);

/* Lists the pages written into this process's report, if it has one, and
 * unmaps it. The ranges listed, or -errno (the report then says none). */
ssize_t zygote_pages_report_now(void);

/* Unmaps this process's report, if it has one, unwritten: a kernel that
 * runs ipykernel's application, or any other program, rather than the
 * zygote's loop (whose start is not the one the list is for). */
void zygote_pages_drop(void);

/* ---- in the zygote ---------------------------------------------------- */

/* Before forking a kernel: while no list has been taken, a new report for
 * it (the oldest pending one unmapped if ZYGOTE_PAGES_REPORTERS are); the
 * kernel forked next inherits it as zygote_pages_mine(). */
void zygote_pages_offer(void);

/* Once the kernel has been forked: no later child inherits the report. */
void zygote_pages_forked(void);

/* Reads the pending reports: of the first that lists pages, merges what
 * zygote_pages_accept keeps into the list and unmaps them all. The pages
 * in the list (0: none yet). */
size_t zygote_pages_collect(void);

/* Before forking the rehearsal: a report for it (none while an earlier
 * one has not ended), which it inherits as zygote_pages_mine(); then
 * zygote_pages_forked() as for a kernel. */
void zygote_pages_offer_rehearsal(void);

/* Once the rehearsal has ended: its report read (if it was written) into
 * the list, which kernels' reports still join until one lists pages. The
 * pages in the list. */
size_t zygote_pages_rehearsed(void);

/* The union of two lists of ranges, each in address order: in address
 * order into out (max ranges at most), ZYGOTE_PAGES_MAX_PAGES at most in
 * all. The ranges written. */
size_t zygote_pages_merge(const struct zygote_pages_range *a, size_t na,
                          const struct zygote_pages_range *b, size_t nb,
                          struct zygote_pages_range *out, size_t max);

/* Of n ranges a kernel reported, the parts within this process's private
 * writable mappings (/proc/self/maps), whole pages, ZYGOTE_PAGES_MAX_PAGES
 * at most in all, into out (max ranges at most). The ranges kept. */
size_t zygote_pages_accept(const struct zygote_pages_range *in, size_t n,
                           struct zygote_pages_range *out, size_t max);

/* In a process forked ahead, before it waits: writes to each page of the
 * zygote's list (MADV_POPULATE_WRITE), so copying it now. The pages of
 * the ranges it could copy; a kernel without MADV_POPULATE_WRITE (before
 * 5.14) copies none, and its kernels fault them in as before. */
size_t zygote_pages_copy(void);

/* One mapping of /proc/self/maps: its bounds, its permissions ("rw-p"),
 * its file's inode (0 for anonymous memory) and the first 15 bytes of its
 * path ("" for anonymous memory, "[heap]", ...). */
struct zygote_pages_mapping {
        uint64_t start, end, inode;
        char perms[5];
        char path[16];
};

/* The next mapping of maps (an open /proc/self/maps), its line read to its
 * end however long (its path): false at the file's end. */
bool zygote_pages_next_mapping(FILE *maps, struct zygote_pages_mapping *m);

#endif
