/* E2B's getMetrics (GET /e2b/sandboxes/{id}/metrics?start=S&end=E): a short
 * history of each E2B sandbox's CPU, memory and disk use, and the samples
 * of a time range from it.
 *
 * A running sandbox is sampled when it becomes ready and then every
 * E2B_METRICS_PERIOD_MS (E2B collects in 5 s buckets too); the last
 * E2B_METRICS_SAMPLES are kept (10 minutes; each sample is a struct
 * sandbox_usage, 72 bytes on x86-64: under 9 KiB a sandbox, allocated at
 * its first sample). A paused sandbox is not sampled; its history stays
 * until it is removed.
 *
 * The answer is E2B's: the samples whose second lies in [start, end]
 * (Unix seconds, both optional: all there is), oldest first; start after
 * end is a 400. When the range reaches the present, a sample taken now
 * ends the answer, so that its last sample says how the sandbox is (as
 * Glovebox's answer always did); it is not kept, so a client asking often
 * does not push the history out. */
#ifndef GLOVEBOX_E2B_METRICS_H
#define GLOVEBOX_E2B_METRICS_H

#include "gateway/core/http.h"
#include "gateway/kernels/usage.h"
#include "gateway/kernels/sandboxes.h"

#include <libwebsockets.h>
#include <stddef.h>

#define E2B_METRICS_PERIOD_MS 5000
#define E2B_METRICS_SAMPLES   120

struct e2b_metrics {
        /* Sampled while set. Not a reference: the sandbox stops the
         * sampling before it lets its box go. */
        struct sandbox *box;
        lws_sorted_usec_list_t timer;
        struct sandbox_usage *ring; /* E2B_METRICS_SAMPLES of them, or NULL */
        size_t next;                /* where the next sample goes */
        size_t count;
};

/* Samples box now and every period from now on. m starts zeroed. */
void e2b_metrics_start(struct e2b_metrics *m, struct sandbox *box);
/* No more samples (the box is going away); the history stays. */
void e2b_metrics_stop(struct e2b_metrics *m);
/* Stops and frees the history. */
void e2b_metrics_clear(struct e2b_metrics *m);
/* Answers r with the samples of the range its query asks for. */
void e2b_metrics_reply(struct http_request *r, struct e2b_metrics *m);

#endif
