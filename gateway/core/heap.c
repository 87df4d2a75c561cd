#include "autoconf.h"

#include "gateway/core/heap.h"
#include "gateway/core/loop.h"
#include "protocol/log.h"

#include <malloc.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static struct {
        bool managed; /* false: the operator tuned the allocator */
        bool busy;
        lws_sorted_usec_list_t idle;
} heap;

/* glibc's default: the free top of the heap beyond this is given back at
 * once. */
#define TRIM_AT_REST (128 * 1024)
/* A heap (the main arena's) larger than this is looked at every
 * HEAP_IDLE_MS after a busy period, for buffers freed since. */
#define HEAP_SWEEP_ABOVE (16 * 1024 * 1024)

static void set_resting(void)
{
        mallopt(M_MMAP_THRESHOLD, HEAP_LARGE);
        mallopt(M_TRIM_THRESHOLD, TRIM_AT_REST);
}

void heap_init(void)
{
        const char *tunables = getenv("GLIBC_TUNABLES");

        heap.managed = !tunables ||
                       (!strstr(tunables, "mmap_threshold") && !strstr(tunables, "trim_threshold"));
        if (!heap.managed)
                return;
        /* One arena for every thread: ZMQ's I/O thread allocates the
         * receive buffers and the loop frees them. In an arena of its own
         * the I/O thread's freed top would stay resident after a burst
         * (malloc_trim gives back only the main arena's top), and the
         * gateway's two threads hardly contend for the lock. */
        mallopt(M_ARENA_MAX, 1);
        /* (Fixed thresholds also stop glibc from raising them after the
         * first large free, which would keep a burst's memory for good.) */
        set_resting();
}

/* Free bytes in the heap after the last trim: more than HEAP_LARGE above
 * it means buffers of the busy period were freed since (a stalled
 * client's backlog, a deleted kernel's queue), to be given back too. */
static size_t free_after_trim;

/* Gives back every free page, in the middle of the heap too, not only its
 * top. */
static void trim(void)
{
        malloc_trim(0);
        free_after_trim = mallinfo2().fordblks;
}

static void on_idle(lws_sorted_usec_list_t *sul)
{
        struct mallinfo2 info;

        if (heap.busy) {
                heap.busy = false;
                set_resting();
                trim();
                log_debug("large messages stopped: freed buffers given back");
        } else {
                info = mallinfo2();
                if (info.fordblks > free_after_trim + HEAP_LARGE)
                        trim();
                else if (info.fordblks < free_after_trim)
                        free_after_trim = info.fordblks;
        }
        /* What the busy period allocated from the heap may be freed later
         * still: looked at again while the heap is larger than at rest. */
        if (mallinfo2().arena > HEAP_SWEEP_ABOVE)
                loop_timer_start(sul, on_idle, HEAP_IDLE_MS);
}

void heap_message_seen(size_t bytes)
{
        if (!heap.managed || bytes < HEAP_LARGE)
                return;
        if (!heap.busy) {
                heap.busy = true;
                /* Buffers up to HEAP_KEEP come from the heap and stay in it
                 * when freed; what the heap keeps is what was live at the
                 * busiest moment (the relay's bounds), no more. */
                mallopt(M_MMAP_THRESHOLD, HEAP_KEEP);
                mallopt(M_TRIM_THRESHOLD, HEAP_KEEP);
        }
        loop_timer_start(&heap.idle, on_idle, HEAP_IDLE_MS);
}
