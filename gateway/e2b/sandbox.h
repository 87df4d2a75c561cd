/* An E2B sandbox as the E2B family's own modules see it: create.c makes
 * them, control.c lists them, lifecycle.c keeps them and pauses, resumes
 * and ends them, e2b.c checks their credentials; contexts.c runs their
 * code interpreter. Nothing outside gateway/e2b/ includes this (other
 * families use e2b.h). */
#ifndef GLOVEBOX_E2B_SANDBOX_H
#define GLOVEBOX_E2B_SANDBOX_H

#include "gateway/e2b/metrics.h"
#include "gateway/core/http.h"
#include "gateway/core/keys.h"
#include "gateway/kernels/kernels.h"
#include "gateway/kernels/sandboxes.h"
#include "protocol/fleetid.h"
#include "protocol/hostmsg.h"
#include "protocol/ids.h"

#include <jansson.h>
#include <limits.h>
#include <stdbool.h>
#include <time.h>

#define E2B_MAX_ENV 256 /* envVars and env_vars: keys in one */

/* A code context: a kernel of the sandbox, or one still to start (the
 * default JavaScript context starts its kernel at its first use). */
struct e2b_context {
        struct e2b_context *next; /* in creation order */
        char id[JP_UUID_SIZE];
        char language[32]; /* E2B's name: python, javascript, r, bash, ... */
        char cwd[PATH_MAX];
        char kernel_id[JP_UUID_SIZE]; /* "" until its kernel starts */
        bool on_first_use;            /* a default context: its kernel starts when used */
};

/* Its sudo service (e2b_sudo.h). */
enum e2b_sudo_state { E2B_SUDO_NONE, E2B_SUDO_STARTING, E2B_SUDO_READY, E2B_SUDO_FAILED };

/* A sandbox is running, or on disk (pause.h) with no box at all, or on
 * its way between the two; requests to its own plane need it running. */
enum e2b_phase { E2B_RUNNING, E2B_PAUSING, E2B_PAUSED, E2B_RESUMING };

struct e2b_sandbox {
        struct e2b_sandbox *next;
        char id[FLEETID_SANDBOX_SIZE];
        char owner[KEYS_NAME_MAX]; /* the tenant whose key created it */
        char token[65];            /* envd's (envdAccessToken): its files, processes, signed URLs */
        char traffic_token[65];    /* its ports' (trafficAccessToken): another secret, so that
                                    * one given out for an app opens no envd */
        char template_id[64];
        char workdir[PATH_MAX]; /* a built template's: its commands' default cwd */
        json_t *metadata;
        json_t *env;
        char **volumes; /* volumeMounts, "UUID:/path" (kernels/volumes.h); NULL: none */
        const struct jp_kernelspec *spec; /* of its first context: its template's */
        struct sandbox *box;
        char started_at[JP_TIMESTAMP_SIZE];
        time_t end_at;
        double lifetime; /* asked for at create; counted again from ready */
        lws_sorted_usec_list_t ttl;
        struct e2b_context *contexts;
        bool ready; /* its default context answered; listed from then on */
        enum e2b_phase phase;
        struct hostmsg_limits limits; /* its box's, kept while paused (box NULL) */
        bool on_timeout_pause;        /* lifecycle onTimeout 'pause': paused, not killed */
        bool ports_public;            /* every port needs no token (set_public_traffic) */
        char request_host[SANDBOX_REQUEST_HOST_MAX]; /* network.maskRequestHost, or "" */
        /* The pause or resume (or connect) waiting for the phase to
         * change, or NULL: its answer comes then. */
        struct http_request *pending;
        bool pending_connect;   /* a connect: answered as one */
        double pending_timeout; /* a connect's or resume's timeout; 0: its lifetime */
        struct waiter resume_waiter;
        double phase_started;       /* loop_now() when pausing or resuming began */
        struct e2b_metrics metrics; /* its history of use, sampled while it runs */
        enum e2b_sudo_state sudo;   /* its sudo service, on its current box */
        /* A sandbox made from a snapshot (snapshots.h): its files come
         * from there as its resume's, and it is removed if that fails. */
        char from_snapshot[64];
        /* Told instead of pending when its resume ends (a fork's): error
         * NULL once it runs. */
        void (*on_resumed)(struct e2b_sandbox *s, const char *error, void *ctx);
        void *on_resumed_ctx;
        /* Paused with its memory (pause_memory.c): the checkpoint's name
         * and its contexts with their kernels; "" and NULL otherwise. */
        char checkpoint[JP_UUID_SIZE];
        json_t *memory_contexts;
        json_t *memory_commands; /* envd_commands_record's, with the checkpoint */
        uint64_t checkpoint_bytes; /* what the checkpoint takes on disk */
        /* A fork's copy, made from a checkpoint it shares with its
         * siblings (the fork removes it): killed, not left paused, when
         * its start fails. */
        bool fork_copy;
        struct sandbox_waiter restore_wait;
        bool auto_pause_memory; /* lifecycle: a timeout's pause keeps memory (autoPauseMemory) */
        /* lifecycle autoResume (wake.c): a request on its plane resumes
         * it; those waiting for that, the bound of their wait, and the
         * resume started on the loop's next turn. */
        bool auto_resume;
        struct sandbox_wake *wakes;
        lws_sorted_usec_list_t wake_deadline, wake_start;
        char pause_notice[512]; /* why its last pause kept the files only */
};

/* Every E2B sandbox of this host, paused ones included (lifecycle.c's
 * list). */
struct e2b_sandbox *e2b_sandboxes(void);
/* Whether v is absent or an object of at most max string values. */
bool e2b_string_map(json_t *v, size_t max);

#endif
